// Hostile load against a live server on loopback: the shutdown gate every request passes (including
// those Fastify cannot parse), the bounded trace, the memory budget, and a normal request answered
// while hundreds of connections idle or trickle. No assertion counts work done in a fixed time.
import { execFileSync } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import * as native from '../../src/addon/export.js';
import { TRACE_FIELD_MAX_CHARS } from '../../src/limits.js';
import { capsule, filesManifest, type Capsule } from '../helpers/capsule.js';
import { rawGet, rawRequest, readTrace } from '../helpers/http.js';
import { startServe } from '../helpers/cli.js';
import { defer } from '../helpers/cleanup.js';
import { makeTree, scratch } from '../helpers/tree.js';

/** A sealed capsule serving `lines`, closed when the test finishes (`stop()` ends it earlier, its trace kept). */
function up(lines: string[], yaml = filesManifest('out/', 64 << 20)): Promise<Capsule> {
  return capsule({ tree: lines, yaml, containment: 'sealed' });
}

/** Opens a raw connection and sends `text` without finishing the request. */
function trickle(url: string, text: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(port), hostname, () => {
      s.write(text);
      resolve(s);
    });
    s.on('error', () => undefined);
    s.once('error', reject);
  });
}

describe('shutdown gate', () => {
  it('refuses a request Fastify cannot parse during the drain, like every other request', async () => {
    const srv = await up(['out/n.txt: n', 'out/x%ZZ: secret-by-the-side-door']);
    writeFileSync(join(srv.session.workdir, 'out', 'big.bin'), Buffer.alloc(16 << 20, 1));
    // Hold one response open (never read) so the drain lasts while the gate is tested.
    const holder = await trickle(srv.url, 'GET /resources/files/big.bin HTTP/1.1\r\nhost: x\r\n\r\n');
    holder.pause();
    await new Promise((r) => setTimeout(r, 200));
    const stopping = srv.stop();
    await new Promise((r) => setTimeout(r, 100));
    const side = await rawGet(srv.url, '/resources/files/x%ZZ');
    const plain = await rawGet(srv.url, '/resources/files/n.txt');
    expect([side.status, plain.status]).toEqual([503, 503]);
    expect(side.json()).toEqual({ error: 'shutting_down', message: 'the capsule is shutting down' });
    for (const r of [side, plain]) {
      expect(r.header('content-type')).toBe('application/json');
      expect(r.header('retry-after')).toBe('1');
      expect(r.header('connection')).toBe('close');
      expect(r.header('x-murmur-containment')).toBe(srv.session.containment);
    }
    expect(side.body.toString()).not.toContain('secret-by-the-side-door');
    holder.destroy();
    await stopping;
  });
});

describe('a bounded trace', () => {
  it('stores a caller-chosen field up to a fixed length, then its length and a short hash', async () => {
    const srv = await up(['out/a: a'], 'name: t\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n');
    const audience = 'a'.repeat(14_000);
    const res = await rawGet(srv.url, `/resources/peer/mh1.${'A'.repeat(40)}.${'B'.repeat(43)}`, [['x-murmur-audience', audience]]);
    expect(res.json().error).toBe('malformed_handle');
    const line = readTrace(srv.tracePath).find((l) => l.event_type === 'peer_handle_redeem')!;
    const stored = line.audience_asserted as string;
    expect(stored.length).toBeLessThan(TRACE_FIELD_MAX_CHARS + 64);
    expect(stored).toMatch(new RegExp(`^a{${TRACE_FIELD_MAX_CHARS}}…\\[14000 chars, sha256:[0-9a-f]{16}\\]$`));
    // The whole line stays small whatever the header's size.
    expect(JSON.stringify(line).length).toBeLessThan(2_000);
  });

  it('closes a cleanly stopped session with session_end, its reason and its counts', async () => {
    const srv = await up(['out/a: a']);
    await rawGet(srv.url, '/resources/files/a');
    await rawGet(srv.url, '/resources/files/missing');
    await srv.stop();
    const lines = readTrace(srv.tracePath);
    expect(lines.at(-1)).toMatchObject({ event_type: 'session_end', reason: 'stopped', counts: { resource_read: 2 } });
  });
});

