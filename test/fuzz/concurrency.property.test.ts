// Concurrency and lifetime over real sockets (raw `net`, no HTTP client in between): several
// connections at once, each pipelining a few GETs, read fast or slowly (paused between chunks),
// some reset mid-body, against groups of files of the same length (so reused read buffers fit any
// of them) on both sides of every size threshold, with a memory budget small enough that large
// reads queue for it and reuse each other's buffers. Every body received completely is exactly its
// file's bytes with the etag of those bytes; every partial body (cut by a reset) is a prefix of its
// own file; the only other answer is a catalogued 503 over_capacity; and once every connection is
// closed, the memory budget holds nothing (the budget is given back whichever way a response ends).
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, type Served } from './capsules.js';
import { fuzzIt, guard } from './runner.js';
import { BIG_MAX_BYTES, THRESHOLDS } from './thresholds.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Same-length groups: three files of each length, every 8-byte window naming its file. */
const LENGTHS = [100, ...THRESHOLDS.map((t) => t.bytes + 1).filter((n) => n <= BIG_MAX_BYTES), BIG_MAX_BYTES];
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
  LENGTHS.forEach((size, g) => {
    for (let k = 0; k < PER_LENGTH; k++) {
      const id = g * PER_LENGTH + k;
      const name = `g${g}-${k}.bin`;
      const bytes = contentOf(id, size);
      writeFileSync(join(workdir, 'out', name), bytes);
      files.push({ name, bytes });
    }
  });
  served = await serveCapsule({
    workdir,
    traceDir: join(base, 'traces'),
    yaml: `name: crowd\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: ${BIG_MAX_BYTES}\n`,
    // Room for about three of the largest reads at once: the rest wait, and buffers are reused.
    memoryBudgetBytes: 3 * BIG_MAX_BYTES + 4096,
  });
});

afterAll(async () => {
  await served?.close();
  removeTree(base);
});

interface Conn {
  requests: number[];
  slow: boolean;
  /** Reset the connection once this many body bytes of response `at` have arrived. */
  reset: null | { at: number; after: number };
}

const connArb: fc.Arbitrary<Conn> = fc.record({
  requests: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }),
  slow: fc.boolean(),
  reset: fc.option(fc.record({ at: fc.nat({ max: 3 }), after: fc.oneof(fc.constantFrom(0, 1), fc.nat({ max: BIG_MAX_BYTES })) }), { freq: 3 }),
});

interface Got {
  file: number;
  status: number | null;
  headers: Map<string, string>;
  body: Buffer;
  complete: boolean;
}

/** Sends the pipelined requests of `c` and parses the answers as they come; resolves on close. */
function runConn(c: Conn, port: number): Promise<Got[]> {
  return new Promise((resolve) => {
    const socket: Socket = connect({ host: '127.0.0.1', port });
    const picks = c.requests.map((r) => r % files.length);
    const got: Got[] = [];
    let buf = Buffer.alloc(0);
    let cur: Got | null = null;
    let want = 0;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      resolve(got);
    };
    socket.on('connect', () => {
      const text = picks.map((f, i) =>
        `GET /resources/files/${files[f]!.name} HTTP/1.1\r\nHost: x\r\n${i === picks.length - 1 ? 'Connection: close\r\n' : ''}\r\n`).join('');
      socket.write(text);
    });
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
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      parse();
      if (c.slow && !done) {
        socket.pause();
        setTimeout(() => socket.resume(), 1 + (d.length % 4));
      }
    });
    socket.on('error', finish);
    socket.on('close', finish);
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
    runs: 25,
    timeoutMs: 120_000,
    // A fixed crowd first: every length, fast and slow, a reset inside a large body.
    examples: () => [[LENGTHS.flatMap((_, g) => [
      { requests: [g * PER_LENGTH, g * PER_LENGTH + 1, g * PER_LENGTH + 2], slow: g % 2 === 0, reset: null },
      { requests: [g * PER_LENGTH + 1, g * PER_LENGTH], slow: true, reset: { at: 0, after: 1 } },
    ])]],
    // Invariant: every complete body is exactly its own file's bytes with their etag, every cut body a prefix of its own file, and the budget returns to zero.
    property: () =>
      fc.asyncProperty(fc.array(connArb, { minLength: 1, maxLength: 8 }), guard(async (conns) => {
        const results = await Promise.all(conns.map((c) => runConn(c, served.port)));
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
              expect(g.headers.get('etag'), label).toBe(`"sha256:${sha(file!.bytes)}"`);
            } else {
              expect(g.body.equals(file!.bytes.subarray(0, g.body.length)), `${label}: a cut body is a prefix of its own file`).toBe(true);
            }
          });
          const c = conns[ci]!;
          if (c.reset === null) expect(got.every((g) => g.complete), `connection ${ci}: every response arrived whole`).toBe(true);
        });
        expect(await budgetDrained(), 'bytes still held by the memory budget after every connection closed').toBe(0);
      })),
  });
});
