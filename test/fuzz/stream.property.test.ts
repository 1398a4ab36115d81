// Round three, and a live workdir (round five): how a response ends, and a file changed while it is
// sent. Each case serves a file far larger than what loopback's socket buffers hold (so while the
// client is paused after its first bytes, the server has read only the front of it), by one of the
// three ways a large body goes (native/stream.h): hashed (a settled file, aged past the racy margin
// and never read, so its digest comes from a hashing pass and every chunk is verified), leased
// (below), or a snapshot (a file written just now: read whole and hashed before the headers). It
// reads it under a plan (read it all; pause, then reset; pause, then half-close; pipeline a second
// request behind a reset; pause, change the file in one of several ways, then read on) and predicts
// both what the client gets and the trace lines the run must leave (SPEC 8 and 10):
//   - a body the client completes is exactly the bytes the etag names: never a body whose SHA-256
//     differs from its etag, whatever changed when;
//   - hashed, a change the server had not read past (bytes rewritten in place further on, the file
//     shrunk) cuts the body, and `response_undelivered` follows the read's line with the reason the
//     spec words ("the file changed/shrank while it was sent"); growth is not a change (the body is
//     the first size bytes), so a file that grows completes with the bytes as they were;
//   - a change it cannot see (bytes already sent rewritten, a rename over the name, a writer that
//     only opens the file, a write after the last chunk was released) completes the body with the
//     bytes as they were;
//   - a snapshot completes whatever happens to the file meanwhile: its bytes were read before the
//     headers;
//   - a reset mid-body leaves `response_undelivered` with the generic reason; a pipelined request
//     behind it is never processed and leaves no line;
//   - a body read whole leaves exactly its one `resource_read` line.
// And the leased path (SPEC 10, digest cache): a case may instead serve a file aged past the digest
// cache's racy margin and read once, so that its digest is cached and the body is sent under the
// read lease it was found under, its chunks unhashed. Then any writer that opens the file mid-body,
// whatever it does after (rewrites bytes ahead or already sent, appends, truncates, nothing), cuts
// the body with "a writer opened the file while it was sent"; a rename over the name, a writer after
// the last chunk, a reset and a half-close end as on the hashed path. The writer opens with
// O_NONBLOCK, retried: an open that must wait for the lease fails at once having started the break,
// so this process's loop, which serves the stream, never blocks. Each case checks that it took the
// path it meant to (a cache hit, or none).
import { closeSync, constants, ftruncateSync, mkdirSync, openSync, statfsSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, type Served } from './capsules.js';
import { FUZZ_SCALE, fuzzIt, guard } from './runner.js';
import { settledSince } from './thresholds.js';
import { fieldsOf, readUnder, TraceTail, type Partial } from './wire.js';
import * as native from '../../src/addon/export.js';
import { rawGet, sha256Hex } from '../helpers/http.js';

const MIB = 1024 * 1024;
/** Far above loopback's buffers (a few MiB at most for a client paused after 64 KiB). */
const SIZE = 12 * MIB;
const MAX_BYTES = 16 * MIB;
const CHUNK = 512 * 1024;
/**
 * For reset-after-end: the smallest whole number of chunks larger than what the kernel takes in
 * for a paused client (measured once, below). Its last chunk is handed to Node once all but two
 * are in the kernel, and the kernel cannot hold it all: the reset finds bytes Node still holds.
 */
let sizeEnd = 4 * MIB;
const UNDELIVERED = 'the connection closed before the whole body was sent';
/** src/http/stream-body.ts and native/stream.cc: a body sent under its lease, cut for a writer. */
const WRITER_CAME = 'a writer opened the file while it was sent';
/** Filesystems whose digests the cache keeps (native/digest_cache.cc: ext2/3/4, XFS, btrfs). */
const CACHED_FS = new Set([0xef53, 0x58465342, 0x9123683e]);

let base: string;
let served: Served;
let tail: TraceTail;
let next = 0;
const SMALL = Buffer.from('behind the reset\n');

