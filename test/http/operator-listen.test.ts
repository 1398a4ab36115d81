// The operator plane apart (--operator-listen): peers that can reach the main listener to redeem a
// handle can no longer list or read the export there; the operator plane lives on its own listener,
// a unix socket created 0600 outside the workdir being the recommended deployment, in a private
// directory (the only kind accepted: the confined server may make and remove files there).
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { launch } from '../../src/launch/launch.js';
import { parseManifest } from '../../src/manifest/model.js';
import { capsule, filesManifest, type Capsule } from '../helpers/capsule.js';
import { runCli, runCliAsync, startServe } from '../helpers/cli.js';
import { rawGet, readTrace, unixGet } from '../helpers/http.js';
import { makeTree, scratch } from '../helpers/tree.js';

const YAML = `${filesManifest('out/')}  peer_files:\n    root: out/\n`;
const TREE = ['out/a.txt: operator bytes'];

/** A fresh base directory, removed with the test, holding `workdir/` (socket paths go beside it). */
function layout(): { base: string; workdir: string } {
  const base = scratch([], 'rp-oplisten-');
  const workdir = join(base, 'workdir');
  makeTree(workdir, TREE);
  return { base, workdir };
}

/** The capsule under test, its operator plane on `operatorListen`, closed when the test finishes. */
function up(operatorListen: string): Promise<Capsule> {
  return capsule({ yaml: YAML, tree: TREE, containment: 'sealed', operatorListen });
}

describe('--operator-listen unix:PATH', () => {
  it('serves the operator plane on a 0600 socket; the peer listener no longer serves /resources/files', async () => {
    const { base } = layout();
    const sock = join(base, 'op.sock');
    const l = await up(`unix:${sock}`);
    const { tracePath } = l;
    expect(l.operator!.url).toBe(`unix:${sock}`);
    expect(statSync(sock).mode & 0o777).toBe(0o600);
    expect(statSync(sock).isSocket()).toBe(true);

    const read = await unixGet(sock, '/resources/files/a.txt');
    expect(read).toEqual({ status: 200, body: 'operator bytes' });
    expect((await unixGet(sock, '/resources/files')).status).toBe(200);
    // The operator listener carries no peer plane and no card.
    expect((await unixGet(sock, '/.well-known/agent-card.json')).status).toBe(404);
    expect((await unixGet(sock, '/resources/peer/x')).status).toBe(404);

    // What a peer can reach: the card and the redeem, not the export.
    const before = readTrace(tracePath).length;
    for (const target of ['/resources/files', '/resources/files/', '/resources/files/a.txt', '/resources/files/%2E%2E/x', '/resources/files/x%ZZ']) {
      const res = await rawGet(l.server.url, target);
      expect(res.status, target).toBe(404);
      expect(res.json(), target).toEqual({ error: 'not_found', message: 'no such route' });
      expect(res.body.toString()).not.toContain('operator bytes');
    }
    expect(readTrace(tracePath).length).toBe(before);
    expect((await rawGet(l.server.url, '/.well-known/agent-card.json')).status).toBe(200);
    expect((await rawGet(l.server.url, '/resources/peer/mh1.x.y', [['x-murmur-audience', 'a@b:1']])).json().error).toBe('malformed_handle');
  });

  it('refuses a socket path inside the workdir, a relative one, and one that exists', async () => {
    const { base, workdir } = layout();
    const manifest = parseManifest(YAML);
    await expect(launch({ workdir, manifest, operatorListen: `unix:${join(workdir, 'op.sock')}` })).rejects.toThrow(/outside the workdir/);
    await expect(launch({ workdir, manifest, operatorListen: 'unix:op.sock' })).rejects.toThrow(/absolute path/);
    writeFileSync(join(base, 'taken'), '');
    await expect(launch({ workdir, manifest, operatorListen: `unix:${join(base, 'taken')}` })).rejects.toThrow(/must not exist/);
  });
});

