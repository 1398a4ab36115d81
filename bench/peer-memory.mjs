// The ceiling of any Node server on this machine: plain node:http answering each file's bytes from
// memory (read once at start), no filesystem, no hashing, no framework. It serves only plain names
// directly in ROOT under /resources/files/ (anything else is 404).
// Usage: node bench/peer-memory.mjs ROOT — prints {"event":"listening","url":…} on stdout.
import { createServer } from 'node:http';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const root = process.argv[2];
if (!root) {
  process.stderr.write('usage: node bench/peer-memory.mjs ROOT\n');
  process.exit(2);
}

const PREFIX = '/resources/files/';
const files = new Map();
for (const name of readdirSync(root)) {
  if (statSync(join(root, name)).isFile()) files.set(PREFIX + name, readFileSync(join(root, name)));
}

const server = createServer((req, res) => {
  const bytes = req.method === 'GET' ? files.get(req.url) : undefined;
  if (!bytes) {
    res.writeHead(404, { 'content-length': 0 }).end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': bytes.length });
  res.end(bytes);
});

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  process.stdout.write(`${JSON.stringify({ event: 'listening', url: `http://127.0.0.1:${port}` })}\n`);
});

const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
