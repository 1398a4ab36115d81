// A strict TypeScript app that registers the packed plugin on whatever Fastify 5 its project has
// (test/audits/consumer.test.ts compiles and runs it on an old and a new minor): the decoration
// type, the options, and a read through a prefix.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import { openSession, parseManifest, resourcePlanes } from 'capsule-resource-plane';

const base = mkdtempSync(join(tmpdir(), 'consumer-'));
mkdirSync(join(base, 'work', 'out'), { recursive: true });
writeFileSync(join(base, 'work', 'out', 'a.txt'), 'consumer bytes');
const manifest = parseManifest('name: consumer\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n');
const session = await openSession({ workdir: join(base, 'work'), manifest, tracePath: join(base, 'trace.jsonl'), containment: 'sealed', advertisedUrl: null });
const app = Fastify();
await app.register(resourcePlanes, { session, prefix: '/cap' });
app.get('/whoami', async () => ({ session: app.resourcePlanes.session.sessionId }));
await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
const port = typeof address === 'object' && address !== null ? address.port : 0;
const read = await fetch(`http://127.0.0.1:${port}/cap/resources/files/a.txt`);
const who = (await (await fetch(`http://127.0.0.1:${port}/whoami`)).json()) as { session: string };
console.log(JSON.stringify({ status: read.status, body: await read.text(), etag: read.headers.get('etag'), same: who.session === session.sessionId }));
await app.close();
await session.close();
