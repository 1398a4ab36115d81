// Large bodies stream under a verified etag (SPEC section 10, issue 23): a body above the streaming
// threshold whose file is settled is sent in chunks from its descriptor, hashed as it goes, and its
// final chunk is released only once the hash of everything sent equals the etag in the headers.
// Here a raw client reads part of a 32 MiB body, stops reading (so the server stalls on
// backpressure long before the tail), the file is changed behind it in every way (rewritten in
// place, truncated, written through a shared mapping) on the temp directory's filesystem and on
// tmpfs, and the client then reads on: it must never complete a body whose sha256 differs from the
// etag, and the trace must say the body was not delivered because the file changed. A naive
// streamer completes these bodies. Growth is not a change (a live workdir, issue 36): a file
// extended while it streams completes with its first size bytes. And a file written just now is a
// snapshot: whatever happens to it after the headers, its body completes as it was read.
import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { appendFileSync, existsSync, mkdtempSync, openSync, closeSync, statfsSync, truncateSync, writeFileSync, writeSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import * as native from '../../src/addon/export.js';
import { capsule, filesManifest, type Capsule } from '../helpers/capsule.js';
import { defer } from '../helpers/cleanup.js';
import { rawGet, readTrace, sha256Hex } from '../helpers/http.js';
import { stalledGet as stalledGetAt, targetOf, type Answer } from '../helpers/live.js';
import { removeTree, tempDir } from '../helpers/tree.js';

const MiB = 1024 * 1024;
const BODY = 32 * MiB;
/** Far past what the socket buffers and two chunks can hold once the client stops reading. */
const TAIL = 24 * MiB;
const TMPFS_MAGIC = 0x01021994;
const onTmpfs = existsSync('/dev/shm') && statfsSync('/dev/shm').type === TMPFS_MAGIC;

function pattern(size: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i += 4) b.writeUInt32LE((i * 2654435761 + seed) >>> 0, i);
  return b;
}

/**
 * GETs `target` over a raw socket, reads until `pauseAt` body bytes, then stops reading and calls
 * `meanwhile`; afterwards reads on until the server ends or cuts the connection.
 */
function stalledGet(base: string, target: string, pauseAt: number, meanwhile: () => unknown): Promise<Answer> {
  return stalledGetAt(targetOf(base), target, pauseAt, meanwhile);
}

const MAP_WRITE = String.raw`
import mmap, os, sys
path, offset = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
m = mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
os.close(fd)
assert m[offset] is not None
m[offset:offset + 5] = b'XXXXX'
m.close()
`;

const CHANGES: Array<{ name: string; how: RegExp; change: (path: string) => void }> = [
  {
    name: 'rewritten in place at the same size',
    how: /changed/,
    change: (path) => {
      const fd = openSync(path, 'r+');
      writeSync(fd, Buffer.from('rewritten'), 0, 9, BODY - 100);
      closeSync(fd);
    },
  },
  { name: 'truncated', how: /shrank/, change: (path) => truncateSync(path, TAIL) },
  { name: 'written through a shared mapping', how: /changed/, change: (path) => execFileSync('python3', ['-c', MAP_WRITE, path, String(BODY - 4096)]) },
];

/** Past the racy margin of native/digest_cache.h (2 s), plus slack: a file this old is settled. */
const SETTLE_MS = 2_300;

/** A capsule serving out/big.bin; `settled`: aged past the racy margin, so it streams. */
async function bigCapsule(workdir: string, settled = true): Promise<Capsule> {
  writeFileSync(join(workdir, 'out', 'big.bin'), pattern(BODY, 7));
  if (settled) await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  return capsule({ yaml: filesManifest('out/', 64 * MiB), workdir });
}

function workdirOn(parent: string | null): string {
  const dir = parent ? mkdtempSync(join(parent, 'rp-stream-')) : tempDir('rp-stream-');
  defer(() => removeTree(dir));
  execFileSync('mkdir', ['-p', join(dir, 'out')]);
  return dir;
}

