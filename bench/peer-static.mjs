// The reference peer: Fastify 5 + @fastify/static serving ROOT under /resources/files/, the way a
// Node developer would serve a directory. `wildcard: false` globs ROOT once at startup and
// registers one route per file (the faster of its two modes). No hashing, no containment.
// Usage: node bench/peer-static.mjs ROOT — prints {"event":"listening","url":…} on stdout.
import Fastify from 'fastify';
import fastifyStatic from '@fastify/static';

const root = process.argv[2];
if (!root) {
  process.stderr.write('usage: node bench/peer-static.mjs ROOT\n');
  process.exit(2);
}

const app = Fastify({ logger: false });
await app.register(fastifyStatic, { root, prefix: '/resources/files/', wildcard: false });
const address = await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`${JSON.stringify({ event: 'listening', url: address })}\n`);

const stop = () =>
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
