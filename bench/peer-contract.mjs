// The honest ceiling for a 1 KiB read (issue 17): a Fastify 5 route doing the contract's minimum
// per request and nothing else. For each GET /resources/files/NAME it opens the root directory,
// opens the file O_RDONLY|O_NOFOLLOW|O_NONBLOCK (a FIFO must not block, a symlink must not be
// followed), fstats it (a regular file only), reads it whole, takes its SHA-256 as the etag
// (node:crypto), writes one JSON trace line synchronously to an O_APPEND file, closes both
// descriptors and replies. No resolver (node:fs has no openat2: the path is joined to the root),
// no lowering beyond a plain-name check, no memory budget, no handles. Everything is synchronous,
// as this server's own small-file path is. Anything else is 404.
// Usage: node bench/peer-contract.mjs ROOT TRACE — prints {"event":"listening","url":…} on stdout.
import { createHash, randomUUID } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import Fastify from 'fastify';

const [root, tracePath] = process.argv.slice(2);
if (!root || !tracePath) {
  process.stderr.write('usage: node bench/peer-contract.mjs ROOT TRACE\n');
  process.exit(2);
}

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_WRONLY, O_APPEND, O_CREAT } = constants;
const trace = openSync(tracePath, O_WRONLY | O_APPEND | O_CREAT, 0o600);
const PREFIX = '/resources/files/';
const PLAIN = /^[A-Za-z0-9_-][A-Za-z0-9_.-]*$/;

const app = Fastify({ logger: false });
app.get('/resources/files/*', (req, reply) => {
  const url = req.raw.url; // routing on the raw target, as the server does
  const name = url.startsWith(PREFIX) ? url.slice(PREFIX.length) : '';
  if (!PLAIN.test(name)) return reply.code(404).send();
  const dir = openSync(root, O_RDONLY | O_DIRECTORY);
  let fd = -1;
  try {
    fd = openSync(join(root, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    const st = fstatSync(fd);
    if (!st.isFile()) return reply.code(404).send();
    const bytes = Buffer.allocUnsafe(st.size);
    let got = 0;
    while (got < st.size) {
      const n = readSync(fd, bytes, got, st.size - got, got);
      if (n === 0) break;
      got += n;
    }
    const body = got === st.size ? bytes : bytes.subarray(0, got);
    const sha256 = createHash('sha256').update(body).digest('hex');
    writeSync(trace, `${JSON.stringify({ ts: new Date().toISOString(), id: randomUUID(), event: 'file_read', path: name, size_bytes: got, sha256 })}\n`);
    return reply.headers({ 'content-type': 'application/octet-stream', etag: `"sha256:${sha256}"` }).send(body);
  } catch {
    return reply.code(404).send();
  } finally {
    if (fd >= 0) closeSync(fd);
    closeSync(dir);
  }
});

const address = await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`${JSON.stringify({ event: 'listening', url: address })}\n`);

const stop = () =>
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
