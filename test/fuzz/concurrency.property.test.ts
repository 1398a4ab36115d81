// Concurrency and lifetime over real sockets (raw `net`, no HTTP client in between): several
// connections at once, each pipelining a few GETs, read fast or slowly (paused between chunks),
// some reset mid-body, against groups of files of the same length (so reused read buffers fit any
// of them) on both sides of every size threshold, with a memory budget small enough that large
// reads queue for it and reuse each other's buffers. Every body received completely is exactly its
// file's bytes with the etag of those bytes; every partial body (cut by a reset) is a prefix of its
// own file; the only other answer is a catalogued 503 over_capacity; and once every connection is
// closed, the memory budget holds nothing (the budget is given back whichever way a response ends).
import { mkdirSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, type Served } from './capsules.js';
import { fuzzIt, guard } from './runner.js';
import { BIG_MAX_BYTES, settledSince, THRESHOLDS } from './thresholds.js';
import { sha256Hex } from '../helpers/http.js';

/**
 * Larger than what the kernel's socket buffers take in for a client that does not read (about
 * 1.3 MB on loopback here): the rest of such a body waits in the server, in the buffer it was read
 * into, until the client reads on.
 */
const HUGE = 3 * 1024 * 1024;

/** Same-length groups: three files of each length, every 8-byte window naming its file. */
const LENGTHS = [100, ...THRESHOLDS.map((t) => t.bytes + 1).filter((n) => n <= BIG_MAX_BYTES), BIG_MAX_BYTES, HUGE];
const PER_LENGTH = 3;
const files: Array<{ name: string; bytes: Buffer }> = [];

function contentOf(id: number, size: number): Buffer {
  const out = Buffer.alloc(size);
  for (let i = 0; i < size; i += 8) {
    const word = Buffer.from(`${String(id).padStart(3, '0')}:${String((i / 8) % 10000).padStart(4, '0')}`, 'latin1');
    word.copy(out, i, 0, Math.min(8, size - i));
  }
  return out;
}

let base: string;
let served: Served;

beforeAll(async () => {
  base = tempDir('rp-fuzz-conc-');
  const workdir = join(base, 'workdir');
  mkdirSync(join(workdir, 'out'), { recursive: true });
  const written = Date.now();
  LENGTHS.forEach((size, g) => {
    for (let k = 0; k < PER_LENGTH; k++) {
      const id = g * PER_LENGTH + k;
      const name = `g${g}-${k}.bin`;
      const bytes = contentOf(id, size);
      writeFileSync(join(workdir, 'out', name), bytes);
      files.push({ name, bytes });
    }
  });
  // Settled before the first read: a file changed in the last 2 s is served as a snapshot, read
  // whole first (native/stream.cc), and only a settled one streams, where a chunk buffer goes back
  // to the pool while other reads take from it (the live-capsule property covers snapshots).
  await settledSince(written);
  served = await serveCapsule({
    workdir,
    traceDir: join(base, 'traces'),
    yaml: `name: crowd\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: ${HUGE}\n`,
    // Room for a dozen of the largest reads at once (idle pooled buffers count too), so finished
    // reads' buffers are kept and reused by the next read of their length.
    memoryBudgetBytes: 12 * HUGE,
  });
});

afterAll(async () => {
  await served?.close();
  removeTree(base);
});

interface Conn {
  requests: number[];
  /** Milliseconds before connecting: reads start over time, while earlier bodies are still being sent. */
  delay: number;
  /** Connect only once the previous connection has received its first bytes (after `delay`). */
  follow: boolean;
  /** Read as it comes, slowly (a pause every few chunks), or stalled after the first chunk, then slowly. */
  reader: 'fast' | 'slow' | 'stall';
  /** How long a stalled reader stalls, in ms. */
  stallMs: number;
  /** Reset the connection once this many body bytes of response `at` have arrived. */
  reset: null | { at: number; after: number };
}

/** Indices of files, the huge ones (the last group) rarely: each costs a slow reader ~0.2 s. */
const fileArb = fc.oneof(
  { weight: 12, arbitrary: fc.nat({ max: (LENGTHS.length - 1) * PER_LENGTH - 1 }) },
  { weight: 1, arbitrary: fc.integer({ min: (LENGTHS.length - 1) * PER_LENGTH, max: LENGTHS.length * PER_LENGTH - 1 }) },
);

