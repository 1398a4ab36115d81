// planeOf (src/wire.ts): the one decision of which plane a raw request target names, on segment
// boundaries and byte for byte, and a host app's use of the plugin's public `admission` option.
import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { Admission } from '../../src/http/admission.js';
import { routeRawTargets } from '../../src/http/targets.js';
import { resourcePlanes } from '../../src/http/plugin.js';
import { parseManifest } from '../../src/manifest/model.js';
import { openSession } from '../../src/session/open-session.js';
import { planeOf } from '../../src/wire.js';
import { filesManifest } from '../helpers/capsule.js';
import { rawGet } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

describe('planeOf', () => {
  it.each([
    ['/resources/files', { plane: 'files', rest: null }],
    ['/resources/files/', { plane: 'files', rest: '' }],
    ['/resources/files/a/b%2Fc?x=1#f', { plane: 'files', rest: 'a/b%2Fc' }],
    ['/resources/peer', { plane: 'peer', rest: null }],
    ['/resources/peer/mh1.x.y', { plane: 'peer', rest: 'mh1.x.y' }],
    ['/resources', { plane: 'resources', rest: null }],
    ['/resources/filesX', { plane: 'resources', rest: 'filesX' }],
    ['/resources/peers/x', { plane: 'resources', rest: 'peers/x' }],
    ['http://host:1/resources/files/a', { plane: 'files', rest: 'a' }],
  ])('%s names %o', (target, expected) => {
    expect(planeOf(target)).toEqual(expected);
  });

  it.each(['/', '/resourcesX', '/resourcesX/files/a', '/Resources/files', '/x/resources/files', '*', '/%72esources/files', ''])(
    '%s names no plane',
    (target) => {
      expect(planeOf(target)).toBeNull();
    },
  );

  it('cuts a prefix on its segment boundary only', () => {
    expect(planeOf('/cap/resources/files/a', '/cap')).toEqual({ plane: 'files', rest: 'a' });
    expect(planeOf('/cap/resources', '/cap')).toEqual({ plane: 'resources', rest: null });
    for (const target of ['/cap2/resources/files/a', '/capresources/files', '/resources/files/a', '/cap', '/ca/resources/files']) {
      expect(planeOf(target, '/cap'), target).toBeNull();
    }
  });
});

describe("the plugin's admission option", () => {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => removeTree(d)));

  async function host(shared: boolean) {
    const base = tempDir('rp-admit-');
    dirs.push(base);
    makeTree(`${base}/work`, ['out/a.txt: bytes']);
    const session = await openSession({
      workdir: `${base}/work`,
      manifest: parseManifest(filesManifest('out/')),
      tracePath: `${base}/trace.jsonl`,
      containment: 'sealed',
      advertisedUrl: null,
    });
    const app = Fastify({ rewriteUrl: routeRawTargets() });
    const admission = new Admission(session.containment);
    if (shared) admission.install(app);
    app.get('/app/hello', async () => ({ hello: 'world' }));
    await app.register(resourcePlanes, shared ? { session, admission } : { session });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    return { url, admission, close: async () => (await app.close(), await session.close()) };
  }

  it("given the host's admission, gates the host's own routes too, and drains it when the app closes", async () => {
    const shared = await host(true);
    const alone = await host(false);
    try {
      expect((await rawGet(shared.url, '/app/hello')).header('x-murmur-containment')).toBe('sealed');
      expect((await rawGet(alone.url, '/app/hello')).header('x-murmur-containment')).toBeUndefined();
      // The planes' routes pass the one gate either way.
      expect((await rawGet(shared.url, '/resources/files/a.txt')).status).toBe(200);
      expect((await rawGet(alone.url, '/resources/files/a.txt')).header('x-murmur-containment')).toBe('sealed');
    } finally {
      await shared.close();
      await alone.close();
    }
    // The plugin's preClose set the host's gate to stopping.
    expect(shared.admission.closing).toBe(true);
  });

  it('an Admission is installed once: a second install would admit every request twice', () => {
    const admission = new Admission('sealed');
    admission.install(Fastify());
    expect(() => admission.install(Fastify())).toThrow(/installed in one context only/);
  });

  it('refuses an admission that is not an Admission and a reuseBuffers that is not a boolean, at register', async () => {
    const base = tempDir('rp-admit-');
    dirs.push(base);
    makeTree(`${base}/work`, ['out/a.txt: bytes']);
    const session = await openSession({
      workdir: `${base}/work`,
      manifest: parseManifest(filesManifest('out/')),
      tracePath: `${base}/trace.jsonl`,
      containment: 'sealed',
      advertisedUrl: null,
    });
    try {
      await expect(
        Fastify()
          .register(resourcePlanes, { session, admission: {} as Admission })
          .ready(),
      ).rejects.toThrow(/`admission` must be an Admission/);
      await expect(
        Fastify()
          .register(resourcePlanes, { session, reuseBuffers: 'yes' as unknown as boolean })
          .ready(),
      ).rejects.toThrow(/`reuseBuffers` must be a boolean/);
    } finally {
      await session.close();
    }
  });
});
