// The planes as a Fastify plugin inside someone else's app: the same guarantees as the CLI's server
// (raw-target routing, the error shape, the trace, HEAD and write verbs answered 405), while the
// host app's own routes, body parsing and 404s are left exactly as they were.
import { join } from 'node:path';
import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { planesFrameworkErrors, resourcePlanes, InFlight } from '../src/planes/plugin.js';
import { openSession } from '../src/launch/open-session.js';
import { parseManifest } from '../src/manifest/model.js';
import { capsule, filesManifest } from './helpers/capsule.js';
import { rawGet, rawRequest, readTrace } from './helpers/http.js';
import { makeTree, removeTree, tempDir } from './helpers/tree.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) removeTree(d);
});

async function hostApp(opts: { frameworkErrors: boolean }) {
  const base = tempDir('rp-plugin-');
  dirs.push(base);
  const workdir = join(base, 'work');
  makeTree(workdir, ['out/a.txt: plugin bytes', 'secret.txt: HOST-SECRET', 'out/esc -> ../secret.txt']);
  const tracePath = join(base, 'trace.jsonl');
  const session = await openSession({
    workdir, manifest: parseManifest(filesManifest('out/')), tracePath, containment: 'sealed', advertisedUrl: 'http://localhost:1',
  });
  const app = Fastify(opts.frameworkErrors ? { frameworkErrors: planesFrameworkErrors(session) } : {});
  app.post('/app/echo', async (req) => ({ echoed: req.body }));
  app.get('/app/hello', async () => ({ hello: 'world' }));
  const inflight = new InFlight();
  await app.register(resourcePlanes, { session, inflight });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  return {
    url, tracePath, inflight,
    close: async () => {
      await app.close();
      await session.close();
    },
  };
}

describe('resourcePlanes registered into a plain Fastify app', () => {
  it('serves both planes with the spec shapes and the trace, on the raw target', async () => {
    const h = await hostApp({ frameworkErrors: true });
    try {
      const read = await rawGet(h.url, '/resources/files/a.txt');
      expect(read.status).toBe(200);
      expect(read.body.toString()).toBe('plugin bytes');
      expect(read.header('x-murmur-containment')).toBe('sealed');
      expect((await rawGet(h.url, '/resources/files')).json().entries.map((e: { path: string }) => e.path)).toEqual(['a.txt']);
      for (const target of ['/resources/files/../secret.txt', '/resources/files/%2e%2e/secret.txt', '/resources/files/esc', '/resources/files/x%ZZ']) {
        const res = await rawGet(h.url, target);
        expect(res.body.toString(), target).not.toContain('HOST-SECRET');
        expect(res.header('content-type'), target).toBe('application/json');
      }
      expect((await rawGet(h.url, '/resources/files/esc')).json().error).toBe('outside_root');
      const head = await rawRequest(h.url, { method: 'HEAD', target: '/resources/files/a.txt' });
      expect([head.status, head.header('allow')]).toEqual([405, 'GET']);
      const put = await rawRequest(h.url, { method: 'PUT', target: '/resources/files/a.txt', body: 'x', headers: [['content-type', 'application/json']] });
      expect(put.json().error).toBe('method_not_allowed');
      const events = readTrace(h.tracePath).map((e) => [e.event_type, e.outcome]);
      expect(events).toContainEqual(['resource_read', 'ok']);
      expect(events).toContainEqual(['resource_read', 'outside_root']);
      expect(events).toContainEqual(['resource_read', 'method_not_allowed']);
      // The agent card is there for peers.
      expect((await rawGet(h.url, '/.well-known/agent-card.json')).json().name).toBe('plane-test');
    } finally {
      await h.close();
    }
  });

  it("sends the same headers in the same order as the CLI's server, which answers /resources without Fastify", async () => {
    const h = await hostApp({ frameworkErrors: true });
    try {
      const c = await capsule({ yaml: filesManifest('out/'), tree: ['out/a.txt: plugin bytes', 'secret.txt: HOST-SECRET', 'out/esc -> ../secret.txt'], containment: 'sealed' });
      const names = (r: { headerNames: string[] }) => r.headerNames.filter((n) => !['date', 'connection', 'keep-alive'].includes(n));
      const cases: Array<{ method?: string; target: string }> = [
        { target: '/resources/files/a.txt' }, { target: '/resources/files' }, { target: '/resources/files/nope' },
        { target: '/resources/files/esc' }, { target: '/resources/files/%2e%2e/secret.txt' }, { method: 'POST', target: '/resources/files/a.txt' },
        { method: 'HEAD', target: '/resources/files/a.txt' }, { target: '/resources/peer/mh1.x.y' }, { target: '/resources/other' },
      ];
      for (const k of cases) {
        const viaPlugin = await rawRequest(h.url, { method: k.method, target: k.target });
        const viaServer = await rawRequest(c.url, { method: k.method, target: k.target });
        expect(viaServer.status, `${k.method ?? 'GET'} ${k.target}`).toBe(viaPlugin.status);
        expect(names(viaServer), `${k.method ?? 'GET'} ${k.target}`).toEqual(names(viaPlugin));
      }
    } finally {
      await h.close();
    }
  });

  it("leaves the host app's routes, JSON bodies and 404s as they were", async () => {
    const h = await hostApp({ frameworkErrors: true });
    try {
      const echo = await rawRequest(h.url, { method: 'POST', target: '/app/echo', body: '{"a":1}', headers: [['content-type', 'application/json']] });
      expect(echo.json()).toEqual({ echoed: { a: 1 } });
      const hello = await rawGet(h.url, '/app/hello');
      expect(hello.json()).toEqual({ hello: 'world' });
      expect(hello.header('x-murmur-containment')).toBeUndefined();
      const missing = await rawGet(h.url, '/app/nothing');
      expect(missing.status).toBe(404);
      expect(missing.json().error).toBe('Not Found'); // Fastify's own 404, not the planes'
    } finally {
      await h.close();
    }
  });

  it('refuses new requests once its in-flight gate is closing', async () => {
    const h = await hostApp({ frameworkErrors: true });
    try {
      h.inflight.closing = true;
      const res = await rawGet(h.url, '/resources/files/a.txt');
      expect(res.status).toBe(503);
      expect(res.json().error).toBe('shutting_down');
    } finally {
      await h.close();
    }
  });

  it('without planesFrameworkErrors an undecodable target is still never served', async () => {
    const h = await hostApp({ frameworkErrors: false });
    try {
      const res = await rawGet(h.url, '/resources/files/x%ZZ');
      expect(res.status).toBe(400);
      expect(res.body.toString()).not.toContain('plugin bytes');
    } finally {
      await h.close();
    }
  });
});
