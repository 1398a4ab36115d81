// A listener accepts from the moment it is bound or adopted, before the session and its app exist
// (the advertised URL is part of the session's identity): a request that arrives in that window is
// parked and answered once the app is attached, never left without an answer. Found by the
// socket-activation test under ASan, where the first request (the one that started the service)
// reached the /metrics listener before its app.
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bind, serve } from '../../src/http/listener.js';
import { parseManifest } from '../../src/manifest/model.js';
import { openSession } from '../../src/session/open-session.js';
import { filesManifest } from '../helpers/capsule.js';
import { rawGet } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => removeTree(d)));

describe('a request before the app is attached', () => {
  it('is answered once it is, in order, through admission and the planes', async () => {
    const base = tempDir('rp-early-');
    dirs.push(base);
    makeTree(join(base, 'work'), ['out/a.txt: early bytes']);
    const listener = await bind({ host: '127.0.0.1', port: 0 });
    // Sent while nothing serves the listener yet.
    const early = rawGet(listener.url, '/resources/files/a.txt');
    const health = rawGet(listener.url, '/healthz');
    await new Promise((resolve) => setTimeout(resolve, 300));
    const session = await openSession({
      workdir: join(base, 'work'),
      manifest: parseManifest(filesManifest('out/')),
      tracePath: join(base, 't.jsonl'),
      containment: 'sealed',
      advertisedUrl: listener.defaultAdvertisedUrl,
    });
    const running = await serve(session, listener);
    try {
      const [a, h] = await Promise.all([early, health]);
      expect(a.status).toBe(200);
      expect(a.body.toString()).toBe('early bytes');
      expect(a.header('x-murmur-containment')).toBe('sealed');
      expect(h.status).toBe(200);
    } finally {
      await running.close();
      await session.close();
    }
  });
});