const connArb: fc.Arbitrary<Conn> = fc.record({
  requests: fc.array(fileArb, { minLength: 1, maxLength: 4 }),
  delay: fc.oneof(fc.constant(0), fc.nat({ max: 40 })),
  follow: fc.boolean(),
  reader: fc.constantFrom('fast', 'slow', 'stall') as fc.Arbitrary<Conn['reader']>,
  stallMs: fc.constant(60),
  reset: fc.option(fc.record({ at: fc.nat({ max: 3 }), after: fc.oneof(fc.constantFrom(0, 1), fc.nat({ max: HUGE })) }), { freq: 3 }),
});

interface Got {
  file: number;
  status: number | null;
  headers: Map<string, string>;
  body: Buffer;
  complete: boolean;
}

/** Sends the pipelined requests of `c` and parses the answers as they come; resolves on close. */
function runConn(c: Conn, port: number, previous: Promise<void>, begun: () => void): Promise<Got[]> {
  return new Promise((resolve) => {
    let socket!: Socket;
    const picks = c.requests.map((r) => r % files.length);
    const got: Got[] = [];
    let buf = Buffer.alloc(0);
    let cur: Got | null = null;
    let want = 0;
    let done = false;
    let chunks = 0;
    const finish = () => {
      begun();
      if (done) return;
      done = true;
      resolve(got);
    };
    const start = () => {
      socket = connect({ host: '127.0.0.1', port });
      socket.on('connect', () => {
        const text = picks
          .map((f, i) => `GET /resources/files/${files[f]!.name} HTTP/1.1\r\nHost: x\r\n${i === picks.length - 1 ? 'Connection: close\r\n' : ''}\r\n`)
          .join('');
        socket.write(text);
      });
      socket.on('data', onData);
      socket.on('error', finish);
      socket.on('close', finish);
    };
    const parse = () => {
      for (;;) {
        if (cur === null) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
          buf = buf.subarray(end + 4);
          const headers = new Map<string, string>();
          for (const l of lines.slice(1)) {
            const k = l.indexOf(':');
            headers.set(l.slice(0, k).trim().toLowerCase(), l.slice(k + 1).trim());
          }
          cur = { file: picks[got.length] ?? -1, status: Number(lines[0]!.split(' ')[1]), headers, body: Buffer.alloc(0), complete: false };
          got.push(cur);
          want = Number(headers.get('content-length') ?? 0);
        }
        const take = Math.min(want - cur.body.length, buf.length);
        cur.body = Buffer.concat([cur.body, buf.subarray(0, take)]);
        buf = buf.subarray(take);
        if (c.reset && c.reset.at === got.length - 1 && cur.body.length >= Math.min(c.reset.after, want) && !cur.complete) {
          socket.resetAndDestroy();
          finish();
          return;
        }
        if (cur.body.length < want) return;
        cur.complete = true;
        cur = null;
      }
    };
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      begun();
      parse();
      // A stalled reader stops after its first chunk: the rest of its answers wait in the
      // kernel's buffers and in the server, in the buffers they were read into.
      if (c.reader === 'stall' && chunks === 0 && !done) {
        chunks += 1;
        socket.pause();
        setTimeout(() => socket.resume(), c.stallMs);
        return;
      }
      // A slow reader lets the server's writes back up: a pause every few chunks.
      if (c.reader !== 'fast' && !done && ++chunks % 4 === 0) {
        socket.pause();
        setTimeout(() => socket.resume(), 1 + (d.length % 3));
      }
    };
    const go = () => (c.delay === 0 ? start() : setTimeout(start, c.delay));
    if (c.follow) void previous.then(go);
    else go();
  });
}

/** Waits until the budget holds nothing (each close is handled on a later turn of the loop). */
async function budgetDrained(): Promise<number> {
  const memory = served.launched.session.memory;
  for (let i = 0; i < 2000 && memory.inUse !== 0; i++) await new Promise((r) => setTimeout(r, 5));
  return memory.inUse;
}