beforeAll(async () => {
  base = tempDir('rp-fuzz-stream-');
  const workdir = join(base, 'workdir');
  mkdirSync(join(workdir, 'out'), { recursive: true });
  writeFileSync(join(workdir, 'out', 'small.txt'), SMALL);
  served = await serveCapsule({
    workdir,
    traceDir: join(base, 'traces'),
    yaml: `name: streams\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: ${MAX_BYTES}\n`,
  });
  tail = new TraceTail(served.tracePath);
  tail.next();
  served.launched.server.app.server.on('connection', (s: Socket) => (serverSide = s));
  // Past what the kernel takes in for a paused client, and past the streaming threshold (below it a body is read whole).
  const inKernel = await pausedClientTakes();
  sizeEnd = Math.max(Math.floor(inKernel / CHUNK) + 1, native.LIMITS.streamThresholdBytes / CHUNK + 1) * CHUNK;
  // The leased path needs a filesystem the digest cache trusts, leases, and files old enough to be
  // stored: a pool made now, aged while the hashed cases run.
  leases = CACHED_FS.has(Number(statfsSync(workdir).type)) && (await readFile('/proc/sys/fs/leases-enable', 'utf8').catch(() => '0')).trim() === '1';
  if (!leases) console.error('stream-endings: no digest cache or no leases here, the leased cases are not run');
  for (let i = 0; i < POOL; i++) settle(i % 3 === 2 ? sizeEnd : SIZE);
});

/**
 * How many bytes loopback takes in for a client that reads its first bytes and pauses: a plain
 * pair of sockets, the sender writing CHUNK at a time under backpressure as a streamed body is,
 * measured once it has stalled. (Not through the server: a file written just now is a snapshot,
 * handed to Node whole, so Node's counters there cannot tell the kernel's share from its own.)
 */
async function pausedClientTakes(): Promise<number> {
  const listener = createServer();
  await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
  const sender = new Promise<Socket>((r) => listener.once('connection', r));
  const reader = connect({ host: '127.0.0.1', port: (listener.address() as AddressInfo).port });
  reader.once('data', () => reader.pause());
  const side = await sender;
  let taken = 0;
  let stop = false;
  const chunk = Buffer.alloc(CHUNK);
  const pump = () => {
    while (!stop && taken < 64 * MIB && side.write(chunk, (e) => !e && (taken += CHUNK))) {}
    if (!stop) side.once('drain', pump);
  };
  pump();
  // Stalled: nothing more taken for three looks in a row.
  for (let last = -1, still = 0; still < 3; ) {
    await new Promise((r) => setTimeout(r, 50));
    still = taken === last ? still + 1 : 0;
    last = taken;
  }
  stop = true;
  side.destroy();
  reader.destroy();
  await new Promise((r) => listener.close(r));
  return taken;
}

/** Whether this filesystem and kernel give the digest cache its leases (else leased cases are skipped). */
let leases = false;
/** Aged files for hashed and leased cases: enough that the bounded run rarely waits for one to settle. */
const POOL = Math.ceil(12 * Math.min(FUZZ_SCALE, 4));
type Pooled = { name: string; size: number; salt: number; created: number };
/** Aged files never read (a hashed case's), and aged files read once (a leased case's: digest cached). */
const pool: Pooled[] = [];
const warmPool: Pooled[] = [];

/** Writes a file for the pool; it is settled (and may hold a cached digest) once SETTLED_AFTER_MS have passed. */
function settle(size: number): void {
  const name = `l${next++}.bin`;
  const salt = 1000 + next;
  writeFileSync(join(served.workdir, 'out', name), content(size, salt));
  pool.push({ name, size, salt, created: Date.now() });
}

/**
 * A pool file of `size` old enough to be settled (waiting for one if need be): from the warm pool
 * when `warm` and one is there (its digest already cached), else one never read.
 */
async function takeSettled(size: number, warm = false): Promise<Pooled & { warm: boolean }> {
  const w = warm ? warmPool.findIndex((f) => f.size === size) : -1;
  if (w >= 0) return { ...warmPool.splice(w, 1)[0]!, warm: true };
  let i = pool.findIndex((f) => f.size === size);
  if (i < 0) {
    settle(size);
    i = pool.length - 1;
  }
  settle(size); // one more settles meanwhile for the next case
  const [f] = pool.splice(i, 1);
  await settledSince(f!.created);
  return { ...f!, warm: false };
}

/** The server's end of the newest connection (the in-process server's own socket). */
let serverSide: Socket | null = null;

