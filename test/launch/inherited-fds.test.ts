// Descriptors a launcher leaves open do not reach the confined image (issue 18, finding 6). Node
// does not mark the descriptors it inherited close-on-exec, so without care a descriptor the
// launcher held on a file outside the workdir would survive the Landlock re-exec and be readable
// from inside the domain, which checks only opens. The launcher here is a shell holding fd 200 on
// such a file when it execs `resource-plane serve`; the confined process, read from outside
// through /proc, must hold no descriptor on it. Without confinement (no re-exec) the same
// descriptor is still there: that is what proves the look through /proc can see it.
import { spawn } from 'node:child_process';
import { readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Confinement } from '../../src/session/confinement.js';
import { landlockAbi } from '../../src/addon/landlock.js';
import { defer } from '../helpers/cleanup.js';
import { CLI } from '../helpers/cli.js';
import { readTrace } from '../helpers/http.js';
import { scratch } from '../helpers/tree.js';
import { capsuleDir } from '../helpers/capsule.js';

const ABI = landlockAbi().abi;

/** `serve` exec'd by a shell that opened `outside` as fd 200; resolves with its pid once it listens. */
function serveFromShell(outside: string, args: string[]): Promise<number> {
  const child = spawn('bash', ['-c', 'exec 200<"$1"; shift; exec "$@"', 'launcher', outside, process.execPath, CLI, 'serve', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  defer(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve(child.pid!);
    });
    child.once('exit', (code) => reject(new Error(`serve exited ${code} before listening: ${err}`)));
  });
}

/** The descriptors of `pid` (from outside, through /proc) and what each one names. */
function descriptorsOf(pid: number): Map<number, string> {
  const fds = new Map<number, string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      fds.set(Number(fd), readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // closed between the listing and the readlink
    }
  }
  return fds;
}

function launchDirs(): { workdir: string; trace: string; outside: string } {
  const workdir = capsuleDir();
  return { workdir, trace: join(scratch(), 'trace.jsonl'), outside: join(scratch(['outside.txt: LAUNCHER-ONLY']), 'outside.txt') };
}

describe('a descriptor the launcher left open', () => {
  it.skipIf(ABI === 0)('is closed before the confined image runs', async () => {
    const { workdir, trace, outside } = launchDirs();
    const pid = await serveFromShell(outside, ['--workdir', workdir, '--trace', trace]);
    expect((readTrace(trace)[0]!.confinement as Confinement).applied).toBe(true);
    const fds = descriptorsOf(pid);
    expect([...fds.values()]).not.toContain(outside);
    expect(fds.has(200)).toBe(false);
    // stdin, stdout and stderr are still the launcher's.
    for (const fd of [0, 1, 2]) expect(fds.has(fd)).toBe(true);
  });

  it('is still held without confinement (no re-exec): the look through /proc sees it', async () => {
    const { workdir, trace, outside } = launchDirs();
    const pid = await serveFromShell(outside, ['--workdir', workdir, '--trace', trace, '--no-landlock']);
    expect((readTrace(trace)[0]!.confinement as Confinement).applied).toBe(false);
    expect(descriptorsOf(pid).get(200)).toBe(outside);
  });
});