describe('--operator-listen unix:PATH in a directory that is not private', () => {
  /** A directory with `mode` (and owner `uid`) beside the workdir, and a socket path in it. */
  function socketIn(mode: number, uid?: number): { base: string; dir: string; sock: string; workdir: string } {
    const { base, workdir } = layout();
    const dir = join(base, 'sockets');
    mkdirSync(dir);
    chmodSync(dir, mode);
    if (uid !== undefined) chownSync(dir, uid, uid);
    return { base, dir, sock: join(dir, 'op.sock'), workdir };
  }
  const refused = async (sock: string, workdir: string, why: RegExp) => {
    await expect(launch({ workdir, manifest: parseManifest(YAML), operatorListen: `unix:${sock}` })).rejects.toThrow(why);
    expect(existsSync(sock)).toBe(false);
  };

  it('refuses one writable by others, with or without the sticky bit, /tmp itself included', async () => {
    const open = socketIn(0o777);
    await refused(open.sock, open.workdir, new RegExp(`the directory '${open.dir}' is writable by group and others \\(mode 0777\\)`));
    const sticky = socketIn(0o1777);
    await refused(sticky.sock, sticky.workdir, /is writable by group and others \(mode 1777\)/);
    const others = socketIn(0o703);
    await refused(others.sock, others.workdir, /is writable by others \(mode 0703\)/);
    await refused(`/tmp/rp-op-${process.pid}.sock`, layout().workdir, /the directory '\/tmp' is writable by/);
  });

  it('refuses one writable by its group', async () => {
    const { sock, workdir } = socketIn(0o770);
    await refused(sock, workdir, /is writable by group \(mode 0770\)/);
  });

  it('refuses one owned by another user, private as it is', async () => {
    const { dir, sock, workdir } = socketIn(0o700, 65534);
    await refused(sock, workdir, new RegExp(`the directory '${dir}' is owned by uid 65534, not by this server's uid ${process.getuid!()}`));
  });

  it('refuses a directory named through a symlink, and one that does not exist', async () => {
    const { base, dir, workdir } = socketIn(0o700);
    symlinkSync(dir, join(base, 'link'));
    await refused(join(base, 'link', 'op.sock'), workdir, /the directory '.*\/link' is a symbolic link/);
    await refused(join(base, 'missing', 'op.sock'), workdir, /the directory '.*\/missing' does not exist/);
  });

  it('refuses a private directory under a 0777 parent reached through a symlink (every ancestor is checked, StrictModes-like)', async () => {
    const { base, workdir } = layout();
    const shared = join(base, 'shared');
    mkdirSync(join(shared, 'priv'), { recursive: true });
    chmodSync(shared, 0o777);
    chmodSync(join(shared, 'priv'), 0o700);
    symlinkSync(shared, join(base, 'publink'));
    await refused(
      join(base, 'publink', 'priv', 'op.sock'),
      workdir,
      new RegExp(`the directory '.*/publink/priv' lies under '${shared}', which is writable by others \\(mode 0777\\)`),
    );
    // Named directly, the same.
    await refused(join(shared, 'priv', 'op.sock'), workdir, /lies under '.*\/shared', which is writable by others/);
    // A group-writable ancestor too; a root-owned sticky one (as /tmp, where this test's scratch lives) is not refused.
    chmodSync(shared, 0o775);
    await refused(join(shared, 'priv', 'op.sock'), workdir, /lies under '.*\/shared', which is writable by its group \(mode 0775\)/);
    chmodSync(shared, 0o755);
    const l = await up(`unix:${join(base, 'publink', 'priv', 'op.sock')}`);
    expect(await unixGet(join(shared, 'priv', 'op.sock'), '/resources/files/a.txt')).toEqual({ status: 200, body: 'operator bytes' });
    await l.close();
  });

  it.skipIf(process.getuid?.() !== 0)('refuses a private directory under an ancestor another user owns', async () => {
    const { base, workdir } = layout();
    const theirs = join(base, 'theirs');
    mkdirSync(join(theirs, 'priv'), { recursive: true });
    chmodSync(join(theirs, 'priv'), 0o700);
    chownSync(theirs, 65534, 65534);
    await refused(join(theirs, 'priv', 'op.sock'), workdir, /lies under '.*\/theirs', which is owned by uid 65534/);
  });

  it('accepts a private one (0700, or 0750: readable, not writable, by the group) and serves there', async () => {
    for (const mode of [0o700, 0o750]) {
      const { sock } = socketIn(mode);
      const l = await up(`unix:${sock}`);
      expect(await unixGet(sock, '/resources/files/a.txt')).toEqual({ status: 200, body: 'operator bytes' });
      await l.close();
    }
  });

  it('serve refuses it as a usage error, before anything of the session exists', () => {
    const { sock, workdir } = socketIn(0o777);
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    const records = scratch();
    const r = runCli(['serve', '--workdir', workdir, '--operator-listen', `unix:${sock}`], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(
      /^error: --operator-listen unix:PATH: the directory '.*\/sockets' is writable by group and others \(mode 0777\); use a private directory/,
    );
    expect(existsSync(sock)).toBe(false);
    expect(readdirSync(records)).toEqual([]);
  });
});

describe('--operator-listen HOST:PORT', () => {
  it('splits the planes across two TCP listeners', async () => {
    const l = await up('127.0.0.1:0');
    expect((await rawGet(l.operator!.url, '/resources/files/a.txt')).body.toString()).toBe('operator bytes');
    expect((await rawGet(l.server.url, '/resources/files/a.txt')).status).toBe(404);
  });
});

describe('the command line over the unix socket', () => {
  it('serve announces operator_url; ls and get work over it', async () => {
    const { base, workdir } = layout();
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    const sock = join(base, 'cli.sock');
    const s = await startServe(['--workdir', workdir, '--trace', join(base, 't.jsonl'), '--operator-listen', `unix:${sock}`]);
    try {
      expect((s.ready as Record<string, unknown>).operator_url).toBe(`unix:${sock}`);
      const ls = await runCliAsync(['ls', `unix:${sock}`]);
      expect(ls.status).toBe(0);
      expect(ls.stdout).toContain('a.txt');
      const got = await runCliAsync(['get', `unix:${sock}`, 'a.txt', '-o', join(base, 'copy.txt')]);
      expect(got.status).toBe(0);
      expect(got.stderr).toContain('etag verified');
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
  });
});
