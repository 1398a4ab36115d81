// The planes as a Fastify plugin inside someone else's app: the same guarantees as the CLI's server
// (raw-target routing, the error shape, the trace, HEAD and write verbs answered 405), the host's
// hooks running on the planes' routes with no way around them, payloads a host keeps staying true,
// and the habits of a Fastify plugin (metadata, options checked at register, prefix, lifecycle).
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { answerConnect } from '../../src/http/connect.js';
import { routeRawTargets } from '../../src/http/targets.js';
import { resourcePlanes } from '../../src/http/plugin.js';
import { openSession } from '../../src/session/open-session.js';
import { parseManifest } from '../../src/manifest/model.js';
import type { Session } from '../../src/session/session.js';
import { capsule, filesManifest } from '../helpers/capsule.js';
import { rawGet, rawRequest, readTrace } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) removeTree(d);
});

const TREE = ['out/a.txt: plugin bytes', 'out/b%ZZ: behind a bad escape', 'secret.txt: HOST-SECRET', 'out/esc -> ../secret.txt'];

function workdirWith(tree: string[]): { workdir: string; tracePath: string } {
  const base = tempDir('rp-plugin-');
  dirs.push(base);
  const workdir = join(base, 'work');
  makeTree(workdir, tree);
  return { workdir, tracePath: join(base, 'trace.jsonl') };
}

async function sessionOver(
  tree: string[] = TREE,
  advertisedUrl: string | null = 'http://localhost:1',
): Promise<{ session: Session; tracePath: string; workdir: string }> {
  const { workdir, tracePath } = workdirWith(tree);
  const session = await openSession({ workdir, manifest: parseManifest(filesManifest('out/')), tracePath, containment: 'sealed', advertisedUrl });
  return { session, tracePath, workdir };
}

async function listen(app: FastifyInstance): Promise<string> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
}

async function hostApp(options: FastifyServerOptions = { rewriteUrl: routeRawTargets() }) {
  const { session, tracePath } = await sessionOver();
  const app = Fastify(options);
  app.post('/app/echo', async (req) => ({ echoed: req.body }));
  app.get('/app/hello', async () => ({ hello: 'world' }));
  await app.register(resourcePlanes, { session });
  const url = await listen(app);
  return {
    app,
    url,
    tracePath,
    session,
    close: async () => {
      await app.close();
      await session.close();
    },
  };
}

