// The memory budget's accounting (SPEC 10: memory is budgeted; one budget counts small bodies,
// streaming windows and listing bodies; a request that cannot get its share in time is answered
// 503 with retry-after; issue 39). The real `serve` command with `--memory-budget 2Mi` and its
// /metrics on a listener of its own, and a generated sequence of requests, one at a time: streams
// of a settled 12 MiB file whose client stops reading after the headers (each holds its window,
// two 512 KiB chunks, until it is reset), reads of files read whole (100 KiB, 500 KiB: their size),
// small reads (4 KiB: counted, never refused), listings (their body), and resets of the oldest held
// stream. A request that does not fit is either left to wait, or rescued: 300 ms into its wait a
// held stream is reset. The model is the budget's rule in SPEC 10 and src/export/memory.ts's doc:
//  - a request fits when nothing is held, or what is held plus its share is at most the budget;
//    small reads always fit;
//  - one that fits is answered 200; one that does not is not answered while nothing is given back:
//    rescued, it is answered 200 only after the reset; left alone, it is answered 503
//    over_capacity with retry-after, no sooner than the budget's wait (2 s, less a margin);
//  - between steps, /metrics' resource_plane_memory_budget_in_use_bytes comes to exactly what the
//    model holds (the held windows): every share is given back when its response closes.
// (The regression this catches: a listing counted but never waiting was answered 200 at once under
// a full budget, which only `npm run stress` saw.)
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { defer } from '../helpers/cleanup.js';
import { startServe } from '../helpers/cli.js';
import { liveWorkdir, pattern } from '../helpers/live.js';
import { scratch } from '../helpers/tree.js';
import { fuzzIt, guard } from './runner.js';
import { settledSince } from './thresholds.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const BUDGET = 2 * MiB;
/** A streamed body's window: two chunks (native/limits.h: kStreamChunkBytes). */
const WINDOW = 2 * 512 * KiB;
/** The budget's wait (src/export/memory.ts: DEFAULT_BUDGET_WAIT_MS), less a margin for timers. */
const WAIT_MIN_MS = 1_500;
const FILES = { 'big.bin': 12 * MiB, 'w100.bin': 100 * KiB, 'w500.bin': 500 * KiB, 'small.txt': 4 * KiB };
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

type Kind = 'hold' | 'w100' | 'w500' | 'small' | 'list';
type Op = { op: 'req'; kind: Kind; rescue: boolean } | { op: 'reset' };
interface Case {
  ops: Op[];
}

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({ op: 'req' as const, kind: 'hold' as const, rescue: true }) },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('req' as const),
      kind: fc.constantFrom<Kind>('w100', 'w500', 'small', 'list', 'hold'),
      rescue: fc.nat(3).map((n) => n !== 0),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ op: 'reset' as const }) },
);
/** At most one request left to wait out its 2 s per case (the others are rescued). */
const caseArb: fc.Arbitrary<Case> = fc.array(opArb, { minLength: 2, maxLength: 7 }).map((ops) => {
  let waits = 0;
  return { ops: ops.map((o) => (o.op === 'req' && !o.rescue && ++waits > 1 ? { ...o, rescue: true } : o)) };
});

interface Server {
  operator: { port: number };
  metrics: { port: number };
  listingBytes: number;
  files: Record<string, Buffer>;
}
let server: Promise<Server> | null = null;

async function start(): Promise<Server> {
  const files: Record<string, Buffer> = {};
  for (const [name, size] of Object.entries(FILES)) files[name] = pattern(size, size);
  const dir = liveWorkdir(files);
  const written = Date.now();
  const run = join(scratch(), 'run');
  mkdirSync(run, { mode: 0o700 });
  const s = await startServe(['--workdir', dir, '--trace', join(run, 'trace.jsonl'), '--memory-budget', '2Mi', '--metrics-listen', '127.0.0.1:0']);
  defer(async () => {
    if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
    await s.exited;
  });
  const ready = s.ready as typeof s.ready & { metrics_url: string };
  const operator = { port: Number(new URL(ready.url).port) };
  const metrics = { port: Number(new URL(ready.metrics_url).port) };
  await settledSince(written); // the big file must stream, not be a snapshot
  // The listing's body (its share), with nothing else held.
  const listing = await request(operator, '/resources/files');
  expect(listing.status, 'harness: the listing').toBe(200);
  return { operator, metrics, listingBytes: listing.body.length, files };
}

interface Reply {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  /** When the head arrived (Date.now()). */
  at: number;
}

/** One GET on its own connection, read whole. */
function request(target: { port: number }, path: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port: target.port });
    let raw = Buffer.alloc(0);
    let at = 0;
    socket.on('data', (d: Buffer) => {
      if (at === 0) at = Date.now();
      raw = Buffer.concat([raw, d]);
    });
    socket.once('error', reject);
    socket.once('close', () => {
      const end = raw.indexOf('\r\n\r\n');
      if (end < 0) return reject(new Error(`no answer to ${path}: ${raw.toString('latin1').slice(0, 200)}`));
      const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      resolve({ status: Number(lines[0]!.split(' ')[1]), headers, body: raw.subarray(end + 4), at });
    });
    socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  });
}