describe('the memory budget', () => {
  it('answers 503 over_capacity with retry-after, traced, while never-reading clients hold the budget; memory frees when they go', async () => {
    const workdir = scratch(['out/small: s'], 'rp-load-');
    writeFileSync(join(workdir, 'out', 'eight.bin'), Buffer.alloc(8 << 20, 2));
    // Two streamed 8 MiB bodies hold a window each (two chunks); a budget of two windows and a half
    // has no room for a third. Their clients never read.
    const window = 2 * native.LIMITS.streamChunkBytes;
    const l = await capsule({ workdir, yaml: filesManifest('out/', 64 << 20), memoryBudgetBytes: 2 * window + window / 2 });
    const { tracePath } = l;
    const holders = await Promise.all([0, 1].map(() => trickle(l.server.url, 'GET /resources/files/eight.bin HTTP/1.1\r\nhost: x\r\n\r\n')));
    for (const h of holders) h.pause();
    for (let i = 0; i < 200 && l.session.memory.inUse < 2 * window; i++) await new Promise((r) => setTimeout(r, 10));
    expect(l.session.memory.inUse).toBe(2 * window);
    const refused = await rawGet(l.server.url, '/resources/files/eight.bin');
    expect(refused.status).toBe(503);
    expect(refused.header('retry-after')).toBe('1');
    expect(refused.json().error).toBe('over_capacity');
    expect(readTrace(tracePath).some((e) => e.event_type === 'resource_read' && e.outcome === 'over_capacity')).toBe(true);
    for (const h of holders) h.destroy();
    for (let i = 0; i < 100 && l.session.memory.inUse !== 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(l.session.memory.inUse).toBe(0);
    expect((await rawGet(l.server.url, '/resources/files/eight.bin')).status).toBe(200);
  });
});

describe('slow and many clients', () => {
  it('answers a normal request while 300 connections trickle or idle', async () => {
    const srv = await up(['out/a: hello']);
    const sockets: Socket[] = [];
    defer(() => sockets.forEach((s) => s.destroy()));
    for (let i = 0; i < 300; i++) {
      sockets.push(await trickle(srv.url, i % 2 ? 'GET /resources/files/a HTTP/1.1\r\nhost: x\r\nx-slow: ' : ''));
    }
    const res = await rawGet(srv.url, '/resources/files/a');
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('hello');
  });

  it('refuses an oversized header block early, in the JSON error shape', async () => {
    const srv = await up(['out/a: a']);
    const res = await rawGet(srv.url, '/resources/files/a', [['x-big', 'b'.repeat(20_000)]]);
    expect(res.status).toBe(431);
    expect(res.json()).toEqual({ error: 'bad_request', message: 'the request could not be parsed' });
  });
});

describe('listings that end', () => {
  /** A capsule makes a huge sparse file for free; hashing it to EOF would never end. */
  function sparse(workdir: string, name: string, size: string): void {
    execFileSync('truncate', ['-s', size, join(workdir, 'out', name)]);
  }

  it('answers 500 io_error saying so once a listing passes its time budget, traced, and the next listing is not held', async () => {
    const workdir = scratch(['out/a: a'], 'rp-load-');
    sparse(workdir, 'huge.bin', '1T');
    const l = await capsule({ workdir, yaml: filesManifest('out/'), listingBudgetMs: 300 });
    const { tracePath } = l;
    const res = await rawGet(l.server.url, '/resources/files');
    expect(res.status).toBe(500);
    expect(res.json()).toEqual({ error: 'io_error', message: expect.stringMatching(/^read failed: .*time budget of 300 ms/) });
    const line = readTrace(tracePath).find((e) => e.event_type === 'resource_list')!;
    expect(line).toMatchObject({ outcome: 'io_error', reason: expect.stringContaining('time budget') });
    // Reads meanwhile, and after, are answered.
    expect((await rawGet(l.server.url, '/resources/files/a')).status).toBe(200);
  });

  it('a listing budget longer than the idle timer still ends in its io_error answer, never a silent cut', async () => {
    const { LIMITS } = await import('../../src/limits.js');
    const workdir = scratch(['out/a: a'], 'rp-load-');
    sparse(workdir, 'huge.bin', '1T');
    const budgetMs = LIMITS.idleTimeoutMs + 3_000;
    const l = await capsule({ workdir, yaml: filesManifest('out/'), listingBudgetMs: budgetMs });
    const res = await rawRequest(l.server.url, { target: '/resources/files', timeoutMs: budgetMs + 20_000 });
    expect(res.status).toBe(500);
    expect(res.json()).toEqual({ error: 'io_error', message: expect.stringMatching(new RegExp(`time budget of ${budgetMs} ms`)) });
  }, 90_000);

  it('SIGTERM during a listing of a 15 TiB sparse file ends the process, with session_end written', async () => {
    const workdir = scratch(['murmur.yaml: x'], 'rp-load-');
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    makeTree(workdir, ['out/a: a']);
    sparse(workdir, 'huge.bin', '15T');
    const tracePath = join(scratch([], 'rp-load-trace-'), 'sigterm-listing.jsonl');
    const s = await startServe(['--workdir', workdir, '--trace', tracePath]);
    const { hostname, port } = new URL(s.ready.url);
    // The client stays connected: nothing but the shutdown can end this listing early.
    const sock = connect(Number(port), hostname, () => sock.write('GET /resources/files HTTP/1.1\r\nhost: x\r\n\r\n'));
    sock.on('error', () => undefined);
    await new Promise((r) => setTimeout(r, 500));
    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    sock.destroy();
    const lines = readTrace(tracePath);
    expect(lines.at(-1)).toMatchObject({ event_type: 'session_end', reason: 'SIGTERM' });
  });
});

describe('refusals past a client allowance', () => {
  it('are answered but summarised, not traced one by one: the trace grows by a bounded amount', async (ctx) => {
    const { REFUSAL_BURST } = await import('../../src/limits.js');
    const srv = await up(['out/a: a']);
    const notFoundLines = () => readTrace(srv.tracePath).filter((l) => l.event_type === 'resource_read' && l.outcome === 'not_found').length;
    // Sent until the trace stops keeping up with the refusals (a busy machine refills the bucket
    // while it sends, so the number needed is not fixed); bounded by a count, skipped loudly past it.
    let sent = 0;
    while (sent < 20 * REFUSAL_BURST && (sent < REFUSAL_BURST || notFoundLines() === sent)) {
      const batch = await Promise.all(Array.from({ length: 100 }, () => rawGet(srv.url, '/resources/files/missing')));
      for (const r of batch) expect(r.json().error).toBe('not_found');
      sent += batch.length;
    }
    // A read that sends bytes is always traced, even past the allowance.
    expect((await rawGet(srv.url, '/resources/files/a')).status).toBe(200);
    await srv.stop();
    const lines = readTrace(srv.tracePath);
    const refusals = lines.filter((l) => l.event_type === 'resource_read' && l.outcome === 'not_found').length;
    if (refusals === sent) ctx.skip('the bucket refilled as fast as this machine could send');
    const summaries = lines.filter((l) => l.event_type === 'refusals_suppressed');
    expect(refusals).toBeGreaterThanOrEqual(REFUSAL_BURST);
    expect(refusals).toBeLessThan(sent);
    const suppressed = summaries.reduce((n, l) => n + (l.suppressed as number), 0);
    expect(refusals + suppressed).toBe(sent);
    expect(summaries[0]).toMatchObject({ client: '127.0.0.1', since_ms: expect.any(Number) });
    expect(lines.some((l) => l.event_type === 'resource_read' && l.outcome === 'ok')).toBe(true);
    expect(lines.at(-1)!.event_type).toBe('session_end');
  });

  it("refill at a fixed rate per client, and one client cannot spend another's allowance", async () => {
    const { RefusalLimiter } = await import('../../src/trace/refusal-limit.js');
    let t = 0;
    const written: Array<{ client: string; suppressed: number }> = [];
    const limiter = new RefusalLimiter(
      async (f) => void written.push(f),
      3,
      2,
      () => t,
    );
    expect([1, 2, 3, 4].map(() => limiter.allow('a'))).toEqual([true, true, true, false]);
    expect(limiter.allow('b')).toBe(true);
    t += 500; // half a second at 2 per second: one more
    expect([limiter.allow('a'), limiter.allow('a')]).toEqual([true, false]);
    await limiter.close();
    expect(written).toEqual([{ client: 'a', suppressed: 2, since_ms: 0, clients: 1 }]);
  });

  it('share one server-wide bucket: rotating addresses traces no more than it allows, and every refusal is still counted', async () => {
    const { RefusalLimiter } = await import('../../src/trace/refusal-limit.js');
    const { NAMED_SUMMARIES } = await import('../../src/limits.js');
    let t = 0;
    const written: Array<{ client: string | null; suppressed: number; clients: number }> = [];
    // 3 per client, 5 for everyone, nothing earned back: only the clock could refill them.
    const limiter = new RefusalLimiter(
      async (f) => void written.push(f),
      3,
      0,
      () => t,
      { burst: 5, perSecond: 0 },
    );
    const traced = Array.from({ length: 40 }, (_, i) => limiter.allow(`127.0.0.${i + 1}`)).filter(Boolean).length;
    expect(traced).toBe(5);
    // A client the server-wide bucket stopped keeps its own allowance for when that refills.
    const again = new RefusalLimiter(
      async () => undefined,
      3,
      0,
      () => t,
      { burst: 1, perSecond: 1 },
    );
    expect([again.allow('a'), again.allow('a')]).toEqual([true, false]);
    t += 1000;
    expect(again.allow('a')).toBe(true);
    await limiter.close();
    // The summaries are bounded too: the most refused clients by name, everyone else in one line.
    expect(written.length).toBe(NAMED_SUMMARIES + 1);
    expect(written.at(-1)).toMatchObject({ client: null, clients: 35 - NAMED_SUMMARIES });
    expect(written.reduce((n, l) => n + l.suppressed, 0)).toBe(35);
  });

  it('forget a client into the shared summary line, never one line per forgotten client', async () => {
    const { RefusalLimiter } = await import('../../src/trace/refusal-limit.js');
    const { MAX_TRACKED_CLIENTS, NAMED_SUMMARIES } = await import('../../src/limits.js');
    const written: Array<{ client: string | null; suppressed: number; clients: number }> = [];
    const limiter = new RefusalLimiter(
      async (f) => void written.push(f),
      1,
      0,
      () => 0,
      { burst: 0, perSecond: 0 },
    );
    const clients = 3 * MAX_TRACKED_CLIENTS;
    for (let i = 0; i < clients; i++) limiter.allow(`127.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
    expect(written).toEqual([]);
    await limiter.close();
    expect(written.length).toBe(NAMED_SUMMARIES + 1);
    expect(written.reduce((n, l) => n + l.suppressed, 0)).toBe(clients);
    expect(written.reduce((n, l) => n + l.clients, 0)).toBe(clients);
  });

  it('over HTTP: refusals from 100 addresses of 127.0.0.0/8 grow the trace no faster than the server-wide rate', async (ctx) => {
    const { REFUSAL_BURST, SERVER_REFUSAL_BURST, SERVER_REFUSALS_PER_SECOND, NAMED_SUMMARIES, SUMMARY_INTERVAL_MS } = await import('../../src/limits.js');
    const srv = await up(['out/a: a']);
    const started = readTrace(srv.tracePath)[0]!.timestamp as number;
    // What the server-wide bucket can have granted by `at`, plus a second's worth of slack for the
    // bucket being made just before session_start's timestamp. A slower machine only raises it.
    const allowance = (at: number) => SERVER_REFUSAL_BURST + (SERVER_REFUSALS_PER_SECOND * (at - started + 1000)) / 1000;
    const sources = Array.from({ length: 100 }, (_, i) => `127.1.0.${i + 1}`);
    // Each address stays far below its own burst, so only the server-wide bucket can hold the trace.
    const cap = sources.length * (REFUSAL_BURST / 4);
    let sent = 0;
    // Also bounded in time: a machine that cannot out-send the rate (under ASan, or busy) skips below.
    const giveUpAt = Date.now() + 20_000;
    while (sent < cap && sent <= 2 * allowance(Date.now()) && Date.now() < giveUpAt) {
      const batch = await Promise.all(sources.map((localAddress) => rawRequest(srv.url, { target: '/resources/files/missing', localAddress })));
      for (const r of batch) expect(r.json().error).toBe('not_found');
      sent += batch.length;
    }
    await srv.stop();
    const lines = readTrace(srv.tracePath);
    const ended = lines.at(-1)!.timestamp as number;
    const refusals = lines.filter((l) => l.event_type === 'resource_read' && l.outcome === 'not_found');
    if (sent <= 2 * allowance(ended)) ctx.skip(`this machine sent only ${sent} refusals, within what the server-wide rate allows`);
    expect(new Set(refusals.map((l) => l.path))).toEqual(new Set(['missing']));
    expect(refusals.length).toBeLessThanOrEqual(allowance(ended));
    const summaries = lines.filter((l) => l.event_type === 'refusals_suppressed');
    expect(refusals.length + summaries.reduce((n, l) => n + (l.suppressed as number), 0)).toBe(sent);
    // The summaries have their own bound: a few lines per interval, whatever the addresses.
    expect(summaries.length).toBeLessThanOrEqual((NAMED_SUMMARIES + 1) * (Math.ceil((ended - started) / SUMMARY_INTERVAL_MS) + 1));
    expect(summaries.every((l) => l.client === null || sources.includes(l.client as string))).toBe(true);
  });
});

describe('the memory budget holds the peak, not only the steady state', () => {
  it('64 clients that never read an 8 MiB file raise RSS by about the budget, round after round; memory returns when they go', async () => {
    const workdir = scratch(['out/s: s'], 'rp-load-');
    writeFileSync(join(workdir, 'out', 'eight.bin'), Buffer.alloc(8 << 20, 5));
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/', 16 << 20));
    const s = await startServe(['--workdir', workdir, '--trace', join(scratch([], 'rp-load-trace-'), 'peak.jsonl'), '--memory-budget', '32Mi']);
    const rssMiB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${s.child.pid}/status`, 'utf8'))![1]) / 1024;
    try {
      await rawGet(s.ready.url, '/resources/files/s');
      const baseline = rssMiB();
      // The second round is the one that used to overshoot: buffers of the first, let go but not
      // yet collected, were not counted (round 2 peaked 17 MiB above round 1 here).
      const peaks: number[] = [];
      for (const round of [1, 2]) {
        const holders = await Promise.all(Array.from({ length: 64 }, () => trickle(s.ready.url, 'GET /resources/files/eight.bin HTTP/1.1\r\nhost: x\r\n\r\n')));
        for (const h of holders) h.pause();
        let peak = baseline;
        // Sample until every request was answered (held, or refused after the budget's 2 s wait).
        for (let i = 0; i < 40; i++) {
          await new Promise((r) => setTimeout(r, 100));
          peak = Math.max(peak, rssMiB());
        }
        console.log(`[hostile-load] round ${round}: RSS ${Math.round(baseline)} → peak ${Math.round(peak)} MiB (budget 32 MiB)`);
        peaks.push(peak);
        // Budget 32 MiB, plus at most one 8 MiB buffer per pool thread, plus slack for the runtime.
        expect(peak - baseline, `round ${round}`).toBeLessThan(32 + 4 * 8 + 48);
        for (const h of holders) h.destroy();
        // Under the ASan build the sanitizer's quarantine keeps some freed chunks resident by design:
        // what must come back allows for it there (the peak above holds the same bound under both).
        const returned = process.env.RESOURCE_PLANE_ASAN ? 48 + 64 : 48;
        let after = rssMiB();
        for (let i = 0; i < 50 && after - baseline > returned; i++) {
          await new Promise((r) => setTimeout(r, 100));
          after = rssMiB();
        }
        expect(after - baseline, `round ${round}`).toBeLessThan(returned);
      }
      // An identical round peaks where the first did: the budget bounds resident memory every time.
      // (Not under the ASan build: its quarantine keeps the first round's freed chunks resident.)
      if (!process.env.RESOURCE_PLANE_ASAN) expect(peaks[1]! - peaks[0]!, 'round 2 above round 1').toBeLessThan(10);
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
  });

  it('holds what fits, waits for a release, never refuses a counted small body, and lets one oversized request run alone', async () => {
    const { MemoryBudget } = await import('../../src/export/memory.js');
    const b = new MemoryBudget(10 << 20, 200);
    const big = await b.acquire(8 << 20);
    expect(b.inUse).toBe(8 << 20);
    // 2 MiB of room: a 4 MiB request waits, and gets its share once the 8 MiB go back.
    let got = false;
    const waiting = b.acquire(4 << 20).then((release) => {
      got = true;
      return release;
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(got).toBe(false);
    big();
    const four = await waiting;
    expect(b.inUse).toBe(4 << 20);
    // Past the wait: over_capacity.
    const filler = await b.acquire(6 << 20);
    await expect(b.acquire(1 << 20)).rejects.toMatchObject({ code: 'over_capacity' });
    // A small synchronous body is counted, never refused.
    const small = b.count(16 << 10);
    expect(b.inUse).toBe((10 << 20) + (16 << 10));
    for (const release of [small, four, filler]) {
      release();
      release(); // idempotent
    }
    expect(b.inUse).toBe(0);
    // One request larger than the whole budget still runs when nothing else is held.
    const alone = await b.acquire(64 << 20);
    expect(b.inUse).toBe(64 << 20);
    alone();
    // An aborted wait gives up at once.
    const holder = await b.acquire(10 << 20);
    const gone = new AbortController();
    const aborted = b.acquire(1 << 20, gone.signal);
    gone.abort();
    await expect(aborted).rejects.toMatchObject({ code: 'over_capacity' });
    holder();
  });

  it('keeps idle pooled buffers within the limit, and gives their pages back when the room is needed', async () => {
    const { MemoryBudget } = await import('../../src/export/memory.js');
    const chunk = native.LIMITS.streamChunkBytes;
    const b = new MemoryBudget(4 * chunk, 200);
    const buffers = [b.buffer(), b.buffer(), b.buffer()];
    for (const buffer of buffers) buffer.fill(7);
    for (const buffer of buffers) b.recycle(buffer);
    expect(b.idleBytes).toBe(3 * chunk);
    b.recycle(buffers[0]!); // twice: never pooled twice
    expect(b.idleBytes).toBe(3 * chunk);
    // A request that needs the room of two idle buffers makes them give their pages back (they
    // read as zeros afterwards) instead of waiting or dropping them for a collection.
    const release = await b.acquire(3 * chunk);
    expect(b.idleBytes).toBe(chunk);
    const reused = [b.buffer(), b.buffer(), b.buffer()];
    // Whole pages only: the partial pages at either end keep what they had.
    const inner = (x: Buffer) => x.subarray(4096, x.length - 4096);
    expect(reused.filter((x) => inner(x).every((v) => v === 0)).length, 'two buffers gave their pages back').toBe(2);
    expect(reused.filter((x) => x.every((v) => v === 7)).length, 'the warm one kept its bytes').toBe(1);
    expect(new Set([...reused, ...buffers]).size, 'the same three buffers, reused').toBe(3);
    release();
    b.clear();
  });
});
