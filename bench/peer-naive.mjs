// The naive hashing peer: plain node:http, and for every request readFile + node:crypto sha256,
// answering the bytes with the digest as etag — what "serve a file with its content hash" costs
// when written the obvious way. It serves only plain names directly in ROOT (no traversal
// surface: anything else is 404). Usage: node bench/peer-naive.mjs ROOT — prints
// {"event":"listening","url":…} on stdout.
import { createServer } from 'node:http';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

const root = process.argv[2];
if (!root) {
  process.stderr.write('usage: node bench/peer-naive.mjs ROOT\n');
  process.exit(2);
}

const PREFIX = '/resources/files/';
const server = createServer(async (req, res) => {
  const name = req.url?.startsWith(PREFIX) ? req.url.slice(PREFIX.length) : '';
  if (req.method !== 'GET' || !/^[A-Za-z0-9_-][A-Za-z0-9_.-]*$/.test(name)) {
    res.writeHead(404, { 'content-length': 0 }).end();
    return;
  }
  try {
    const bytes = await readFile(join(root, name));
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': bytes.length,
      etag: `"sha256:${sha256}"`,
    });
    res.end(bytes);
  } catch {
    res.writeHead(404, { 'content-length': 0 }).end();
  }
});

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  process.stdout.write(`${JSON.stringify({ event: 'listening', url: `http://127.0.0.1:${port}` })}\n`);
});

const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