/** A stream whose client stops reading once the head has come: resolves with the head and the socket. */
function hold(target: { port: number }): Promise<{ status: number; at: number; socket: Socket; head: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port: target.port });
    let raw = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      raw = Buffer.concat([raw, d]);
      const end = raw.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      socket.pause();
      const head = raw.subarray(0, end).toString('latin1');
      resolve({ status: Number(head.split(' ')[1]), at: Date.now(), socket, head });
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('close', () => reject(new Error('the held stream closed before its head')));
    socket.write('GET /resources/files/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  });
}

async function inUse(s: Server): Promise<number> {
  const r = await request(s.metrics, '/metrics');
  const m = /^resource_plane_memory_budget_in_use_bytes (\d+)/m.exec(r.body.toString());
  if (!m) throw new Error('harness: no budget gauge in /metrics');
  return Number(m[1]);
}

/** Waits (bounded) until the gauge shows `want`; returns what it last showed. */
async function gaugeAt(s: Server, want: number): Promise<number> {
  let seen = -1;
  for (let i = 0; i < 250; i++) {
    seen = await inUse(s);
    if (seen === want) return seen;
    await new Promise((r) => setTimeout(r, 20));
  }
  return seen;
}

async function runCase(c: Case): Promise<void> {
  const s = await (server ??= start());
  const holders: Socket[] = [];
  const label = JSON.stringify(c.ops);
  const resetOldest = () => {
    const h = holders.shift();
    h?.resetAndDestroy();
  };
  try {
    for (const [i, o] of c.ops.entries()) {
      const step = `${label}, step ${i} (${JSON.stringify(o)}), ${holders.length} held`;
      const held = holders.length * WINDOW;
      expect(await gaugeAt(s, held), `${step}: the budget in use is what the held streams hold`).toBe(held);
      if (o.op === 'reset') {
        resetOldest();
        continue;
      }
      const need = o.kind === 'hold' ? WINDOW : o.kind === 'w100' ? 100 * KiB : o.kind === 'w500' ? 500 * KiB : o.kind === 'list' ? s.listingBytes : 0;
      const fits = o.kind === 'small' || held === 0 || held + need <= BUDGET;
      const path = o.kind === 'list' ? '/resources/files' : o.kind === 'small' ? '/resources/files/small.txt' : `/resources/files/${o.kind}.bin`;
      const sent = Date.now();
      const answer = o.kind === 'hold' ? hold(s.operator) : request(s.operator, path);
      let freedAt: number | null = null;
      if (!fits && o.rescue && holders.length > 0) {
        await new Promise((r) => setTimeout(r, 300));
        freedAt = Date.now();
        resetOldest();
      }
      const a = await answer;
      if (!fits && freedAt === null) {
        expect(a.status, `${step}: does not fit (${held} + ${need} > ${BUDGET}) and nothing is given back: 503`).toBe(503);
        if ('headers' in a) {
          expect(a.headers['retry-after'], `${step}: retry-after`).toBeDefined();
          expect(JSON.parse(a.body.toString()).error, step).toBe('over_capacity');
        }
        expect(a.at - sent, `${step}: refused only after the budget's wait`).toBeGreaterThanOrEqual(WAIT_MIN_MS);
        if ('socket' in a) a.socket.destroy();
        continue;
      }
      expect(a.status, `${step}: ${fits ? 'fits' : 'gets its share once a held stream is reset'}: 200`).toBe(200);
      if (freedAt !== null) expect(a.at, `${step}: answered only after a share was given back (${held} + ${need} > ${BUDGET})`).toBeGreaterThanOrEqual(freedAt);
      if ('socket' in a) {
        holders.push(a.socket);
      } else if (o.kind !== 'list') {
        const name = path.slice('/resources/files/'.length);
        expect(sha(a.body), `${step}: the body`).toBe(sha(s.files[name]!));
      }
    }
  } finally {
    while (holders.length > 0) resetOldest();
  }
  expect(await gaugeAt(s, 0), `${label}: every share given back`).toBe(0);
}

describe('the memory budget', () => {
  fuzzIt({
    name: 'budget-shares',
    file: import.meta.filename,
    runs: 3,
    timeoutMs: 120_000,
    // Fixed: a listing under a full budget, rescued (answered only after the reset) and left to
    // wait (503); a whole read the same; small reads that always fit.
    examples: (): Array<[Case]> => [
      [
        {
          ops: [
            { op: 'req', kind: 'hold', rescue: true },
            { op: 'req', kind: 'hold', rescue: true },
            { op: 'req', kind: 'list', rescue: true },
            { op: 'req', kind: 'small', rescue: true },
            { op: 'req', kind: 'w500', rescue: true },
          ],
        },
      ],
      [
        {
          ops: [
            { op: 'req', kind: 'hold', rescue: true },
            { op: 'req', kind: 'hold', rescue: true },
            { op: 'req', kind: 'small', rescue: true },
            { op: 'req', kind: 'list', rescue: false },
            { op: 'reset' },
            { op: 'req', kind: 'w100', rescue: true },
          ],
        },
      ],
    ],
    // Invariant: a request is answered 200 only when its share fits the budget (at once) or after a share was given back; otherwise 503 over_capacity with retry-after after the budget's wait; the gauge always equals the held shares and returns to 0.
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
