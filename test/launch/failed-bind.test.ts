// A launch whose listener cannot bind leaves nothing behind: no records directory, no trace file,
// and no workdir it would have created. Checked on a real port held by this process, through the
// command (confined, which settles the session before its re-exec, and unconfined) and through
// launch(), with the records directory pointed at an empty temp directory.
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { launch } from '../../src/launch/launch.js';
import { parseManifest } from '../../src/manifest/model.js';
import { defer } from '../helpers/cleanup.js';
import { runCliAsync } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';
import { CAP_YAML, unmadeCapsule } from '../helpers/capsule.js';

/** A port this process listens on until the test ends. */
async function takenPort(): Promise<number> {
  const server = createServer((s) => s.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  defer(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as { port: number }).port;
}

/** An empty records directory, a manifest file, and a workdir path that does not exist yet. */
describe('serve on a port already in use', () => {
  for (const [name, extra] of [
    ['confined (the default)', []],
    ['with --no-landlock', ['--no-landlock']],
  ] as const) {
    it(`${name}: exits 1 and leaves no session and no workdir behind`, async () => {
      const port = await takenPort();
      const { records, manifest, workdir } = unmadeCapsule();
      const r = await runCliAsync(['serve', '--workdir', workdir, '--manifest', manifest, '--listen', `127.0.0.1:${port}`, ...extra], {
        RESOURCE_PLANE_RECORDS_DIR: records,
      });
      expect(r.status, r.stderr).toBe(1);
      // One line naming the flag and the address, not Node's bare `listen EADDRINUSE`.
      expect(r.stderr.split('\n').filter((l) => l.startsWith('error:'))).toEqual([
        `error: --listen 127.0.0.1:${port}: the address is already in use (EADDRINUSE): another process listens there; give --listen another address, or a port of 0 for any free one`,
      ]);
      expect(readdirSync(records)).toEqual([]);
      expect(existsSync(join(workdir, '..'))).toBe(false);
    });
  }

  it('the same for its operator listener, in a workdir that exists (kept as it was)', async () => {
    const port = await takenPort();
    const { records } = unmadeCapsule();
    const workdir = scratch(['out/a.txt: a']);
    writeFileSync(join(workdir, 'murmur.yaml'), CAP_YAML);
    const r = await runCliAsync(['serve', '--workdir', workdir, '--operator-listen', `127.0.0.1:${port}`], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toContain(
      `error: --operator-listen 127.0.0.1:${port}: the address is already in use (EADDRINUSE): another process listens there; give --operator-listen another address\n`,
    );
    expect(readdirSync(records)).toEqual([]);
    expect(readdirSync(workdir).sort()).toEqual(['murmur.yaml', 'out']);
  });
});

describe('launch() on a port already in use', () => {
  it('rejects, and leaves no session and no workdir behind', async () => {
    const port = await takenPort();
    const { records, workdir } = unmadeCapsule();
    const saved = process.env.RESOURCE_PLANE_RECORDS_DIR;
    process.env.RESOURCE_PLANE_RECORDS_DIR = records;
    defer(() => {
      process.env.RESOURCE_PLANE_RECORDS_DIR = saved;
    });
    const manifest = parseManifest(CAP_YAML);
    await expect(launch({ workdir, manifest, listen: `127.0.0.1:${port}` })).rejects.toThrow(/EADDRINUSE/);
    await expect(launch({ workdir, manifest, operatorListen: `127.0.0.1:${port}` })).rejects.toThrow(/EADDRINUSE/);
    expect(readdirSync(records)).toEqual([]);
    expect(existsSync(join(workdir, '..'))).toBe(false);
  });
});