/**
 * Waits until the server has ended the response (its last chunk handed to Node) while Node still
 * holds bytes the kernel did not take: true if that state was reached within a second.
 */
async function endedWithBytesHeld(): Promise<boolean> {
  for (let i = 0; i < 200; i++) {
    const s = serverSide as (Socket & { _httpMessage?: { writableEnded?: boolean } }) | null;
    if (s?._httpMessage?.writableEnded && s.writableLength > 0) return true;
    await new Promise((r) => setTimeout(r, 5));
  }
  const s = serverSide as (Socket & { _httpMessage?: { writableEnded?: boolean } }) | null;
  if (process.env.FUZZ_DEBUG) console.error(`server socket: ended ${s?._httpMessage?.writableEnded} held ${s?.writableLength} written ${s?.bytesWritten}`);
  return false;
}

/**
 * Waits (a bounded number of looks) until the server's side of the newest connection has stopped:
 * bytes held in Node that the kernel does not take, and no more written for three looks in a row.
 */
async function stalled(): Promise<void> {
  let last = -1;
  let still = 0;
  for (let i = 0; i < 200 && still < 3; i++) {
    await new Promise((r) => setTimeout(r, 5));
    const written = serverSide?.bytesWritten ?? 0;
    still = written === last && (serverSide?.writableLength ?? 0) > 0 ? still + 1 : 0;
    last = written;
  }
}

/** Cases that end once the last chunk is released: how many reached that state with bytes still held. */
const heldAtEnd = { held: 0, not: 0 };

afterAll(async () => {
  // A harness that never reaches the state those cases are about checks nothing there.
  if (heldAtEnd.not > heldAtEnd.held)
    throw new Error(
      `harness: ${heldAtEnd.not} of ${heldAtEnd.held + heldAtEnd.not} reset-after-end/write-after-end cases found the whole body in the kernel (sizeEnd ${sizeEnd} too small)`,
    );
  await served?.close();
  removeTree(base);
});

type Change =
  | { c: 'write-ahead'; back: number } // rewrite bytes near the end, which the server has not read yet
  | { c: 'write-sent'; at: number } // rewrite bytes the client already has
  | { c: 'grow'; by: number }
  | { c: 'shrink'; by: number }
  | { c: 'rename-over' }
  | { c: 'open-only' }; // a writer opens the file and closes it, writing nothing
type Ending =
  | { e: 'whole' }
  | { e: 'reset'; behind: boolean }
  // A body small enough that the server hands its last chunk to Node (res.end) while the paused
  // client's kernel buffers are full: the reset then cancels writes Node still holds, and Node
  // emits 'finish' for a body that never left.
  | { e: 'reset-after-end' }
  | { e: 'half-close' }
  | { e: 'change'; change: Change }
  // As reset-after-end, but a writer rewrites a byte once the last chunk was released, then the
  // client reads on: every byte was read (and, unleased, verified) before the write.
  | { e: 'write-after-end'; at: number };
/**
 * The way the body goes: a settled file read for the first time (hashed: verified chunk by chunk),
 * a settled file whose digest is cached (leased: sent under the read lease), or a file written just
 * now (snapshot).
 */
type Kind = 'hashed' | 'leased' | 'snapshot';
interface Case {
  pauseAfter: number;
  salt: number;
  ending: Ending;
  kind: Kind;
  /**
   * Change the file only once the server has stalled (the kernel's buffers full, bytes held in
   * Node, nothing moving): no chunk is being read then, so the send's own watch must notice.
   */
  stall?: boolean;
}

