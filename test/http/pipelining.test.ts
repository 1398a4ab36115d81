// What a connection can make the server hold, and what the trace says about bodies that never left:
// pipelined requests are answered one at a time per connection (so a client that pipelines and never
// reads pins one body, not thousands), a connection that queues too many is cut, memory held for a
// response queued behind one whose socket died is given back, and a body cut short is recorded as
// undelivered. Plus the protocol answers admission gives before any plane (Host, Expect).
import { connect, type Socket } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_QUEUED_PER_CONNECTION } from '../../src/limits.js';
import { capsule, filesManifest, type Capsule } from '../helpers/capsule.js';
import { rawExchange, rawGet, rawRequest, readTrace } from '../helpers/http.js';

const MiB = 1 << 20;

async function up(files: Record<string, number>, opts: { memoryBudgetBytes?: number } = {}): Promise<Capsule> {
  const c = await capsule({ tree: ['out/'], yaml: filesManifest('out/', 64 * MiB), containment: 'sealed', ...opts });
  for (const [name, size] of Object.entries(files)) writeFileSync(join(c.workdir, 'out', name), Buffer.alloc(size, name.charCodeAt(0)));
  return c;
}

function open(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(port), hostname, () => resolve(s));
    s.on('error', () => undefined);
    s.once('error', reject);
  });
}

function closed(s: Socket): Promise<void> {
  return s.destroyed ? Promise.resolve() : new Promise((resolve) => s.once('close', () => resolve()));
}

/** Polls `probe` until it holds, for at most `ms` (a wait, not a timed assertion). */
async function until(probe: () => boolean, ms = 20_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 25));
  }
  return true;
}

const get = (path: string, extra = '') => `GET /resources/files/${path} HTTP/1.1\r\nHost: x\r\n${extra}\r\n`;

describe('pipelining is bounded per connection', () => {
  it('clients that pipeline 64 KiB of reads of a 60 KiB file and never read pin one body each, not a thousand', async () => {
    const c = await up({ 'f.bin': 60 * 1024 }, { memoryBudgetBytes: 64 * MiB });
    const burst = Buffer.from(get('f.bin').repeat(Math.floor((64 * 1024) / get('f.bin').length)));
    const sockets = await Promise.all(Array.from({ length: 8 }, () => open(c.url)));
    for (const s of sockets) {
      s.pause(); // never reads a byte of the answers
      s.write(burst);
    }
    // Time for a server without the bound to read and queue hundreds of bodies per connection (the
    // old one traced ~1,000 reads each within it); this one answers the first request of each and
    // holds the rest until that answer is read, or cuts a connection that queued past the bound.
    await until(() => sockets.every((s) => s.destroyed), 1_500);
    for (const s of sockets) s.destroy();
    await Promise.all(sockets.map(closed));
    const served = readTrace(c.tracePath).filter((e) => e.event_type === 'resource_read' && e.outcome === 'ok').length;
    // One body at a time per connection: never the ~1,000 each client asked for.
    expect(served).toBeLessThanOrEqual(8);
    // And the server goes on answering.
    expect((await rawGet(c.url, '/resources/files/f.bin')).status).toBe(200);
  });

  it(`answers up to ${MAX_QUEUED_PER_CONNECTION} pipelined requests, in order, each whole`, async () => {
    const c = await up({ 'a.bin': 20_000, 'b.bin': 3 });
    const reqs = Array.from({ length: MAX_QUEUED_PER_CONNECTION }, (_, i) =>
      get(i % 2 ? 'b.bin' : 'a.bin', i === MAX_QUEUED_PER_CONNECTION - 1 ? 'Connection: close\r\n' : ''),
    ).join('');
    const responses = await rawExchange(c.url, reqs);
    expect(responses.length).toBe(MAX_QUEUED_PER_CONNECTION);
    responses.forEach((r, i) => expect([r.status, r.body.length], `#${i}`).toEqual([200, i % 2 ? 3 : 20_000]));
  });

  it('gives back the budget of a response queued behind one whose socket was reset', async () => {
    const c = await up({ 'big.bin': 12 * MiB, 'mid.bin': 3 * MiB }, { memoryBudgetBytes: 40 * MiB });
    for (let round = 0; round < 14; round++) {
      await until(() => c.session.memory.inUse === 0);
      const s = await open(c.url);
      s.pause();
      s.write(get('big.bin') + get('mid.bin'));
      // Reset once the big read holds its share (the mid one is parsed and waits behind it).
      expect(await until(() => c.session.memory.inUse > 0), `round ${round}: the big read never held memory`).toBe(true);
      s.resetAndDestroy();
      await closed(s);
    }
    expect(await until(() => c.session.memory.inUse === 0)).toBe(true);
    const after = await rawGet(c.url, '/resources/files/mid.bin');
    expect(after.status).toBe(200);
    expect(after.body.length).toBe(3 * MiB);
  });
});