describe('resourcePlanes registered into a plain Fastify app', () => {
  it('serves both planes with the spec shapes and the trace, on the raw target', async () => {
    const h = await hostApp();
    try {
      const read = await rawGet(h.url, '/resources/files/a.txt');
      expect(read.status).toBe(200);
      expect(read.body.toString()).toBe('plugin bytes');
      expect(read.header('x-murmur-containment')).toBe('sealed');
      expect((await rawGet(h.url, '/resources/files')).json().entries.map((e: { path: string }) => e.path)).toEqual(['a.txt', 'b%ZZ']);
      for (const target of ['/resources/files/../secret.txt', '/resources/files/%2e%2e/secret.txt', '/resources/files/esc']) {
        const res = await rawGet(h.url, target);
        expect(res.body.toString(), target).not.toContain('HOST-SECRET');
        expect(res.header('content-type'), target).toBe('application/json');
      }
      expect((await rawGet(h.url, '/resources/files/esc')).json().error).toBe('outside_root');
      // With routeRawTargets, a target the router cannot decode reaches the planes, which read it raw.
      expect((await rawGet(h.url, '/resources/files/b%ZZ')).body.toString()).toBe('behind a bad escape');
      const head = await rawRequest(h.url, { method: 'HEAD', target: '/resources/files/a.txt' });
      expect([head.status, head.header('allow')]).toEqual([405, 'GET']);
      const put = await rawRequest(h.url, { method: 'PUT', target: '/resources/files/a.txt', body: 'x', headers: [['content-type', 'application/json']] });
      expect(put.json().error).toBe('method_not_allowed');
      const events = readTrace(h.tracePath).map((e) => [e.event_type, e.outcome]);
      expect(events).toContainEqual(['resource_read', 'ok']);
      expect(events).toContainEqual(['resource_read', 'outside_root']);
      expect(events).toContainEqual(['resource_read', 'method_not_allowed']);
      expect((await rawGet(h.url, '/.well-known/agent-card.json')).json().name).toBe('plane-test');
    } finally {
      await h.close();
    }
  });

  it("answers CONNECT under the planes once the host hands Node's 'connect' event to its routing", async () => {
    const h = await hostApp();
    try {
      h.app.server.on('connect', answerConnect(h.app.routing));
      const res = await rawRequest(h.url, { method: 'CONNECT', target: '/resources/files/a.txt' });
      expect([res.status, res.header('allow'), res.json().error]).toEqual([405, 'GET', 'method_not_allowed']);
      expect(
        readTrace(h.tracePath)
          .filter((e) => e.event_type === 'resource_read')
          .map((e) => e.outcome),
      ).toEqual(['method_not_allowed']);
    } finally {
      await h.close();
    }
  });

  it("sends the same statuses and headers in the same order as the CLI's server", async () => {
    const h = await hostApp();
    try {
      const c = await capsule({ yaml: filesManifest('out/'), tree: TREE, containment: 'sealed' });
      const names = (r: { headerNames: string[] }) => r.headerNames.filter((n) => !['date', 'connection', 'keep-alive'].includes(n));
      const cases: Array<{ method?: string; target: string }> = [
        { target: '/resources/files/a.txt' },
        { target: '/resources/files' },
        { target: '/resources/files/nope' },
        { target: '/resources/files/esc' },
        { target: '/resources/files/%2e%2e/secret.txt' },
        { method: 'POST', target: '/resources/files/a.txt' },
        { method: 'HEAD', target: '/resources/files/a.txt' },
        { target: '/resources/peer/mh1.x.y' },
        { target: '/resources/other' },
        { target: '/resources/files/b%ZZ' },
        { target: '/resources/files/%C0%AE' },
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
    const h = await hostApp();
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
});

describe('no way around the host hooks or the shutdown gate', () => {
  const refuseAll = (app: FastifyInstance) =>
    app.addHook('onRequest', async (_req, reply) => {
      reply.code(401).send({ error: 'unauthorized' });
      return reply;
    });

  for (const [label, options] of [
    ['with routeRawTargets', { rewriteUrl: routeRawTargets() }],
    ['without it', {}],
  ] as const) {
    it(`a host auth hook that refuses everything is never bypassed by an undecodable target (${label})`, async () => {
      const { session } = await sessionOver();
      const app = Fastify(options);
      refuseAll(app);
      await app.register(resourcePlanes, { session });
      const url = await listen(app);
      try {
        for (const target of ['/resources/files/b%ZZ', '/resources/files/a.txt', '/resources/files/%C0%AE', '/resources/files/b%', '/resources/files']) {
          const res = await rawGet(url, target);
          expect(res.status, target).not.toBe(200);
          expect(res.body.toString(), target).not.toContain('behind a bad escape');
          expect(res.body.toString(), target).not.toContain('plugin bytes');
        }
        expect((await rawGet(url, '/resources/files/b%ZZ')).status).toBe(label === 'without it' ? 400 : 401);
      } finally {
        await app.close();
        await session.close();
      }
    });
  }

  it('while closing, an undecodable target is refused 503 like any other and counted in flight', async () => {
    const { session } = await sessionOver(['out/big.bin @ 8m', 'out/b%ZZ: behind a bad escape']);
    const app = Fastify({ rewriteUrl: routeRawTargets(), return503OnClosing: false });
    await app.register(resourcePlanes, { session });
    const url = await listen(app);
    try {
      // A read nobody drains holds the drain open, so the app stays closing for a while.
      const { connect } = await import('node:net');
      const port = Number(new URL(url).port);
      const stuck = connect(port, '127.0.0.1');
      await new Promise<void>((resolve) => stuck.once('connect', () => resolve()));
      stuck.write('GET /resources/files/big.bin HTTP/1.1\r\nHost: x\r\n\r\n');
      stuck.pause();
      for (let i = 0; i < 400 && session.memory.inUse === 0; i++) await new Promise((r) => setTimeout(r, 25));
      expect(session.memory.inUse, 'the held read holds its share').toBeGreaterThan(0);
      const closing = app.close();
      await new Promise((r) => setTimeout(r, 50));
      for (const target of ['/resources/files/b%ZZ', '/resources/files/a.txt']) {
        const res = await rawGet(url, target);
        expect(res.status, target).toBe(503);
        expect(res.json().error, target).toBe('shutting_down');
        expect(res.body.toString()).not.toContain('behind a bad escape');
      }
      stuck.destroy();
      await closing;
    } finally {
      await session.close();
    }
  });

  it("a payload a host's onSend hook keeps is never rewritten by a later read", async () => {
    const size = 200 * 1024;
    const { session, workdir } = await sessionOver(['out/']);
    writeFileSync(join(workdir, 'out/one.bin'), Buffer.alloc(size, 0x31));
    writeFileSync(join(workdir, 'out/two.bin'), Buffer.alloc(size, 0x32));
    const app = Fastify({ rewriteUrl: routeRawTargets() });
    const kept: Buffer[] = [];
    app.addHook('onSend', async (_req, _reply, payload) => {
      if (Buffer.isBuffer(payload) && payload.length === size) kept.push(payload);
      return payload;
    });
    await app.register(resourcePlanes, { session });
    const url = await listen(app);
    try {
      const first = await rawGet(url, '/resources/files/one.bin');
      const firstHash = createHash('sha256').update(first.body).digest('hex');
      for (let i = 0; i < 4; i++) {
        await rawGet(url, '/resources/files/two.bin');
        await rawGet(url, '/resources/files/one.bin');
      }
      expect(kept.length).toBe(9);
      // The first payload the hook kept is still one.bin's bytes, whatever was read after it.
      expect(createHash('sha256').update(kept[0]!).digest('hex')).toBe(firstHash);
      expect(Buffer.compare(kept[1]!, first.body)).not.toBe(0); // two.bin differs from one.bin
    } finally {
      await app.close();
      await session.close();
    }
  });
});

describe('a plugin Fastify users recognise', () => {
  it('carries fastify-plugin metadata', async () => {
    const { session } = await sessionOver();
    const app = Fastify();
    await app.register(resourcePlanes, { session });
    expect(app.hasPlugin('capsule-resource-plane')).toBe(true);
    expect(app.resourcePlanes.session).toBe(session);
    await app.close();
    await session.close();
  });

  it('refuses bad options at register with a clear error', async () => {
    const { session } = await sessionOver();
    const cases: Array<[unknown, RegExp]> = [
      [{}, /exactly one of `session`.*or `open`/],
      [{ session: { containment: 'sealed' } }, /`session` must be a Session/],
      [{ session, planes: { files: 'yes' } }, /`planes` must be/],
      [{ session, prefix: 'cap' }, /`prefix` must be a path/],
      [{ session, prefix: '/cap/' }, /`prefix` must be a path/],
      [{ session, open: {} }, /exactly one of/],
      [{ session, prefx: '/cap' }, /unknown option `prefx` \(did you mean `prefix`\?\)/],
      [{ session, sesion: 1 }, /unknown option `sesion` \(did you mean `session`\?\)/],
      [{ session, cache: true }, /unknown option `cache`; the options are `session`, `open`/],
    ];
    for (const [options, why] of cases) {
      const app = Fastify();
      app.register(resourcePlanes, options as never);
      await expect(app.ready(), JSON.stringify(options)).rejects.toThrow(why);
      // The shape @fastify/error gives: a TypeError with a stable code.
      await expect(app.ready()).rejects.toMatchObject({ name: 'FastifyError', code: 'ERR_RESOURCE_PLANES_OPTIONS' });
      await app.close().catch(() => undefined);
    }
    await session.close();
  });

  it('refuses an `open` whose trace resolves inside the workdir at register, creating nothing', async () => {
    const { workdir } = workdirWith(TREE);
    const outside = join(workdir, '..');
    symlinkSync(join(workdir, 'out'), join(outside, 'into-out'));
    for (const tracePath of [join(workdir, 'out', 'trace.jsonl'), join(outside, 'into-out', 'new', 'trace.jsonl')]) {
      const app = Fastify();
      app.register(resourcePlanes, { open: { workdir, manifest: parseManifest(filesManifest('out/')), tracePath } });
      await expect(app.ready(), tracePath).rejects.toThrow(/^--trace '.*' resolves to '.*', inside the capsule workdir '.*'/);
      await app.close().catch(() => undefined);
    }
    expect(readdirSync(join(workdir, 'out')).sort()).toEqual(['a.txt', 'b%ZZ', 'esc']);
  });

  it('honours a prefix: the prefix is cut from the raw target byte for byte, nothing else changes', async () => {
    const { session, tracePath } = await sessionOver();
    const app = Fastify({ rewriteUrl: routeRawTargets('/cap') });
    await app.register(resourcePlanes, { session, prefix: '/cap' });
    const url = await listen(app);
    try {
      expect((await rawGet(url, '/cap/resources/files')).json().entries.map((e: { path: string }) => e.path)).toEqual(['a.txt', 'b%ZZ']);
      expect((await rawGet(url, '/cap/resources/files/a.txt')).body.toString()).toBe('plugin bytes');
      expect((await rawGet(url, '/cap/resources/files/b%ZZ')).body.toString()).toBe('behind a bad escape');
      expect((await rawGet(url, '/cap/resources/files/%2e%2e/secret.txt')).json().error).toBe('outside_root');
      expect((await rawGet(url, '/cap/.well-known/agent-card.json')).status).toBe(200);
      // Not under the prefix: not the planes.
      expect((await rawGet(url, '/resources/files/a.txt')).status).toBe(404);
      // A prefix the router matched only after decoding is not the prefix.
      const encoded = await rawGet(url, '/c%61p/resources/files/a.txt');
      expect(encoded.status).toBe(404);
      expect(encoded.body.toString()).not.toContain('plugin bytes');
      expect(
        readTrace(tracePath)
          .filter((e) => e.event_type === 'resource_read')
          .map((e) => e.path),
      ).toEqual(['a.txt', 'b%ZZ', '../secret.txt']);
    } finally {
      await app.close();
      await session.close();
    }
  });

  it('owns a session it opened: app.close() writes session_end and zeroes the key', async () => {
    const { workdir, tracePath } = workdirWith(TREE);
    const app = Fastify();
    await app.register(resourcePlanes, {
      open: {
        workdir,
        manifest: parseManifest(`${filesManifest('out/')}  peer_files:\n    root: "out/"\n`),
        tracePath,
        containment: 'sealed',
        advertisedUrl: 'http://localhost:1',
      },
    });
    const url = await listen(app);
    const session = app.resourcePlanes.session;
    expect((await rawGet(url, '/resources/files/a.txt')).body.toString()).toBe('plugin bytes');
    expect(session.key).not.toBeNull();
    await app.close();
    expect(session.isClosed).toBe(true);
    expect(session.key!.destroyed).toBe(true);
    const trace = readTrace(tracePath);
    expect(trace.at(-1)!.event_type).toBe('session_end');
  });

  it('borrows a session it was given: app.close() leaves it to the caller', async () => {
    const { session, tracePath } = await sessionOver();
    const app = Fastify();
    await app.register(resourcePlanes, { session });
    await app.ready();
    await app.close();
    expect(session.isClosed).toBe(false);
    expect(readTrace(tracePath).some((e) => e.event_type === 'session_end')).toBe(false);
    await session.close();
    expect(readTrace(tracePath).at(-1)!.event_type).toBe('session_end');
  });

  it('serves no agent card for a session that advertises nothing (never "url": null)', async () => {
    const { session } = await sessionOver(TREE, null);
    const app = Fastify();
    await app.register(resourcePlanes, { session });
    const url = await listen(app);
    try {
      const card = await rawGet(url, '/.well-known/agent-card.json');
      expect(card.status).toBe(404);
      expect(card.body.toString()).not.toContain('"url":null');
      expect((await rawGet(url, '/resources/files/a.txt')).status).toBe(200);
    } finally {
      await app.close();
      await session.close();
    }
  });
});

describe('the README example', () => {
  it('runs verbatim', async () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const section = readme.slice(readme.indexOf('## Use it as a Fastify plugin'));
    const code = /```js\n([\s\S]*?)```/.exec(section)?.[1];
    expect(code, 'the section has a js example').toBeDefined();
    const { runReadmeExample } = await import('../helpers/readme-example.js');
    const out = await runReadmeExample(code!);
    expect(out).toContain('plugin example: 200');
  });
});