const changeArb: fc.Arbitrary<Change> = fc.oneof(
  fc.record({ c: fc.constant('write-ahead' as const), back: fc.integer({ min: 1, max: 256 * 1024 }) }),
  fc.record({ c: fc.constant('write-sent' as const), at: fc.nat({ max: 1000 }) }),
  fc.record({ c: fc.constant('grow' as const), by: fc.integer({ min: 1, max: 70_000 }) }),
  fc.record({ c: fc.constant('shrink' as const), by: fc.integer({ min: 1, max: 2 * MIB }) }),
  fc.constant<Change>({ c: 'rename-over' }),
  fc.constant<Change>({ c: 'open-only' }),
);
const caseArb: fc.Arbitrary<Case> = fc.record({
  pauseAfter: fc.oneof(fc.constantFrom(1, 1000), fc.integer({ min: 1, max: 64 * 1024 })),
  salt: fc.integer({ min: 1, max: 250 }),
  ending: fc.oneof(
    { weight: 1, arbitrary: fc.constant<Ending>({ e: 'whole' }) },
    { weight: 2, arbitrary: fc.record({ e: fc.constant('reset' as const), behind: fc.boolean() }) },
    { weight: 1, arbitrary: fc.constant<Ending>({ e: 'reset-after-end' }) },
    { weight: 1, arbitrary: fc.constant<Ending>({ e: 'half-close' }) },
    { weight: 5, arbitrary: changeArb.map((change) => ({ e: 'change' as const, change })) },
    { weight: 1, arbitrary: fc.record({ e: fc.constant('write-after-end' as const), at: fc.nat() }) },
  ),
  kind: fc.constantFrom<Kind>('hashed', 'leased', 'snapshot'),
  stall: fc.boolean(),
});

/** `size` bytes (a multiple of 4) that depend on `salt`, filled a word at a time (writeUInt32LE took twice as long). */
function content(size: number, salt: number): Buffer {
  const words = new Uint32Array(size / 4);
  for (let j = 0; j < words.length; j++) words[j] = ((j * 4 * 2654435761) ^ (salt * 40503)) >>> 0;
  return Buffer.from(words.buffer);
}

/**
 * Opens `path` for writing as any writer would, but with O_NONBLOCK: an open that must wait for a
 * read lease fails at once (EWOULDBLOCK), having started the lease break, and is retried until the
 * server lets the lease go. So this process's event loop, which serves the stream, never blocks.
 * Null if the lease was not let go within the retries: the case goes on without the write (a break
 * was still started, which the model's prediction is about).
 */
