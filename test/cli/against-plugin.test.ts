// The operator client against the plugin it ships with, in a host app that mounts the planes under
// a prefix behind an auth hook: -H carries the credential (never printed), the base URL names the
// prefix, and the exit status tells each failure apart (docs/cli.md, *Exit status*). mirror too.
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeRawTargets } from '../../src/http/targets.js';
import { resourcePlanes } from '../../src/http/plugin.js';
import { parseManifest } from '../../src/manifest/model.js';
import { openSession } from '../../src/session/open-session.js';
import type { Session } from '../../src/session/session.js';
import { filesManifest } from '../helpers/capsule.js';
import { readTrace } from '../helpers/http.js';
import { runCliAsync } from '../helpers/cli.js';
import { removeTree, scratch, tempDir } from '../helpers/tree.js';

const TOKEN = 'Bearer host-secret-7d1f';
let app: FastifyInstance;
let session: Session;
let base: string;

let d: string;
beforeAll(async () => {
  d = tempDir('rp-against-plugin-');
  mkdirSync(join(d, 'work', 'out'), { recursive: true });
  writeFileSync(join(d, 'work', 'out', 'a.txt'), 'behind the hook');
  session = await openSession({
    workdir: join(d, 'work'),
    manifest: parseManifest(filesManifest('out/')),
    tracePath: join(d, 'trace.jsonl'),
    containment: 'sealed',
  });
  app = Fastify({ rewriteUrl: routeRawTargets('/cap') });
  // The host's auth: a 401 with no body the planes' shape would give.
  app.addHook('onRequest', async (req, reply) => {
    if (req.headers.authorization !== TOKEN) return reply.code(401).send();
  });
  await app.register(resourcePlanes, { session, prefix: '/cap' });
  await app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await app?.close();
  await session?.close();
  if (d) removeTree(d);
});

const secretNowhere = (r: { stdout: string; stderr: string }) => {
  expect(r.stdout).not.toContain('host-secret');
  expect(r.stderr).not.toContain('host-secret');
};

describe('ls and get against the plugin, under its prefix and behind an auth hook', () => {
  it('without the header: refused by the host (exit 4), the status named', async () => {
    const r = await runCliAsync(['ls', `${base}/cap`]);
    expect(r.status).toBe(4);
    expect(r.stderr).toBe('error: the server answered 401\n');
  });

  it('with -H and the prefixed base URL: lists, and gets a verified file', async () => {
    const ls = await runCliAsync(['ls', `${base}/cap`, '-H', `Authorization: ${TOKEN}`, '--json']);
    expect(ls.status, ls.stderr).toBe(0);
    expect(JSON.parse(ls.stdout).entries.map((e: { path: string }) => e.path)).toEqual(['a.txt']);
    secretNowhere(ls);
    const out = scratch([]);
    const get = await runCliAsync(['get', `${base}/cap/`, 'a.txt', '-o', `${out}/`, '--header', `authorization: ${TOKEN}`]);
    expect(get.status, get.stderr).toBe(0);
    expect(readFileSync(join(out, 'a.txt'), 'utf8')).toBe('behind the hook');
    secretNowhere(get);
  });

  it('a refusal by the planes themselves is exit 4 too, in their words', async () => {
    const out = scratch([]);
    const r = await runCliAsync(['get', `${base}/cap`, 'missing.txt', '-o', `${out}/`, '-H', `Authorization: ${TOKEN}`]);
    expect(r.status).toBe(4);
    expect(r.stderr).toMatch(/^error: 404 not_found: /);
    expect(readdirSync(out)).toEqual([]);
  });

  it('a malformed or reserved -H is a usage mistake (exit 2) that never echoes the value', async () => {
    const bad = await runCliAsync(['ls', `${base}/cap`, '-H', 'host-secret-7d1f']);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("-H/--header takes 'Name: value'");
    secretNowhere(bad);
    const reserved = await runCliAsync(['ls', `${base}/cap`, '-H', 'Host: host-secret-7d1f']);
    expect(reserved.status).toBe(2);
    expect(reserved.stderr).toContain("-H/--header 'Host' is this client's to set");
    secretNowhere(reserved);
    const broken = await runCliAsync(['ls', `${base}/cap`, '-H', 'X-Token: host-secret-7d1f\r\nX-Other: 1']);
    expect(broken.status).toBe(2);
    secretNowhere(broken);
  });

  it('tells a server it cannot reach (3) from a URL that is not a base URL (2)', async () => {
    const closed = await new Promise<number>((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as { port: number }).port;
        s.close(() => resolve(port));
      });
    });
    const unreachable = await runCliAsync(['ls', `http://127.0.0.1:${closed}/cap`]);
    expect(unreachable.status).toBe(3);
    expect(unreachable.stderr).toMatch(/^error: cannot reach http:\/\/127\.0\.0\.1:\d+\/cap: /);
    const notUrl = await runCliAsync(['ls', 'not a url']);
    expect(notUrl.status).toBe(2);
    const resourcePath = await runCliAsync(['ls', `${base}/cap/resources/files`]);
    expect(resourcePath.status).toBe(2);
  });
});

describe('mirror against the plugin, under its prefix and behind an auth hook', () => {
  const reads = () => readTrace(join(d, 'trace.jsonl')).filter((e) => e.event_type === 'resource_read').length;

  it('without the header: refused by the host (exit 4), nothing written', async () => {
    const dst = join(scratch([]), 'dst');
    const r = await runCliAsync(['mirror', `${base}/cap`, dst]);
    expect(r.status).toBe(4);
    expect(r.stderr).toBe('error: the server answered 401\n');
    expect(existsSync(dst)).toBe(false);
  });

  it('with -H and the prefixed base URL: mirrors verified, then a second run sends no GET', async () => {
    const dst = join(scratch([]), 'dst');
    const before = reads();
    const r = await runCliAsync(['mirror', `${base}/cap`, dst, '-H', `Authorization: ${TOKEN}`]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe('mirror: 1 listed, 0 up to date, 1 fetched (15 bytes), 0 deleted, 0 failed\n');
    expect(readFileSync(join(dst, 'a.txt'), 'utf8')).toBe('behind the hook');
    expect(reads() - before).toBe(1);
    secretNowhere(r);
    const again = await runCliAsync(['mirror', `${base}/cap/`, dst, '--header', `authorization: ${TOKEN}`, '--json']);
    expect(again.status, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ listed: 1, up_to_date: 1, fetched: 0, requests: 0 });
    expect(reads() - before).toBe(1);
    secretNowhere(again);
  });
});
