// Silent misconfiguration made loud: a manifest key this server does not read is reported with
// the closest known key. In a block this server owns (exports.*, the two allow lists) it is an
// E-MAN-003 by default; a likely typo in the runtime's blocks is a warning from serve and
// explain-scope (an E-MAN-003 under --strict), and the runtime's own keys pass quietly; serve logs
// a workdir it creates.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { unknownKeys } from '../../src/manifest/model.js';
import { runCli, startServe } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';

const TYPOS =
  'name: t\nversion: "1"\nexports:\n  file:\n    root: out/\n    mode: read-only\n  peer_files:\n    root: out/\n    max_tll: 10m\ncapabilites:\n  network: {}\ntools: [search]\nmodel: small\n';

describe('unknownKeys', () => {
  it('reports every unknown key in the blocks this server owns, and typos of known keys elsewhere', () => {
    expect(unknownKeys(TYPOS)).toEqual([
      { key: 'capabilites', suggestion: 'capabilities', owned: false },
      { key: 'exports.file', suggestion: 'exports.files', owned: true },
      { key: 'exports.peer_files.max_tll', suggestion: 'exports.peer_files.max_ttl', owned: true },
    ]);
  });

  it("leaves the runtime's keys alone, and reports nothing for a manifest of known keys", () => {
    expect(unknownKeys('name: t\nversion: "1"\ntools: [a]\nmodel: x\nlifecycle:\n  after_task: exit\n  restart: always\n')).toEqual([]);
    expect(
      unknownKeys(
        'name: t\nversion: "1"\nexports:\n  files: { root: out/, mode: read-only, max_bytes: 1Mi }\ncapabilities:\n  peer_fetch: { allow: [localhost] }\n',
      ),
    ).toEqual([]);
    expect(unknownKeys('name: t\nversion: "1"\nexports:\n  thumbnails: {}\n')).toEqual([{ key: 'exports.thumbnails', suggestion: null, owned: true }]);
  });
});

const OWNED_TYPO = 'name: t\nversion: "1"\nexports:\n  file:\n    root: out/\n    mode: read-only\n';
const RUNTIME_TYPOS =
  'name: t\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\ncapabilites:\n  network: {}\ntools: [search]\nmodel: small\n';

describe('serve and explain-scope', () => {
  function layout(text: string) {
    const base = scratch([]);
    const manifest = join(base, 'cap.yaml');
    writeFileSync(manifest, text);
    return { base, manifest, workdir: join(base, 'work'), records: join(base, 'records') };
  }

  it('serve refuses a typo in a block it owns by default, naming the closest key, and creates nothing', () => {
    const { manifest, workdir, records } = layout(OWNED_TYPO);
    const r = runCli(['serve', '--workdir', workdir, '--manifest', manifest], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      `error[E-MAN-003]: ${manifest}: unknown key 'exports.file' (did you mean 'exports.files'?)\n` +
        '  hint: this server reads that block and would ignore the key, leaving what it meant undeclared: fix the key\n',
    );
    expect(existsSync(workdir)).toBe(false);
    expect(existsSync(records)).toBe(false);
  });

  it('names the keys of the block when no known key is close, and every owned typo at once', () => {
    const { manifest } = layout('name: t\nversion: "1"\nexports:\n  thumbnails: {}\n  peer_files:\n    root: out/\n    max_tll: 10m\n');
    const r = runCli(['explain-scope', '--manifest', manifest]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(
      "unknown key 'exports.thumbnails' (exports has files, peer_files), unknown key 'exports.peer_files.max_tll' (did you mean 'exports.peer_files.max_ttl'?)",
    );
  });

  it("serve warns of a typo in the runtime's blocks with its suggestion, and logs the workdir it created", async () => {
    const { manifest, workdir, records } = layout(RUNTIME_TYPOS);
    const s = await startServe(['--workdir', workdir, '--manifest', manifest], { RESOURCE_PLANE_RECORDS_DIR: records });
    try {
      const lines = s
        .stderr()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l));
      const warned = lines.filter((l) => l.level === 40 && typeof l.key === 'string');
      expect(warned.map((l) => [l.key, l.suggestion])).toEqual([['capabilites', 'capabilities']]);
      expect(warned[0].msg).toBe("unknown key 'capabilites' (did you mean 'capabilities'?) in the manifest: this server ignores it");
      expect(lines.some((l) => l.level === 30 && l.workdir === workdir && /created the workdir/.test(l.msg))).toBe(true);
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
  });

  it("serve --strict refuses the runtime's typos too, with E-MAN-003, and creates nothing", () => {
    const { manifest, workdir, records } = layout(RUNTIME_TYPOS);
    const r = runCli(['serve', '--workdir', workdir, '--manifest', manifest, '--strict'], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('error[E-MAN-003]: ');
    expect(r.stderr).toContain("unknown key 'capabilites' (did you mean 'capabilities'?)");
    expect(r.stderr).toContain('drop --strict');
    expect(existsSync(workdir)).toBe(false);
    expect(existsSync(records)).toBe(false);
  });

  it('explain-scope warns on stderr (its --json line stays alone on stdout), and --strict refuses', () => {
    const { base, manifest } = layout(RUNTIME_TYPOS);
    mkdirSync(join(base, 'out'));
    const r = runCli(['explain-scope', '--manifest', manifest, '--json']);
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(() => JSON.parse(r.stdout)).not.toThrow();
    expect(r.stderr).toContain("warning: unknown key 'capabilites' (did you mean 'capabilities'?) in the manifest: this server ignores it\n");
    const strict = runCli(['explain-scope', '--manifest', manifest, '--strict']);
    expect(strict.status).toBe(2);
    expect(strict.stderr).toMatch(/^error\[E-MAN-003\]: .*unknown key 'capabilites'/);
  });

  it("the plugin's open refuses an owned typo as well", async () => {
    const { openSession } = await import('../../src/session/open-session.js');
    const base = scratch([]);
    const workdir = join(base, 'work');
    mkdirSync(workdir);
    writeFileSync(join(workdir, 'murmur.yaml'), OWNED_TYPO);
    await expect(openSession({ workdir, tracePath: join(base, 'trace.jsonl') })).rejects.toThrow("unknown key 'exports.file' (did you mean 'exports.files'?)");
  });
});
