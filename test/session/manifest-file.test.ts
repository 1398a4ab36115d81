// The manifest is read like a served file: a capsule controls its workdir, so `murmur.yaml` there
// is never followed through a symlink, never blocks on a FIFO, must be a regular file and is capped.
// Each case is the real command as a launcher runs it; none may hang, echo a host file, or create
// anything.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { makeTree, scratch } from '../helpers/tree.js';

const MANIFEST = 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n';
/** A fresh directory holding `workdir/` (and, once a launch writes one, `records/`), removed with the test. */
function base(): { base: string; workdir: string; trace: string } {
  const b = scratch(['workdir/out/a: a'], 'rp-manifest-file-');
  return { base: b, workdir: join(b, 'workdir'), trace: join(b, 'records', 'trace.jsonl') };
}

function expectRefused(r: { status: number | null; stderr: string }, why: RegExp, trace: string): void {
  expect(r.status).toBe(2);
  expect(r.stderr).toMatch(/^error\[E-MAN-003\]: cannot read the manifest '/);
  expect(r.stderr).toMatch(why);
  expect(existsSync(trace)).toBe(false);
}

describe('the default manifest, beneath the workdir', () => {
  it('a FIFO there is refused at once, never opened', () => {
    const { workdir, trace } = base();
    execFileSync('mkfifo', [join(workdir, 'murmur.yaml')]);
    expectRefused(runCli(['serve', '--workdir', workdir, '--trace', trace]), /not a regular file/, trace);
  });

  it('a symlink to a host file is refused and the host file is never echoed', () => {
    const { base: b, workdir, trace } = base();
    writeFileSync(join(b, 'host-secret.yaml'), 'name: HOST-ONLY-SECRET-e1f9\nversion: [oops\n');
    symlinkSync(join(b, 'host-secret.yaml'), join(workdir, 'murmur.yaml'));
    const r = runCli(['serve', '--workdir', workdir, '--trace', trace]);
    expectRefused(r, /is a symlink, which is never followed inside the workdir/, trace);
    expect(r.stderr).not.toContain('HOST-ONLY-SECRET');
    expect(r.stderr).toContain('pass --manifest FILE');
  });

  it('a symlink even to a file inside the workdir is refused', () => {
    const { workdir, trace } = base();
    writeFileSync(join(workdir, 'real.yaml'), MANIFEST);
    symlinkSync('real.yaml', join(workdir, 'murmur.yaml'));
    expectRefused(runCli(['serve', '--workdir', workdir, '--trace', trace]), /symlink/, trace);
  });

  it('one byte over the 1 MiB ceiling is refused; at the ceiling it is read', () => {
    const { workdir, trace } = base();
    const pad = (n: number) => `${MANIFEST}# ${'x'.repeat(n - MANIFEST.length - 3)}\n`;
    writeFileSync(join(workdir, 'murmur.yaml'), pad((1 << 20) + 1));
    expectRefused(runCli(['serve', '--workdir', workdir, '--trace', trace]), /larger than 1048576 bytes/, trace);
    writeFileSync(join(workdir, 'murmur.yaml'), pad(1 << 20));
    const r = runCli(['explain-scope', '--manifest', join(workdir, 'murmur.yaml'), '--json']);
    expect(r.status).toBe(0);
  });

  it('a directory named murmur.yaml is refused', () => {
    const { workdir, trace } = base();
    makeTree(workdir, ['murmur.yaml/']);
    expectRefused(runCli(['serve', '--workdir', workdir, '--trace', trace]), /not a regular file/, trace);
    expect(readdirSync(workdir).sort()).toEqual(['murmur.yaml', 'out']);
  });
});

describe('an explicit --manifest', () => {
  it('a FIFO is refused at once by serve and by explain-scope', () => {
    const { base: b, workdir, trace } = base();
    const fifo = join(b, 'm.yaml');
    execFileSync('mkfifo', [fifo]);
    expectRefused(runCli(['serve', '--workdir', workdir, '--manifest', fifo, '--trace', trace]), /not a regular file/, trace);
    expectRefused(runCli(['explain-scope', '--manifest', fifo]), /not a regular file/, trace);
  });

  it('an oversized file is refused; /dev/zero is never read', () => {
    const { base: b, workdir, trace } = base();
    writeFileSync(join(b, 'big.yaml'), `${MANIFEST}#${'x'.repeat(1 << 20)}\n`);
    expectRefused(runCli(['serve', '--workdir', workdir, '--manifest', join(b, 'big.yaml'), '--trace', trace]), /larger than/, trace);
    expectRefused(runCli(['explain-scope', '--manifest', '/dev/zero']), /not a regular file/, trace);
  });

  it('outside the workdir is the recommended launch: it serves', () => {
    const { base: b, workdir } = base();
    writeFileSync(join(b, 'grants.yaml'), MANIFEST);
    const r = runCli(['explain-scope', '--manifest', join(b, 'grants.yaml'), '--workdir', workdir, '--json']);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).exports_files.root).toBe('out/');
  });
});
