// The start-up and memory reference of issue 17: a bare Fastify 5 listener (no plugins, one route
// answering "ok"). It prints its ready line the moment the socket is listening, the way
// `resource-plane serve` does, so start-to-ready means the same thing for both.
// Usage: node bench/peer-bare-fastify.mjs — prints {"event":"listening","url":…} on stdout.
import Fastify from 'fastify';

const app = Fastify({ logger: false });
app.get('/', (_req, reply) => reply.type('text/plain').send('ok'));
const address = await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`${JSON.stringify({ event: 'listening', url: address })}\n`);

const stop = () =>
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
