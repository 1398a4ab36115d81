// Large reads reuse the buffers of closed responses (src/export/buffer-pool.ts): the bytes served are
// always exactly the file's, whatever an earlier file left in the buffer (a file that shrank after
// the first look is read into a buffer holding more); a buffer goes back only once its response
// closed, and serves the next read of the same length exactly, cut connections and pipelined
// requests included; what a response holds is counted in full against the budget, idle buffers
// too, so the budget bounds them all; the pool empties when idle; and the addon never reads past
// the buffer it is given.
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { connect } from 'node:net';
import { appendFileSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { BufferPool, POOL_IDLE_MS } from '../src/export/buffer-pool.js';
import { ByteBudget } from '../src/export/budget.js';
import { ExportView } from '../src/export/export-view.js';
import * as native from '../src/native.js';
import { capsule } from './helpers/capsule.js';
import { defer } from './helpers/cleanup.js';
import { requireSeen } from './helpers/race.js';
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
  it('hands a buffer back out only after it was given back, only for a read of exactly its length, and only once', () => {
    const pool = new BufferPool(16 * MiB);
    const a = pool.take(MiB)!;
    expect(a.length).toBe(MiB);
    expect(pool.take(MiB) === a).toBe(false); // still the caller's
    expect(pool.give(a)).toBe(true);
    expect(pool.give(a), 'given back twice').toBe(false);
    expect(pool.idleBytes).toBe(MiB);
    expect(pool.take(MiB + 1) === a).toBe(false);
    expect(pool.take(MiB - 1) === a).toBe(false);
    expect(pool.take(MiB) === a).toBe(true);
    expect(pool.idleBytes).toBe(0);
  });

  it('keeps at most its limit idle, and never pools a buffer longer than it', () => {
    const pool = new BufferPool(4 * MiB);
    expect(pool.take(4 * MiB + 1)).toBeNull();
    expect(pool.take(0)).toBeNull();
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
    const a = await view.read('a', budget, true);
    a.release();
    expect(budget.buffers.idleBytes).toBeGreaterThan(4 * MiB);
    // 6 MiB in flight + 4 MiB idle would pass the 8 MiB limit: the idle buffer goes first.
    const b = await view.read('b', budget, true);
    expect(b.bytes.length).toBe(6 * MiB);
    expect(budget.buffers.idleBytes).toBe(0);
    expect(budget.inUse).toBeLessThanOrEqual(8 * MiB);
    b.release();
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

  it('never reads past it while the file grows (OVER_BUDGET, the caller looks again)', async (ctx) => {
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
    requireSeen(ctx, 'a read that met the file growing past the budget (OVER_BUDGET)', over);
  });
});

describe('a reused buffer serves exactly the file read into it', () => {
  // take() runs after the first look (its fstat gave the size) and before the read: the capsule
  // acts there, as a racing writer could.
  function hookTake(budget: ByteBudget, act: () => void): void {
    const take = budget.buffers.take.bind(budget.buffers);
    budget.buffers.take = (n: number) => {
      act();
      return take(n);
    };
  }

  it('a file that shrank after the first look is served without the bytes the previous file left beyond it', async () => {
    const dir = scratch(['out/a: a', 'out/b: b']);
    const a = randomBytes(2 * MiB);
    const b = randomBytes(2 * MiB);
    writeFileSync(join(dir, 'out', 'a'), a);
    writeFileSync(join(dir, 'out', 'b'), b);
    const view = await viewOf(dir);
    const budget = new ByteBudget(64 * MiB, 1_000);
    const first = await view.read('a', budget, true);
    expect(first.bytes.equals(a)).toBe(true);
    const buffer = first.bytes.buffer;
    first.release();
    hookTake(budget, () => truncateSync(join(dir, 'out', 'b'), 1000));
    const second = await view.read('b', budget, true);
    // (Identity as a boolean: a failing toBe would print two 2 MiB buffers.)
    expect(second.bytes.buffer === buffer, 'the closed response gave its buffer back').toBe(true);
    expect(second.bytes.length).toBe(1000);
    expect(second.bytes.equals(b.subarray(0, 1000))).toBe(true);
    expect(second.sha256).toBe(sha(b.subarray(0, 1000)));
    second.release();
    expect(budget.inUse).toBe(0);
  });

  it('counts the whole buffer a shrunken file pins, so never-finished responses stay within the budget', async () => {
    const names = ['a', 'b', 'c', 'd', 'e'];
    const dir = scratch(names.map((n) => `out/${n} @ 8m`));
    const view = await viewOf(dir);
    const budget = new ByteBudget(16 * MiB, 200);
    let current = '';
    hookTake(budget, () => truncateSync(join(dir, 'out', current), 10));
    let pinned = 0;
    for (const n of names) {
      current = n;
      // Never released: a client that does not read. Past the budget, the read is refused.
      const r = await view.read(n, budget, true).catch((e: { code?: string }) => e);
      if ('bytes' in r) {
        expect(r.bytes.length).toBe(10);
        pinned += r.bytes.buffer.byteLength;
      } else {
        expect(r.code).toBe('over_capacity');
      }
    }
    expect(budget.inUse, "each pinned buffer counted (less its growth byte)").toBeGreaterThanOrEqual(pinned - names.length);
    expect(pinned + budget.buffers.idleBytes).toBeLessThanOrEqual(budget.limit + 2 * names.length);
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

  it('a response sent whole gives its buffer back, and the next read of that length is exactly its own file', async () => {
    const c = await capsule({ yaml: YAML, tree: ['out/a: a', 'out/b: b'] });
    const a = randomBytes(3 * MiB);
    const b = randomBytes(3 * MiB);
    writeFileSync(join(c.workdir, 'out', 'a'), a);
    writeFileSync(join(c.workdir, 'out', 'b'), b);
    const ra = await get(`${c.url}/resources/files/a`);
    expect(ra.body.equals(a)).toBe(true);
    expect(await closed(c, (n) => n > 0)).toBe(3 * MiB + 1);
    const rb = await get(`${c.url}/resources/files/b`);
    expect(rb.status).toBe(200);
    expect(rb.body.equals(b)).toBe(true);
    expect(await closed(c, (n) => n > 0), 'the buffer was taken, then given back').toBe(3 * MiB + 1);
  });

  it('pipelined requests for files of one length, read slowly, each get exactly their own bytes', async () => {
    const c = await capsule({ yaml: YAML, tree: ['out/a: a', 'out/b: b'] });
    const files = { a: randomBytes(4 * MiB), b: randomBytes(4 * MiB) };
    writeFileSync(join(c.workdir, 'out', 'a'), files.a);
    writeFileSync(join(c.workdir, 'out', 'b'), files.b);
    const order = ['a', 'b', 'a', 'b', 'b', 'a'] as const;
    const socket = connect(Number(new URL(c.url).port), '127.0.0.1');
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.write(order.map((f) => `GET /resources/files/${f} HTTP/1.1\r\nHost: x\r\n\r\n`).join(''));
    // Read slowly: pause between chunks so later responses wait behind earlier ones.
    const chunks: Buffer[] = [];
    let total = 0;
    const expected = order.length * 4 * MiB;
    await new Promise<void>((resolve, reject) => {
      socket.on('data', (d: Buffer) => {
        chunks.push(d);
        total += d.length;
        socket.pause();
        setTimeout(() => socket.resume(), 1);
        if (total >= expected + order.length * 200) resolve();
      });
      socket.on('error', reject);
      setTimeout(() => resolve(), 60_000);
    });
    socket.destroy();
    const stream = Buffer.concat(chunks);
    let at = 0;
    for (const f of order) {
      const headEnd = stream.indexOf('\r\n\r\n', at);
      const head = stream.subarray(at, headEnd).toString('latin1');
      expect(head.startsWith('HTTP/1.1 200')).toBe(true);
      const length = Number(/content-length: (\d+)/i.exec(head)![1]);
      const body = stream.subarray(headEnd + 4, headEnd + 4 + length);
      expect(body.equals(files[f]), `response for ${f}`).toBe(true);
      at = headEnd + 4 + length;
    }
  });

  it('a slow reader keeps its own bytes while fast readers of another file of that length come and go', async (ctx) => {
    const c = await capsule({ yaml: YAML, tree: ['out/a: a', 'out/b: b'] });
    const files = { a: randomBytes(8 * MiB), b: randomBytes(8 * MiB) };
    writeFileSync(join(c.workdir, 'out', 'a'), files.a);
    writeFileSync(join(c.workdir, 'out', 'b'), files.b);
    // Warm the pool with a buffer of this length, so the slow read takes a reused one.
    expect((await get(`${c.url}/resources/files/b`)).body.equals(files.b)).toBe(true);
    let started!: () => void;
    const headers = new Promise<void>((r) => (started = r));
    const slow = new Promise<Buffer>((resolve, reject) => {
      const req = request(`${c.url}/resources/files/a`, (res) => {
        started();
        const chunks: Buffer[] = [];
        res.on('data', (d: Buffer) => {
          chunks.push(d);
          res.pause();
          setTimeout(() => res.resume(), 5);
        });
        res.on('end', () => resolve(Buffer.concat(chunks)));
      });
      req.on('error', reject);
      req.end();
    });
    // Only once the slow response is being sent: its buffer (the warm one) is then the only one
    // of this length, so a buffer given back too early would be the next fast read's.
    await headers;
    let done = false;
    void slow.finally(() => (done = true));
    let fast = 0;
    let fastDuringSlow = 0;
    while (!done && fast < 40) {
      const r = await get(`${c.url}/resources/files/b`);
      expect(r.body.equals(files.b), `fast read ${fast}`).toBe(true);
      fast++;
      if (!done) fastDuringSlow++;
    }
    expect((await slow).equals(files.a), 'the slow reader got exactly a').toBe(true);
    requireSeen(ctx, 'a fast read that came and went while the slow response was still being sent', fastDuringSlow);
  });

  it('a connection cut mid-body leaves every later body of that length exact', async (ctx) => {
    const c = await capsule({ yaml: YAML, tree: ['out/a: a', 'out/b: b'] });
    const files = { a: randomBytes(16 * MiB), b: randomBytes(16 * MiB) };
    writeFileSync(join(c.workdir, 'out', 'a'), files.a);
    writeFileSync(join(c.workdir, 'out', 'b'), files.b);
    let cutMidBody = 0;
    for (let round = 0; round < 4; round++) {
      // A client that never reads holds its response mid-body, then goes (reset or FIN).
      const socket = connect(Number(new URL(c.url).port), '127.0.0.1');
      socket.pause();
      await new Promise<void>((r) => socket.once('connect', () => r()));
      socket.write('GET /resources/files/a HTTP/1.1\r\nHost: x\r\n\r\n');
      for (let i = 0; i < 500 && c.session.memory.inUse === 0; i++) await new Promise((r) => setTimeout(r, 10));
      await new Promise((r) => setTimeout(r, 200)); // the body is being written
      const other = get(`${c.url}/resources/files/b`);
      // The non-reading client's response still holds its buffer: the cut lands mid-body.
      if (c.session.memory.inUse > 0) cutMidBody++;
      if (round % 2) socket.resetAndDestroy();
      else socket.destroy();
      const rb = await other;
      expect(rb.body.equals(files.b), `round ${round}: b`).toBe(true);
      const ra = await get(`${c.url}/resources/files/a`);
      expect(ra.body.equals(files.a), `round ${round}: a`).toBe(true);
    }
    for (let i = 0; i < 200 && c.session.memory.inUse > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(c.session.memory.inUse).toBe(0);
    requireSeen(ctx, 'a connection cut while its response was still mid-body', cutMidBody);
  });
});
