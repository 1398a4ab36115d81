// Large reads reuse the buffers of finished responses (src/buffer-pool.ts): the bytes served are
// always exactly the file's, whatever an earlier, longer file left in the buffer; a buffer comes
// back only from a response handed whole to the kernel, never from one that was cut (a write may
// still be queued on it); the pool is bounded and empties when idle; and the addon never reads
// past the buffer it is given.
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { connect } from 'node:net';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { BufferPool, POOL_IDLE_MS } from '../src/buffer-pool.js';
import { ByteBudget } from '../src/budget.js';
import { ExportView } from '../src/export-view.js';
import * as native from '../src/native.js';
import { capsule } from './helpers/capsule.js';
import { defer } from './helpers/cleanup.js';
import { scratch } from './helpers/tree.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const RESOLVER = native.chooseResolver();
const MiB = 1024 * 1024;

async function viewOf(dir: string, maxBytes = 64 * MiB): Promise<ExportView> {
  const fd = await native.openDirectory(dir);
  defer(() => native.closeFd(fd));
  return new ExportView({ workdirFd: () => fd, root: 'out', maxBytes, containment: 'sealed', resolver: RESOLVER });
}

describe('BufferPool', () => {
  it('hands a buffer back out only after it was given back, and only for a read of its size in pages', () => {
    const pool = new BufferPool(16 * MiB);
    const a = pool.take(MiB)!;
    expect(a.length).toBeGreaterThanOrEqual(MiB);
    expect(pool.take(MiB) === a).toBe(false); // still the caller's
    expect(pool.give(a)).toBe(true);
    expect(pool.idleBytes).toBe(a.length);
    expect(pool.take(3 * MiB) === a).toBe(false); // too short
    expect(pool.take(MiB / 4) === a).toBe(false); // longer than asked for
    expect(pool.take(MiB + 1) === a).toBe(false); // one more page
    expect(pool.take(MiB - 5) === a).toBe(true);
    expect(pool.idleBytes).toBe(0);
  });

  it('keeps at most its limit idle, and never pools a buffer longer than it', () => {
    const pool = new BufferPool(4 * MiB);
    expect(pool.take(4 * MiB + 1)).toBeNull();
    const bufs = [pool.take(2 * MiB)!, pool.take(2 * MiB)!, pool.take(2 * MiB)!];
    expect(bufs.map((b) => pool.give(b))).toEqual([true, true, false]);
    expect(pool.idleBytes).toBe(4 * MiB);
  });

  it('drops every idle buffer once none was taken for a while', () => {
    vi.useFakeTimers();
    defer(() => vi.useRealTimers());
    const pool = new BufferPool(16 * MiB);
    pool.give(pool.take(MiB)!);
    vi.advanceTimersByTime(POOL_IDLE_MS - 100);
    pool.give(pool.take(MiB)!); // in use again: the clock restarts
    vi.advanceTimersByTime(POOL_IDLE_MS - 100);
    expect(pool.idleBytes).toBeGreaterThan(0);
    vi.advanceTimersByTime(200);
    expect(pool.idleBytes).toBe(0);
  });
});

describe('the memory budget counts idle buffers', () => {
  it('evicts them for a read that needs their room, so held and idle stay within the limit', async () => {
    const dir = scratch(['out/a @ 4m', 'out/b @ 6m']);
    const view = await viewOf(dir);
    const budget = new ByteBudget(8 * MiB, 200);
    const a = await view.read('a', budget);
    a.release(true);
    expect(budget.buffers.idleBytes).toBeGreaterThan(4 * MiB);
    // 6 MiB in flight + 4 MiB idle would pass the 8 MiB limit: the idle buffer goes first.
    const b = await view.read('b', budget);
    expect(b.bytes.length).toBe(6 * MiB);
    expect(budget.buffers.idleBytes).toBe(0);
    expect(budget.inUse).toBeLessThanOrEqual(8 * MiB);
    b.release(true);
    expect(budget.inUse + budget.buffers.idleBytes).toBeLessThanOrEqual(8 * MiB);
  });

  it('keeps a buffer idle only if the limit has room for it beside what is held', () => {
    const budget = new ByteBudget(8 * MiB, 200);
    const held = budget.reserve(5 * MiB);
    held.settle(5 * MiB);
    expect(budget.recycle(Buffer.allocUnsafeSlow(4 * MiB))).toBe(false);
    expect(budget.recycle(Buffer.allocUnsafeSlow(2 * MiB))).toBe(true);
    expect(budget.buffers.idleBytes).toBe(2 * MiB);
  });
});

