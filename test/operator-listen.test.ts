// The operator plane apart (--operator-listen): peers that can reach the main listener to redeem a
// handle can no longer list or read the export there; the operator plane lives on its own listener,
// a unix socket created 0600 outside the workdir being the recommended deployment.
import { request } from 'node:http';
import { statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { launch, type Launched } from '../src/launch/launch.js';
import { parseManifest } from '../src/manifest/model.js';
import { runCliAsync, startServe } from './helpers/cli.js';
import { filesManifest, rawGet, readTrace } from './helpers/http.js';
import { makeTree, removeTree, tempDir } from './helpers/tree.js';

const dirs: string[] = [];
const stops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const s of stops) await s();
  for (const d of dirs) removeTree(d);
});

const YAML = `${filesManifest('out/')}  peer_files:\n    root: out/\n`;

function scratch(): { base: string; workdir: string } {
  const base = tempDir('rp-oplisten-');
  dirs.push(base);
  const workdir = join(base, 'workdir');
  makeTree(workdir, ['out/a.txt: operator bytes']);
  return { base, workdir };
}

/** GET over a unix socket, the target sent as typed. */
function unixGet(socketPath: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: 'GET' }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function up(operatorListen: string): Promise<{ l: Launched; base: string; tracePath: string }> {
  const { base, workdir } = scratch();
  const tracePath = join(base, 'trace.jsonl');
  const l = await launch({ workdir, manifest: parseManifest(YAML), tracePath, containment: 'sealed', operatorListen });
  stops.push(() => l.stop());
  return { l, base, tracePath };
}

describe('--operator-listen unix:PATH', () => {
  it('serves the operator plane on a 0600 socket; the peer listener no longer serves /resources/files', async () => {
    const { base } = scratch();
    const sock = join(base, 'op.sock');
    const { l, tracePath } = await up(`unix:${sock}`);
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
    const { base, workdir } = scratch();
    const manifest = parseManifest(YAML);
    await expect(launch({ workdir, manifest, operatorListen: `unix:${join(workdir, 'op.sock')}` })).rejects.toThrow(/outside the workdir/);
    await expect(launch({ workdir, manifest, operatorListen: 'unix:op.sock' })).rejects.toThrow(/absolute path/);
    writeFileSync(join(base, 'taken'), '');
    await expect(launch({ workdir, manifest, operatorListen: `unix:${join(base, 'taken')}` })).rejects.toThrow(/must not exist/);
  });
});

describe('--operator-listen HOST:PORT', () => {
  it('splits the planes across two TCP listeners', async () => {
    const { l } = await up('127.0.0.1:0');
    expect((await rawGet(l.operator!.url, '/resources/files/a.txt')).body.toString()).toBe('operator bytes');
    expect((await rawGet(l.server.url, '/resources/files/a.txt')).status).toBe(404);
  });
});

describe('the command line over the unix socket', () => {
  it('serve announces operator_url; ls and get work over it', async () => {
    const { base, workdir } = scratch();
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
