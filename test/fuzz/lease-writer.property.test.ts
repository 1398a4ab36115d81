// The lease's promise to writers (SPEC 10, the digest cache: a body sent under a cached digest's
// read lease; issue 39). A read lease makes a writer's open(2) or truncate(2) wait until the
// holder lets go, up to the kernel's lease-break-time (45 s by default); the server promises to let
// go within its lease watch's period (~50 ms), whatever the client does, and to cut the body then.
// The real `serve` command serves files aged past the racy margin and read once (so each is sent
// under its cached digest and lease) to a client that pauses after 0 bytes to 1 MiB of body (its
// send then stalls: 12 MiB is far more than loopback's buffers take in) or never pauses; after a
// generated delay another process (a shell) opens the file O_WRONLY|O_TRUNC, O_WRONLY|O_APPEND or
// O_RDWR, or truncate(2)s it, and measures its own wait. Then the client reads on.
//  - the writer's wait is under 2 s (the watch's 50 ms plus a wide margin for a loaded CI machine;
//    a watch that does not look while the send stalls leaves the writer to the kernel's 45 s);
//  - a complete body is exactly the bytes its etag names;
//  - a writer that came mid-body of a paused client cut it, and the trace says why ("a writer
//    opened the file while it was sent"): the harness's check that the body went under the lease.
// Skipped where the digest cache or leases are not available (the cache's filesystems, and
// fs.leases-enable), saying so.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, statfsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { reap } from '../helpers/cleanup.js';
import { etagOf, liveWorkdir, parsedTrace, pattern, serveLive, stalledGet, type LiveServer } from '../helpers/live.js';
import { fuzzIt, guard } from './runner.js';
import { settledSince } from './thresholds.js';

const MiB = 1024 * 1024;
const SIZE = 12 * MiB;
/** Filesystems whose digests the cache keeps (native/digest_cache.cc: ext2/3/4, XFS, btrfs). */
const CACHED_FS = new Set([0xef53, 0x58465342, 0x9123683e]);
const WRITER_CAME = 'a writer opened the file while it was sent';
/** The bound on a writer's wait: far above the watch's 50 ms, far below lease-break-time. */
const BOUND_MS = 2_000;
/** How long the harness lets a writer wait before it gives up on it (a failure: over the bound). */
const GIVE_UP_MS = 6_000;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

type Op = 'trunc-open' | 'rdwr' | 'append' | 'truncate';
/**
 * The writer: a shell (a cheap process, where python3 took seconds to start on a loaded machine)
 * that opens the file as a shell redirection does (`>`: O_WRONLY|O_TRUNC, `>>`: O_WRONLY|O_APPEND,
 * `<>`: O_RDWR) or truncates it with truncate(1), printing its own wait in nanoseconds (date +%s%N
 * before and after the one call that may wait for the lease).
 */
const WRITER = `p=$1
s=$(date +%s%N)
case $2 in
  trunc-open) exec 3>"$p" ;;
  append) exec 3>>"$p" ;;
  rdwr) exec 3<>"$p" ;;
  truncate) truncate -s 0 "$p" ;;
esac
e=$(date +%s%N)
echo $(( (e - s) / 1000000 ))
`;

interface Case {
  /** Body bytes the client reads before it stops reading; null: it never pauses. */
  pauseAt: number | null;
  /** ms after the pause (or after the request, when it never pauses) that the writer comes. */
  delay: number;
  op: Op;
}

const caseArb: fc.Arbitrary<Case> = fc.record({
  pauseAt: fc.option(fc.constantFrom(1, 64 * 1024, 512 * 1024, MiB), { nil: null, freq: 5 }),
  delay: fc.constantFrom(0, 20, 100, 300),
  op: fc.constantFrom<Op>('trunc-open', 'rdwr', 'append', 'truncate'),
});

/** Runs the writer; resolves with its own measure of its wait (ms), or null if it gave up. */
function writer(path: string, op: Op): Promise<{ waitedMs: number | null; wallMs: number }> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const child = reap(spawn('/bin/sh', ['-c', WRITER, 'writer', path, op], { stdio: ['ignore', 'pipe', 'pipe'] }));
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), GIVE_UP_MS);
    child.once('exit', (code) => {
      clearTimeout(timer);
      const wallMs = Date.now() - started;
      if (code === 0) resolve({ waitedMs: Number(out.trim()), wallMs });
      else if (code === null) resolve({ waitedMs: null, wallMs });
      else reject(new Error(`harness: the writer failed (${code}): ${err}`));
    });
  });
}

let leases = false;
let server: LiveServer;
let workdir: string;
/** Files written and when: each case takes the oldest (settled once SETTLED_AFTER_MS old) and writes it anew after. */
const pool: Array<{ name: string; salt: number; written: number }> = [];
let salts = 7000;
const FILES = 8;

/** Set up in the first case (the helpers clean up when the running test ends, so not in beforeAll). */
let ready: Promise<void> | null = null;
async function setup(): Promise<void> {
  const init: Record<string, Buffer> = {};
  for (let i = 0; i < FILES; i++) {
    const salt = salts++;
    pool.push({ name: `f${i}.bin`, salt, written: 0 });
    init[`f${i}.bin`] = pattern(SIZE, salt);
  }
  workdir = liveWorkdir(init);
  const written = Date.now();
  for (const f of pool) f.written = written;
  leases = CACHED_FS.has(Number(statfsSync(workdir).type)) && readFileSync('/proc/sys/fs/leases-enable', 'utf8').trim() === '1';
  if (!leases) {
    console.error('lease-writer: no digest cache or no leases here, the property is not run');
    return;
  }
  server = await serveLive('tcp', workdir);
  await settledSince(written);
}