async function openWriter(path: string, append = false): Promise<number | null> {
  for (let i = 0; i < 400; i++) {
    try {
      return openSync(path, constants.O_WRONLY | constants.O_NONBLOCK | (append ? constants.O_APPEND : 0));
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'EAGAIN' && code !== 'EWOULDBLOCK') throw error;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  return null;
}

/** The change, made by a writer that opens the file (or a rename over its name). */
async function apply(change: Change, path: string, old: Buffer, received: number): Promise<void> {
  if (change.c === 'rename-over') {
    await writeFile(`${path}.new`, content(old.length, 77));
    await rename(`${path}.new`, path);
    return;
  }
  const fd = await openWriter(path, change.c === 'grow');
  if (fd === null) return;
  try {
    switch (change.c) {
      case 'write-ahead':
      case 'write-sent': {
        const at = change.c === 'write-ahead' ? old.length - change.back : Math.min(change.at, Math.max(0, received - 1));
        writeSync(fd, Buffer.from([old[at]! ^ 0x5a]), 0, 1, at);
        return;
      }
      case 'grow':
        writeSync(fd, Buffer.alloc(change.by, 0x41));
        return;
      case 'shrink':
        ftruncateSync(fd, old.length - change.by);
        return;
      case 'open-only':
        return;
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * What the model says of the one body: complete or cut, and the undelivered reason (null: none).
 * Leased, any writer that opens the file before the last chunk cuts the body, whatever it writes. A
 * snapshot was read whole before the headers: no change after them touches it.
 */
function predict(ending: Ending, kind: Kind): { complete: boolean; reason: string | null } {
  switch (ending.e) {
    case 'whole':
      return { complete: true, reason: null };
    case 'reset':
    case 'reset-after-end':
      return { complete: false, reason: UNDELIVERED };
    case 'half-close':
      return { complete: true, reason: null };
    case 'write-after-end':
      return { complete: true, reason: null };
    case 'change':
      if (ending.change.c === 'rename-over' || kind === 'snapshot') return { complete: true, reason: null };
      if (kind === 'leased') return { complete: false, reason: WRITER_CAME };
      switch (ending.change.c) {
        case 'write-ahead':
          return { complete: false, reason: 'the file changed while it was sent' };
        case 'shrink':
          return { complete: false, reason: 'the file shrank while it was sent' };
        case 'grow':
        case 'write-sent':
        case 'open-only':
          return { complete: true, reason: null };
      }
  }
}

async function runCase(c: Case): Promise<void> {
  const leased = c.kind === 'leased';
  if (leased && !leases) return;
  const endAtEnd = c.ending.e === 'reset-after-end' || c.ending.e === 'write-after-end';
  const size = endAtEnd ? sizeEnd : SIZE;
  let name: string;
  let bytes: Buffer;
  let settled: Pooled | null = null;
  if (c.kind !== 'snapshot') {
    const f = (settled = await takeSettled(size, leased));
    name = f.name;
    bytes = content(size, f.salt);
    if (leased && !f.warm) {
      // A settled file, read once whole: its digest is now cached, and the read below finds it under a lease.
      tail.next();
      const warm = await rawGet(served.url, `/resources/files/${name}`);
      expect(warm.status, `harness: the read that caches ${name}'s digest`).toBe(200);
      expect(warm.body.equals(bytes), 'harness: the pool file holds what it was written with').toBe(true);
      await tail.wait(1);
    }
  } else {
    name = `s${next++}.bin`;
    bytes = content(size, c.salt);
    writeFileSync(join(served.workdir, 'out', name), bytes);
  }
  const path = join(served.workdir, 'out', name);
  tail.next();
  const { hits, hashes } = native.digestCacheStats();
  const generation = served.launched.session.generation;
  const behind = c.ending.e === 'reset' && c.ending.behind;
  const targets = [`/resources/files/${name}`, ...(behind ? ['/resources/files/small.txt'] : [])];
  let received = 0;
  let held = true;
  const got: Partial[] = await readUnder(served.port, targets, {
    pauseAfter: c.pauseAfter,
    then: c.ending.e === 'reset' || c.ending.e === 'reset-after-end' ? 'reset' : c.ending.e === 'half-close' ? 'half-close' : 'read-on',
    at: async () => {
      if (c.ending.e === 'change' && c.stall) await stalled();
      if (c.ending.e === 'change') await apply(c.ending.change, path, bytes, received);
      if (c.ending.e === 'reset-after-end') held = await endedWithBytesHeld();
      if (c.ending.e === 'write-after-end') {
        held = await endedWithBytesHeld();
        if (held) await apply({ c: 'write-sent', at: c.ending.at % size }, path, bytes, size);
      }
    },
  }).then((g) => g);
  received = got[0]?.body.length ?? 0;
  // An unchanged pool file goes back as it is to the warm pool (still settled, read once: its
  // digest cached where the cache works); a changed one is deleted (a fresh one is settling).
  if (settled !== null) {
    if (c.ending.e === 'change' || c.ending.e === 'write-after-end') unlinkSync(path);
    else warmPool.push(settled);
  }
  const label = `${JSON.stringify(c)} (${got.map((g) => `${g.status} ${g.body.length}/${g.headers.get('content-length')}${g.complete ? ' complete' : ''}${g.reset ? ' reset' : ''}${g.fin ? ' fin' : ''}`).join(', ')})`;
  // The harness's own check: the case took the path it meant to (a cached digest under its lease, a
  // hashing pass, or neither: a snapshot hashes what it reads, and the cache counts no pass).
  const after = native.digestCacheStats();
  expect(after.hits > hits, `${label}: harness: the body was ${leased ? '' : 'not '}sent under a cached digest`).toBe(leased);
  expect(after.hashes - hashes, `${label}: harness: the body was ${c.kind === 'hashed' ? '' : 'not '}hashed in a pass before its headers`).toBe(
    c.kind === 'hashed' ? 1 : 0,
  );
  const first = got[0];
  expect(first?.status, label).toBe(200);
  expect(first!.headers.get('etag'), label).toBe(`"sha256:${sha256Hex(bytes)}"`);
  expect(first!.headers.get('content-length'), label).toBe(String(size));
  // The promise of SPEC 10, whatever happened: no client completes a body its etag does not name.
  if (first!.complete)
    expect(sha256Hex(first!.body) === sha256Hex(bytes) && first!.body.equals(bytes), `${label}: a completed body is exactly the bytes its etag names`).toBe(
      true,
    );
  // A half-close: Node's server (httpAllowHalfOpen off) aborts the request and ends the connection
  // cleanly, usually mid-body; the spec promises no body then, only a trace that says so. The
  // model takes the client's view and requires the trace to agree with it.
  if (process.env.FUZZ_DEBUG && endAtEnd) console.error(`${c.ending.e}: bytes held after the end: ${held}`);
  // Kernel buffers that took the whole body: it was delivered, and the case says nothing (rare:
  // afterAll fails the file if most such cases said nothing).
  if (endAtEnd) heldAtEnd[held ? 'held' : 'not']++;
  if (!held) return;
  const want = c.ending.e === 'half-close' ? { complete: first!.complete, reason: first!.complete ? null : UNDELIVERED } : predict(c.ending, c.kind);
  expect(first!.complete, `${label}: the body is ${want.complete ? 'completed' : 'cut'}`).toBe(want.complete);
  // (The server resets; whether the client's socket reports the RST or, having read what was queued
  // before it, an end, is the kernel's and libuv's business: the short body is what a client sees.)
  // A pipelined request behind the reset never got its turn: not answered, not processed.
  if (behind) expect(got.length, `${label}: the request behind the reset is never answered`).toBe(1);
  const read = {
    event_type: 'resource_read',
    path: name,
    outcome: 'ok',
    bytes: size,
    sha256: sha256Hex(bytes),
    generation,
    containment_achieved: 'advisory',
    reason: null,
  };
  const expected: Array<Record<string, unknown>> = [read];
  // handle_id null after a read: docs/trace.md, and SPEC 8's rule that a field that does not apply is
  // an explicit null (SPEC 8's table row says "without handle_id": docs/fuzzing.md, round three).
  if (want.reason !== null)
    expected.push({
      event_type: 'response_undelivered',
      of: 'resource_read',
      path: name,
      handle_id: null,
      bytes: size,
      generation,
      outcome: 'undelivered',
      reason: want.reason,
    });
  const lines = (await tail.wait(expected.length)).map(fieldsOf);
  // A moment more: a line that should not be there (the request behind the reset) would come now.
  await new Promise((r) => setTimeout(r, behind ? 50 : 0));
  lines.push(...tail.next().map(fieldsOf));
  if (JSON.stringify(lines) !== JSON.stringify(expected))
    throw new Error(
      `${label}: the trace lines of this run:\n${lines.map((l) => JSON.stringify(l)).join('\n')}\nthe model says:\n${expected.map((l) => JSON.stringify(l)).join('\n')}`,
    );
}

describe('how a response ends, and files changed while streamed', () => {
  fuzzIt({
    name: 'stream-endings',
    file: import.meta.filename,
    runs: 14,
    timeoutMs: 120_000,
    // Every ending and every change, snapshot, hashed, then leased, in every run (the settled ones last: the pool settles meanwhile).
    examples: () => {
      const endings: Ending[] = [
        { e: 'whole' },
        { e: 'reset', behind: false },
        { e: 'reset', behind: true },
        { e: 'reset-after-end' },
        { e: 'half-close' },
        { e: 'write-after-end', at: 12345 },
        ...(['write-ahead', 'write-sent', 'grow', 'shrink', 'rename-over', 'open-only'] as const).map((k) => ({
          e: 'change' as const,
          change: (k === 'write-ahead'
            ? { c: k, back: 1 }
            : k === 'write-sent'
              ? { c: k, at: 0 }
              : k === 'grow'
                ? { c: k, by: 1 }
                : k === 'shrink'
                  ? { c: k, by: 1 }
                  : { c: k }) as Change,
        })),
      ];
      // Hashed and snapshot, the file changes at once; leased, once the send has stalled (its watch must see the writer).
      return (['snapshot', 'hashed', 'leased'] as const).flatMap((kind) =>
        endings.map((ending) => [{ pauseAfter: 1000, salt: 3, ending, kind, stall: kind === 'leased' }] as [Case]),
      );
    },
    // Invariant: a completed body is exactly its etag's bytes; hashed, a change not yet read (not growth) cuts it and response_undelivered says why; under a cached digest's lease any writer opening the file cuts it ("a writer opened the file while it was sent"); a snapshot completes whatever changes; a reset leaves response_undelivered and nothing for the request behind it.
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
