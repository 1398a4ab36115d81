// Silent misconfiguration made loud: a manifest key this server does not read is reported with
// the closest known key (a warning from serve and explain-scope, an E-MAN-003 under --strict),
// while the runtime's own keys elsewhere in the manifest pass quietly; serve logs a workdir it creates.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { unknownKeys } from '../../src/manifest/model.js';
import { runCli, startServe } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';

const TYPOS = 'name: t\nversion: "1"\nexports:\n  file:\n    root: out/\n    mode: read-only\n  peer_files:\n    root: out/\n    max_tll: 10m\ncapabilites:\n  network: {}\ntools: [search]\nmodel: small\n';

describe('unknownKeys', () => {
  it('reports every unknown key in the blocks this server owns, and typos of known keys elsewhere', () => {
    expect(unknownKeys(TYPOS)).toEqual([
      { key: 'capabilites', suggestion: 'capabilities' },
      { key: 'exports.file', suggestion: 'exports.files' },
      { key: 'exports.peer_files.max_tll', suggestion: 'exports.peer_files.max_ttl' },
    ]);
  });

  it("leaves the runtime's keys alone, and reports nothing for a manifest of known keys", () => {
    expect(unknownKeys('name: t\nversion: "1"\ntools: [a]\nmodel: x\nlifecycle:\n  after_task: exit\n  restart: always\n')).toEqual([]);
    expect(unknownKeys('name: t\nversion: "1"\nexports:\n  files: { root: out/, mode: read-only, max_bytes: 1Mi }\ncapabilities:\n  peer_fetch: { allow: [localhost] }\n')).toEqual([]);
    expect(unknownKeys('name: t\nversion: "1"\nexports:\n  thumbnails: {}\n')).toEqual([{ key: 'exports.thumbnails', suggestion: null }]);
  });
});

describe('serve and explain-scope', () => {
  function layout() {
    const base = scratch([]);
    const manifest = join(base, 'cap.yaml');
    writeFileSync(manifest, TYPOS);
    return { base, manifest, workdir: join(base, 'work'), records: join(base, 'records') };
  }

  it('serve warns of each unknown key with its suggestion, and logs the workdir it created', async () => {
    const { manifest, workdir, records } = layout();
    const s = await startServe(['--workdir', workdir, '--manifest', manifest], { RESOURCE_PLANE_RECORDS_DIR: records });
    try {
      const lines = s.stderr().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
      const warned = lines.filter((l) => l.level === 40 && typeof l.key === 'string');
      expect(warned.map((l) => [l.key, l.suggestion])).toEqual([
        ['capabilites', 'capabilities'],
        ['exports.file', 'exports.files'],
        ['exports.peer_files.max_tll', 'exports.peer_files.max_ttl'],
      ]);
      expect(warned[1].msg).toBe("unknown key 'exports.file' (did you mean 'exports.files'?) in the manifest: this server ignores it");
      expect(lines.some((l) => l.level === 30 && l.workdir === workdir && /created the workdir/.test(l.msg))).toBe(true);
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
  });

  it('serve --strict refuses them with E-MAN-003 and creates nothing', () => {
    const { manifest, workdir, records } = layout();
    const r = runCli(['serve', '--workdir', workdir, '--manifest', manifest, '--strict'], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("error[E-MAN-003]: ");
    expect(r.stderr).toContain("unknown key 'exports.file' (did you mean 'exports.files'?)");
    expect(existsSync(workdir)).toBe(false);
    expect(existsSync(records)).toBe(false);
  });

  it('explain-scope warns on stderr (its --json line stays alone on stdout), and --strict refuses', () => {
    const { base, manifest } = layout();
    mkdirSync(join(base, 'out'));
    const r = runCli(['explain-scope', '--manifest', manifest, '--json']);
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(() => JSON.parse(r.stdout)).not.toThrow();
    expect(r.stderr).toContain("warning: unknown key 'exports.file' (did you mean 'exports.files'?) in the manifest: this server ignores it\n");
    const strict = runCli(['explain-scope', '--manifest', manifest, '--strict']);
    expect(strict.status).toBe(2);
    expect(strict.stderr).toMatch(/^error\[E-MAN-003\]: .*unknown key 'capabilites'/);
  });
});