describe('a large body streams under a verified etag', () => {
  it('is above the threshold the addon defines, and arrives whole with its etag when nothing changes', async () => {
    expect(native.LIMITS.streamThresholdBytes).toBeLessThan(BODY);
    const c = await bigCapsule(workdirOn(null));
    const r = await rawGet(c.url, '/resources/files/big.bin');
    expect(r.status).toBe(200);
    expect(Number(r.header('content-length'))).toBe(BODY);
    expect(r.header('etag')).toBe(`"sha256:${sha256Hex(r.body)}"`);
    expect(r.body.equals(pattern(BODY, 7))).toBe(true);
    // The line before the body, and no undelivered line after it.
    const trace = readTrace(c.tracePath).filter((e) => e.event_type === 'resource_read' || e.event_type === 'response_undelivered');
    expect(trace).toMatchObject([{ event_type: 'resource_read', outcome: 'ok', bytes: BODY, sha256: sha256Hex(r.body) }]);
  });

  for (const fs of ['the temp directory', 'tmpfs'] as const) {
    describe(`on ${fs}`, () => {
      for (const { name, how, change } of CHANGES) {
        it.skipIf(fs === 'tmpfs' && !onTmpfs)(`a file ${name} while it streams is never completed; the trace says why`, async () => {
          const c = await bigCapsule(workdirOn(fs === 'tmpfs' ? '/dev/shm' : null));
          const path = join(c.workdir, 'out', 'big.bin');
          const r = await stalledGet(c.url, '/resources/files/big.bin', MiB, () => change(path));
          expect(r.status).toBe(200);
          const etag = r.headers.etag!;
          expect(etag).toBe(`"sha256:${createHash('sha256').update(pattern(BODY, 7)).digest('hex')}"`);
          // Never a complete body under that etag with other bytes: the connection ends short.
          expect(r.complete, `${r.body.length} of ${r.headers['content-length']} bytes`).toBe(false);
          expect(r.body.length).toBeLessThan(BODY);
          expect(r.body.equals(pattern(BODY, 7).subarray(0, r.body.length))).toBe(true);
          let undelivered: Record<string, unknown> | undefined;
          for (let i = 0; i < 200 && !undelivered; i++) {
            undelivered = readTrace(c.tracePath).find((e) => e.event_type === 'response_undelivered');
            if (!undelivered) await new Promise((resolve) => setTimeout(resolve, 10));
          }
          expect(undelivered).toMatchObject({ of: 'resource_read', path: 'big.bin', outcome: 'undelivered', bytes: BODY });
          expect(String(undelivered!.reason)).toMatch(how);
          // The memory it held comes back once the connection is gone.
          for (let i = 0; i < 200 && c.session.memory.inUse !== 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
          expect(c.session.memory.inUse).toBe(0);
        });
      }

      it.skipIf(fs === 'tmpfs' && !onTmpfs)('a file extended while it streams completes with its first size bytes: growth is not a change', async () => {
        const c = await bigCapsule(workdirOn(fs === 'tmpfs' ? '/dev/shm' : null));
        const path = join(c.workdir, 'out', 'big.bin');
        const r = await stalledGet(c.url, '/resources/files/big.bin', MiB, () => appendFileSync(path, 'the next version'));
        expect(r.complete, `${r.body.length} of ${r.headers['content-length']} bytes`).toBe(true);
        expect(r.body.equals(pattern(BODY, 7))).toBe(true);
        expect(r.headers.etag).toBe(`"sha256:${sha256Hex(r.body)}"`);
        expect(readTrace(c.tracePath).some((e) => e.event_type === 'response_undelivered')).toBe(false);
      });

      for (const { name, change } of CHANGES) {
        it.skipIf(fs === 'tmpfs' && !onTmpfs)(`a file written just now is a snapshot: ${name} after its headers, it completes as it was read`, async () => {
          const c = await bigCapsule(workdirOn(fs === 'tmpfs' ? '/dev/shm' : null), false);
          const path = join(c.workdir, 'out', 'big.bin');
          const r = await stalledGet(c.url, '/resources/files/big.bin', MiB, () => change(path));
          expect(r.status).toBe(200);
          expect(r.complete, `${r.body.length} of ${r.headers['content-length']} bytes`).toBe(true);
          expect(r.body.equals(pattern(BODY, 7))).toBe(true);
          expect(r.headers.etag).toBe(`"sha256:${sha256Hex(r.body)}"`);
          expect(readTrace(c.tracePath).some((e) => e.event_type === 'response_undelivered')).toBe(false);
          // The snapshot's chunks went back once the response closed.
          for (let i = 0; i < 200 && c.session.memory.inUse !== 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
          expect(c.session.memory.inUse).toBe(0);
        });
      }
    });
  }
});

describe('a body whose digest came from the cache is sent under its read lease', () => {
  /** Past the digest cache's racy margin: a digest may be stored. */
  const SETTLE_MS = 2_300;

  async function settledCapsule(): Promise<{ c: Capsule; path: string }> {
    const workdir = workdirOn(null);
    writeFileSync(join(workdir, 'out', 'big.bin'), pattern(BODY, 7));
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const c = await capsule({ yaml: filesManifest('out/', 64 * MiB), workdir });
    // The first read hashes and stores the digest; the next ones find it under a lease.
    const first = await rawGet(c.url, '/resources/files/big.bin');
    expect(first.status).toBe(200);
    return { c, path: join(workdir, 'out', 'big.bin') };
  }

  it('arrives whole from the cache, unhashed, when nobody writes', async (ctx) => {
    const { c } = await settledCapsule();
    const hits = native.digestCacheStats().hits;
    const r = await rawGet(c.url, '/resources/files/big.bin');
    if (native.digestCacheStats().hits === hits) return ctx.skip(); // no lease here (leases off, or not the owner)
    expect(r.status).toBe(200);
    expect(r.body.equals(pattern(BODY, 7))).toBe(true);
    expect(r.header('etag')).toBe(`"sha256:${sha256Hex(r.body)}"`);
  });

  // The writer is another process: this one serves the stream, and a writer here would block its
  // own event loop in open(2) until the lease is let go.
  const WRITERS: Array<{ name: string; script: string }> = [
    {
      name: 'rewrites a byte in place',
      script: `import os, sys\nfd = os.open(sys.argv[1], os.O_WRONLY)\nos.pwrite(fd, b'rewritten', ${BODY - 100})\nos.close(fd)`,
    },
    { name: 'appends', script: `import os, sys\nfd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\nos.write(fd, b'more')\nos.close(fd)` },
    { name: 'only opens it for writing', script: `import os, sys\nos.close(os.open(sys.argv[1], os.O_WRONLY))` },
    { name: 'writes through a shared mapping', script: MAP_WRITE },
  ];
  for (const { name, script } of WRITERS) {
    it(`a writer that ${name} is let through at once, and the body is cut`, async (ctx) => {
      const { c, path } = await settledCapsule();
      const hits = native.digestCacheStats().hits;
      let writerMs = 0;
      const r = await stalledGet(c.url, '/resources/files/big.bin', MiB, async () => {
        if (native.digestCacheStats().hits === hits) return;
        const t0 = Date.now();
        const args = script === MAP_WRITE ? ['-c', script, path, String(BODY - 4096)] : ['-c', script, path];
        await new Promise<void>((resolve, reject) => execFile('python3', args, (error) => (error ? reject(error) : resolve())));
        writerMs = Date.now() - t0;
      });
      if (native.digestCacheStats().hits === hits) return ctx.skip(); // no lease here (leases off, or not the owner)
      expect(r.status).toBe(200);
      expect(r.complete, `${r.body.length} of ${r.headers['content-length']} bytes`).toBe(false);
      expect(r.body.equals(pattern(BODY, 7).subarray(0, r.body.length))).toBe(true);
      let undelivered: Record<string, unknown> | undefined;
      for (let i = 0; i < 200 && !undelivered; i++) {
        undelivered = readTrace(c.tracePath).find((e) => e.event_type === 'response_undelivered');
        if (!undelivered) await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(undelivered).toMatchObject({ of: 'resource_read', outcome: 'undelivered', reason: 'a writer opened the file while it was sent' });
      // Not a timing bound on the server: a writer kept waiting by the stalled client would wait for
      // the kernel's lease break time (45 s by default, /proc/sys/fs/lease-break-time).
      expect(writerMs, 'the writer was not held until the lease break time').toBeLessThan(30_000);
    });
  }
});

describe('pooled chunk buffers', () => {
  it('are never changed under a write: a slow reader beside fast readers of other streamed files gets every byte right', async () => {
    const workdir = workdirOn(null);
    const files = Array.from({ length: 6 }, (_, i) => ({ name: `f${i}.bin`, body: pattern((3 + i) * MiB + 4096 * i, 100 + i) }));
    for (const f of files) writeFileSync(join(workdir, 'out', f.name), f.body);
    const slowBody = pattern(12 * MiB, 99);
    writeFileSync(join(workdir, 'out', 'slow.bin'), slowBody);
    // Room for a handful of windows: buffers go back to the pool and out again all the time.
    const window = 2 * native.LIMITS.streamChunkBytes;
    const c = await capsule({ yaml: filesManifest('out/', 64 * MiB), workdir, memoryBudgetBytes: 5 * window });
    let paused = 0;
    const slow = stalledReader(c.url, '/resources/files/slow.bin', () => paused++);
    const fast = (async () => {
      for (let round = 0; round < 4; round++) {
        await Promise.all(
          files.map(async (f) => {
            const r = await rawGet(c.url, `/resources/files/${f.name}`);
            if (r.status === 503) return; // no room now: allowed, and no body
            expect(r.status).toBe(200);
            expect(r.body.equals(f.body), `${f.name}, round ${round}`).toBe(true);
            expect(r.header('etag')).toBe(`"sha256:${sha256Hex(f.body)}"`);
          }),
        );
      }
    })();
    await fast;
    const got = await slow;
    expect(paused, 'the slow reader really stalled the server').toBeGreaterThan(3);
    expect(got.equals(slowBody), 'the slow reader got its own bytes').toBe(true);
    for (let i = 0; i < 200 && c.session.memory.inUse !== 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(c.session.memory.inUse).toBe(0);
  });
});

/** Reads a whole body over a raw socket, stopping for 30 ms after every 512 KiB. */
function stalledReader(base: string, target: string, onPause: () => void): Promise<Buffer> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const parts: Buffer[] = [];
    let since = 0;
    socket.on('data', (d: Buffer) => {
      parts.push(d);
      since += d.length;
      if (since >= 512 * 1024) {
        since = 0;
        onPause();
        socket.pause();
        setTimeout(() => socket.resume(), 30);
      }
    });
    socket.on('error', reject);
    socket.on('close', () => {
      const raw = Buffer.concat(parts);
      const end = raw.indexOf('\r\n\r\n');
      resolve(raw.subarray(end + 4));
    });
    socket.write(`GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  });
}