async function runCase(c: Case): Promise<void> {
  await (ready ??= setup());
  if (!leases) return;
  const t0 = Date.now();
  const f = pool.shift()!;
  await settledSince(f.written);
  const name = f.name;
  const path = join(workdir, 'out', name);
  const bytes = pattern(SIZE, f.salt);
  // Read once, whole: its digest is cached (a settled file), so the next read goes under the lease.
  const warm = await stalledGet(server.target, `/resources/files/${name}`);
  expect(warm.complete && sha(warm.body) === sha(bytes), 'harness: the warm-up read is the file').toBe(true);
  const t1 = Date.now();
  const before = parsedTrace(server.trace).length;
  let measured: { waitedMs: number | null; wallMs: number } | null = null;
  const label = JSON.stringify(c);
  let answer;
  if (c.pauseAt === null) {
    let running: Promise<void> | null = null;
    const timer = setTimeout(() => (running = writer(path, c.op).then((m) => void (measured = m))), c.delay);
    // A writer that comes as the answer starts may cut it before its head leaves (a reset
    // discards what was queued): a cut like any other, which the trace must still record.
    answer = await stalledGet(server.target, `/resources/files/${name}`).catch((error: Error) => {
      if (!error.message.startsWith('no response head')) throw error;
      return null;
    });
    clearTimeout(timer);
    if (running === null) running = writer(path, c.op).then((m) => void (measured = m));
    await running;
  } else {
    answer = await stalledGet(server.target, `/resources/files/${name}`, c.pauseAt, async () => {
      await new Promise((r) => setTimeout(r, c.delay));
      measured = await writer(path, c.op);
    });
  }
  const t2 = Date.now();
  const m = measured as { waitedMs: number | null; wallMs: number } | null;
  expect(m, label).not.toBeNull();
  expect(
    m!.waitedMs,
    `${label}: the writer waited ${m!.waitedMs === null ? `more than ${GIVE_UP_MS} ms (given up)` : `${m!.waitedMs} ms`} for the lease`,
  ).not.toBeNull();
  expect(m!.waitedMs!, `${label}: a writer waits at most ~50 ms for a leased stream (bound ${BOUND_MS} ms)`).toBeLessThan(BOUND_MS);
  if (answer === null) {
    let lines = parsedTrace(server.trace).slice(before);
    for (let i = 0; i < 200 && !lines.some((l) => l.event_type === 'response_undelivered'); i++) {
      await new Promise((r) => setTimeout(r, 10));
      lines = parsedTrace(server.trace).slice(before);
    }
    expect(
      lines.some((l) => l.event_type === 'response_undelivered'),
      `${label}: an answer cut before its head is traced as undelivered`,
    ).toBe(true);
    expect(server.alive(), label).toBe(true);
    const salt = salts++;
    writeFileSync(path, pattern(SIZE, salt));
    pool.push({ name, salt, written: Date.now() });
    return;
  }
  expect(answer.status, label).toBe(200);
  // A client that never pauses may be overtaken by the writer before the server opens the file
  // (then the body is what the writer left); a paused one had its head, so its etag is the file's.
  if (c.pauseAt !== null) expect(etagOf(answer), label).toBe(sha(bytes));
  if (answer.complete) expect(sha(answer.body), `${label}: a complete body is the bytes its etag names`).toBe(etagOf(answer));
  if (c.pauseAt !== null) {
    // Paused after at most 1 MiB of 12 MiB: the writer came mid-body, under the lease.
    expect(answer.complete, `${label}: a writer mid-body cuts a leased body`).toBe(false);
    let lines = parsedTrace(server.trace).slice(before);
    for (let i = 0; i < 200 && !lines.some((l) => l.event_type === 'response_undelivered'); i++) {
      await new Promise((r) => setTimeout(r, 10));
      lines = parsedTrace(server.trace).slice(before);
    }
    const undelivered = lines.find((l) => l.event_type === 'response_undelivered');
    expect(undelivered?.reason, `${label}: the trace says why the body was cut (the body went under its lease)`).toBe(WRITER_CAME);
  }
  expect(server.alive(), label).toBe(true);
  // Spent: written anew, it settles again while the next cases run.
  const salt = salts++;
  writeFileSync(path, pattern(SIZE, salt));
  pool.push({ name, salt, written: Date.now() });
  if (process.env.FUZZ_DEBUG)
    console.error(`lease-writer ${label}: wait+warm ${t1 - t0} ms, case ${t2 - t1} ms, after ${Date.now() - t2} ms, writer ${JSON.stringify(m)}`);
}

describe("the lease's promise to writers", () => {
  fuzzIt({
    name: 'lease-writer',
    file: import.meta.filename,
    runs: 3,
    timeoutMs: 120_000,
    // Fixed: a client stalled after its first byte and a writer that truncates on open, one that
    // opens to append (writing nothing), one that truncates after a longer stall; then a client
    // that never pauses.
    examples: (): Array<[Case]> => [
      [{ pauseAt: 1, delay: 100, op: 'trunc-open' }],
      [{ pauseAt: 64 * 1024, delay: 300, op: 'append' }],
      [{ pauseAt: MiB, delay: 20, op: 'truncate' }],
      [{ pauseAt: null, delay: 0, op: 'rdwr' }],
    ],
    // Invariant: a writer's open or truncate of a file streamed under its lease waits < 2 s (the watch's 50 ms), whatever the client does; a complete body is its etag's bytes; a paused body the writer interrupted is cut, traced "a writer opened the file while it was sent".
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