describe('concurrent, pipelined and reset clients against same-length files', () => {
  fuzzIt({
    name: 'concurrency-bodies',
    file: import.meta.filename,
    runs: 12,
    timeoutMs: 120_000,
    // A fixed crowd first: every length, fast and slow, a reset inside a large body.
    examples: () => {
      const last = LENGTHS.length - 1;
      const group = (g: number) => [g * PER_LENGTH, g * PER_LENGTH + 1, g * PER_LENGTH + 2];
      return [
        // Every length but the huge one, every reader, a reset inside a body.
        [
          LENGTHS.slice(0, -1).flatMap((_, g) => [
            { requests: group(g), delay: 0, follow: false, reader: (['fast', 'slow', 'stall'] as const)[g % 3], stallMs: 60, reset: null },
            { requests: [g * PER_LENGTH + 1, g * PER_LENGTH], delay: 0, follow: g % 2 === 1, reader: 'slow' as const, stallMs: 60, reset: { at: 0, after: 1 } },
          ]),
        ],
        // Stalled readers of the largest files while others keep reading files of that same length.
        // Each connection asks for two of them, never the same two as the one before it. A stall of
        // 300 ms leaves a stalled body's write waiting in the server (what the kernel's buffers do
        // not take) while the fast readers take pooled buffers: a buffer pooled before its write
        // completed would carry another file's bytes.
        [
          [0, 1, 2, 3].map((k) => ({
            requests: [group(last)[(2 * k) % 3]!, group(last)[(2 * k + 1) % 3]!],
            delay: 0,
            follow: k > 0,
            reader: k % 2 === 0 ? ('stall' as const) : ('fast' as const),
            stallMs: 300,
            reset: null,
          })),
        ],
      ];
    },
    // Invariant: every complete body is exactly its own file's bytes with their etag, every cut body a prefix of its own file, and the budget returns to zero.
    property: () =>
      fc.asyncProperty(
        fc.array(connArb, { minLength: 1, maxLength: 8 }),
        guard(async (conns) => {
          const t0 = Date.now();
          // Each connection's first bytes, for the one after it to wait on.
          const firsts = conns.map(() => {
            let resolve!: () => void;
            const promise = new Promise<void>((r) => (resolve = r));
            return { promise, resolve };
          });
          const results = await Promise.all(
            conns.map((c, i) => runConn(c, served.port, i === 0 ? Promise.resolve() : firsts[i - 1]!.promise, firsts[i]!.resolve)),
          );
          if (process.env.FUZZ_DEBUG) {
            const tally = new Map<string, number>();
            for (const g of results.flat()) tally.set(`${g.status}${g.complete ? '' : ' cut'}`, (tally.get(`${g.status}${g.complete ? '' : ' cut'}`) ?? 0) + 1);
            console.error(`${Date.now() - t0} ms, answers: ${[...tally].map(([k, n]) => `${n}x ${k}`).join(', ')}`);
          }
          results.forEach((got, ci) => {
            got.forEach((g, ri) => {
              const file = files[g.file];
              const label = `connection ${ci} response ${ri} (${file?.name})`;
              expect(file, `${label}: more answers than requests`).toBeDefined();
              if (g.status === 503) {
                if (g.complete) expect(JSON.parse(g.body.toString('utf8')).error, label).toBe('over_capacity');
                return;
              }
              expect(g.status, label).toBe(200);
              if (g.complete) {
                expect(g.body.length, label).toBe(file!.bytes.length);
                expect(g.body.equals(file!.bytes), `${label}: the body is exactly its file's bytes`).toBe(true);
                expect(g.headers.get('etag'), label).toBe(`"sha256:${sha256Hex(file!.bytes)}"`);
              } else {
                expect(g.body.equals(file!.bytes.subarray(0, g.body.length)), `${label}: a cut body is a prefix of its own file`).toBe(true);
              }
            });
            const c = conns[ci]!;
            if (c.reset === null)
              expect(
                got.every((g) => g.complete),
                `connection ${ci}: every response arrived whole`,
              ).toBe(true);
          });
          expect(await budgetDrained(), 'bytes still held by the memory budget after every connection closed').toBe(0);
        }),
      ),
  });
});