describe('the addon reads into a given buffer', () => {
  const o = { refuseSymlinks: false, resolver: RESOLVER };

  it('fills it and answers a view of exactly the file, hashed', async () => {
    const dir = scratch(['out/f @ 1m']);
    const fd = await native.openDirectory(dir);
    defer(() => native.closeFd(fd));
    const into = Buffer.alloc(2 * MiB, 0xee);
    const r = await native.readFile(fd, 'out', 'f', 64 * MiB, { ...o, budgetBytes: 2 * MiB - 1, into });
    expect(r.bytes.buffer === into.buffer, 'a view of the buffer given').toBe(true);
    expect(r.bytes.length).toBe(MiB);
    expect(r.sha256).toBe(sha(r.bytes));
  });

  it('refuses a buffer not longer than the most the read may take, or that is not a Buffer', async () => {
    const dir = scratch(['out/f: x']);
    const fd = await native.openDirectory(dir);
    defer(() => native.closeFd(fd));
    expect(() => native.readFile(fd, 'out', 'f', 64 * MiB, { ...o, budgetBytes: MiB, into: Buffer.alloc(MiB) })).toThrow(RangeError);
    expect(() => native.readFile(fd, 'out', 'f', MiB, { ...o, into: Buffer.alloc(MiB) })).toThrow(RangeError);
    expect(() => native.readFile(fd, 'out', 'f', MiB, { ...o, into: new Uint16Array(MiB) as unknown as Buffer })).toThrow(TypeError);
    const r = await native.readFile(fd, 'out', 'f', MiB, { ...o, into: Buffer.alloc(MiB + 1) });
    expect(r.bytes.toString()).toBe('x');
  });

  it('never reads past it while the file grows (OVER_BUDGET, the caller looks again)', async () => {
    const dir = scratch(['out/grow @ 900k']);
    const fd = await native.openDirectory(dir);
    defer(() => native.closeFd(fd));
    const file = join(dir, 'out', 'grow');
    let over = 0;
    // Count-based: until some reads met the file past the budget, or a cap of reads.
    for (let i = 0; i < 400 && over < 3; i++) {
      writeFileSync(file, Buffer.alloc(900 * 1024, 1));
      const into = Buffer.alloc(MiB + 1);
      const read = native.readFile(fd, 'out', 'grow', 64 * MiB, { ...o, budgetBytes: MiB, into });
      for (let k = 0; k < 8; k++) appendFileSync(file, Buffer.alloc(64 * 1024, 2));
      try {
        const r = await read;
        expect(r.bytes.length).toBeLessThanOrEqual(MiB);
        expect(r.sha256).toBe(sha(r.bytes));
      } catch (error) {
        expect((error as native.NativeError).code).toBe('OVER_BUDGET');
        over++;
      }
    }
    if (over === 0) console.warn('[buffer-pool] the file never grew past the budget during a read on this run');
  });
});