describe('the trace tells what was not delivered', () => {
  it('a body cut by a reset gets a response_undelivered event after its ok line', async () => {
    const c = await up({ 'big.bin': 16 * MiB });
    const s = await open(c.url);
    s.pause();
    s.write(get('big.bin'));
    expect(await until(() => readTrace(c.tracePath).some((e) => e.event_type === 'resource_read' && e.outcome === 'ok'))).toBe(true);
    s.resetAndDestroy();
    expect(await until(() => readTrace(c.tracePath).some((e) => e.event_type === 'response_undelivered'))).toBe(true);
    const trace = readTrace(c.tracePath);
    const ok = trace.findIndex((e) => e.event_type === 'resource_read' && e.outcome === 'ok');
    const undelivered = trace.findIndex((e) => e.event_type === 'response_undelivered');
    expect(undelivered).toBeGreaterThan(ok);
    expect(trace[undelivered]).toMatchObject({ of: 'resource_read', path: 'big.bin', bytes: 16 * MiB, outcome: 'undelivered' });
  });

  it('a request pipelined behind a reset, or behind Connection: close, is never traced as sent', async () => {
    const c = await up({ 'big.bin': 16 * MiB, 'small.txt': 5, 'after.txt': 6 });
    const s = await open(c.url);
    s.pause();
    s.write(get('big.bin') + get('small.txt'));
    expect(await until(() => readTrace(c.tracePath).some((e) => e.outcome === 'ok'))).toBe(true);
    s.resetAndDestroy();
    await closed(s);
    // `after.txt` follows a request that closes the connection: it is never answered.
    const answers = await rawExchange(c.url, get('small.txt', 'Connection: close\r\n') + get('after.txt'));
    expect(answers.map((r) => r.status)).toEqual([200]);
    await until(() => readTrace(c.tracePath).some((e) => e.event_type === 'response_undelivered'));
    const trace = readTrace(c.tracePath);
    const sent = (path: string) => trace.filter((e) => e.event_type === 'resource_read' && e.path === path && e.outcome === 'ok').length;
    const undelivered = (path: string) => trace.filter((e) => e.event_type === 'response_undelivered' && e.path === path).length;
    // small.txt was answered once (on the second connection); on the first it was never sent.
    expect(sent('small.txt') - undelivered('small.txt')).toBe(1);
    expect(sent('after.txt') - undelivered('after.txt')).toBe(0);
  });
});

describe('admission answers in the spec shape before any plane', () => {
  it('an HTTP/1.1 request without Host is a 400 bad_request with the class header', async () => {
    const c = await up({ 'a.txt': 1 });
    const res = await rawRequest(c.url, { target: '/resources/files/a.txt', host: null });
    expect(res.status).toBe(400);
    expect(res.json()).toEqual({ error: 'bad_request', message: 'the request could not be parsed' });
    expect(res.header('x-murmur-containment')).toBe('sealed');
    expect(readTrace(c.tracePath).some((e) => e.event_type === 'resource_read')).toBe(false);
  });

  it('an Expect other than 100-continue is a 417 bad_request; 100-continue is served', async () => {
    const c = await up({ 'a.txt': 1 });
    const odd = await rawGet(c.url, '/resources/files/a.txt', [['Expect', 'teapot']]);
    expect(odd.status).toBe(417);
    expect(odd.json().error).toBe('bad_request');
    expect(odd.header('x-murmur-containment')).toBe('sealed');
    const ok = await rawGet(c.url, '/resources/files/a.txt', [['Expect', '100-continue']]);
    expect(ok.raw.toString('latin1')).toContain('200 OK');
  });

  it('a target that is not a path is a 400 bad_request; one outside the planes the router cannot decode too', async () => {
    const c = await up({ 'a.txt': 1 });
    for (const target of ['x', 'mailto:a@b', '/%ZZ', '/other/%C0%AE']) {
      const res = await rawGet(c.url, target);
      expect(res.status, target).toBe(400);
      expect(res.json().error, target).toBe('bad_request');
      expect(res.header('x-murmur-containment'), target).toBe('sealed');
    }
  });

  it('every one of those is refused 503 while stopping, a parser error included', async () => {
    const c = await up({ 'big.bin': 16 * MiB });
    const holder = await open(c.url);
    holder.pause();
    holder.write(get('big.bin'));
    await until(() => readTrace(c.tracePath).some((e) => e.outcome === 'ok'));
    const stopping = c.stop();
    await new Promise((r) => setTimeout(r, 50));
    const cases: Array<[string, Promise<{ status: number; json(): any }>]> = [
      ['no host', rawRequest(c.url, { target: '/resources/files/a.txt', host: null })],
      ['expect', rawGet(c.url, '/resources/files/a.txt', [['Expect', 'teapot']])],
      ['not a path', rawGet(c.url, 'x')],
      ['parser error', rawRequest(c.url, { target: '/resources/files/a b c' })],
      ['healthz', rawGet(c.url, '/healthz')],
    ];
    for (const [what, pending] of cases) {
      const res = await pending;
      expect(res.status, what).toBe(503);
      expect(res.json().error, what).toBe('shutting_down');
    }
    holder.destroy();
    await stopping;
  });
});
