// The start-up and memory reference: the smallest Node HTTP listener (node:http, nothing else
// loaded), answering "ok". It prints its ready line the moment the socket is listening, the way
// `resource-plane serve` does, so start-to-ready means the same thing for both.
// Usage: node bench/peer-bare.mjs — prints {"event":"listening","url":…} on stdout.
import { createServer } from 'node:http';

const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 }).end('ok');
});
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  process.stdout.write(`${JSON.stringify({ event: 'listening', url: `http://127.0.0.1:${port}` })}\n`);
});
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