describe('a reused buffer serves exactly the next file', () => {
  it('a shorter file read into the buffer of a longer one is served without its tail', async () => {
    // Sizes within one page of each other share a buffer; b is 2,900 bytes shorter than a.
    const dir = scratch(['out/a: a', 'out/b: b']);
    const a = randomBytes(2 * MiB - 100);
    const b = randomBytes(2 * MiB - 3000);
    writeFileSync(join(dir, 'out', 'a'), a);
    writeFileSync(join(dir, 'out', 'b'), b);
    const view = await viewOf(dir);
    const budget = new ByteBudget(64 * MiB, 1_000);
    const first = await view.read('a', budget);
    expect(first.bytes.equals(a)).toBe(true);
    const buffer = first.bytes.buffer;
    first.release(true);
    const second = await view.read('b', budget);
    // (Identity as a boolean: a failing toBe would print two 2 MiB buffers.)
    expect(second.bytes.buffer === buffer, 'the finished response gave its buffer back').toBe(true);
    expect(second.bytes.length).toBe(b.length);
    expect(second.bytes.equals(b)).toBe(true);
    expect(second.sha256).toBe(sha(b));
    second.release(true);
    expect(budget.inUse).toBe(0);
  });

  it('a response that did not finish keeps its buffer out of the pool', async () => {
    const dir = scratch(['out/a @ 2m']);
    const view = await viewOf(dir);
    const budget = new ByteBudget(64 * MiB, 1_000);
    const first = await view.read('a', budget);
    const buffer = first.bytes.buffer;
    first.release(false);
    expect(budget.buffers.idleBytes).toBe(0);
    const second = await view.read('a', budget);
    expect(second.bytes.buffer === buffer, 'a new buffer').toBe(false);
    second.release(true);
  });
});

describe('over HTTP', () => {
  const YAML = 'name: a\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 64Mi\n';

  function get(url: string): Promise<{ status: number; body: Buffer }> {
    return new Promise((resolve, reject) => {
      const req = request(url, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks) }));
      });
      req.on('error', reject);
      req.end();
    });
  }

  async function closed(c: Awaited<ReturnType<typeof capsule>>, idle: (n: number) => boolean): Promise<number> {
    // The release runs on the response's 'close'; give the loop a few turns to get there.
    for (let i = 0; i < 200; i++) {
      const n = c.session.memory.buffers.idleBytes;
      if (idle(n)) return n;
      await new Promise((r) => setTimeout(r, 10));
    }
    return c.session.memory.buffers.idleBytes;
  }

  it('a response sent whole gives its buffer back, and the next body is exactly its file', async () => {
    const c = await capsule({ yaml: YAML, tree: ['out/a: a', 'out/b: b'] });
    const a = randomBytes(3 * MiB - 10);
    const b = randomBytes(3 * MiB - 4000); // the same buffer, with 3,990 bytes of a's beyond it
    writeFileSync(join(c.workdir, 'out', 'a'), a);
    writeFileSync(join(c.workdir, 'out', 'b'), b);
    const ra = await get(`${c.url}/resources/files/a`);
    expect(ra.body.equals(a)).toBe(true);
    expect(await closed(c, (n) => n > 0)).toBe(3 * MiB);
    const rb = await get(`${c.url}/resources/files/b`);
    expect(rb.status).toBe(200);
    expect(await closed(c, (n) => n > 0), 'the buffer was taken, then given back').toBe(3 * MiB);
    expect(rb.body.length).toBe(b.length);
    expect(rb.body.equals(b)).toBe(true);
  });

  it('a response cut mid-body does not give its buffer back', async () => {
    const c = await capsule({ yaml: YAML, tree: ['out/big @ 16m'] });
    // A client that never reads: its receive window and the server's send buffer hold a few MiB,
    // so most of the 16 MiB body is still queued in the server when the client goes.
    const socket = connect(Number(new URL(c.url).port), '127.0.0.1');
    socket.pause();
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.write('GET /resources/files/big HTTP/1.1\r\nHost: x\r\n\r\n');
    const poll = async (done: () => boolean) => {
      for (let i = 0; i < 500 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
    };
    await poll(() => c.session.memory.inUse > 0);
    expect(c.session.memory.inUse, 'the read is held by its unfinished response').toBeGreaterThan(0);
    socket.resetAndDestroy();
    await poll(() => c.session.memory.inUse === 0);
    expect(c.session.memory.inUse).toBe(0);
    expect(c.session.memory.buffers.idleBytes).toBe(0);
  });
});
