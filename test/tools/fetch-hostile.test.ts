// fetch-peer-file and share-file against peers that lie, stall or flood, written here with
// node:http and node:net: an etag that does not name the body, a peer that never answers, bodies
// past the cap (chunked, honest and lying content-lengths), refusal bodies that are not what they
// should be, redirects, agent cards missing what an audience needs, an https peer, and a `peer-in`
// planted as a symlink. After every refusal: nothing landed, no `.tmp-*` left, nothing written
// outside `peer-in/`, no descriptor leaked and no token in a message or the trace.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type Socket } from 'node:net';
import { join, relative } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Refusal } from '../../src/codes.js';
import { fetchPeerFile } from '../../src/tools/fetch-peer-file.js';
import { handleId } from '../../src/redact.js';
import { shareFile } from '../../src/tools/share-file.js';
import { capsule, offlineCapsule, type CapsuleSession } from '../helpers/capsule.js';
import { listenLoopback, type Loopback } from '../helpers/loopback.js';
import { refusal } from '../helpers/refusal.js';
import { fdCount, removeTree, scratch } from '../helpers/tree.js';
import { etagFor, sha256Hex } from '../helpers/http.js';

// ── Fixtures ─────────────────────────────────────────────────────────────────

type Local = CapsuleSession;

const GAMMA = `name: gamma
version: 0.1.0
exports:
  peer_files:
    root: out/
capabilities:
  peer_fetch:
    allow: ["127.0.0.1"]
  network:
    allow: ["127.0.0.1"]
`;

/** A capsule under test (not served unless `listen`; it advertises localhost:4242): fetches from 127.0.0.1, shares `out/`. */
function local(opts: { listen?: boolean; tree?: string[] } = {}): Promise<Local> {
  return opts.listen ? capsule({ yaml: GAMMA, tree: opts.tree }) : offlineCapsule({ yaml: GAMMA, tree: opts.tree, advertise: 'http://localhost:4242' });
}

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
}

/** Its `connections()` and `closed()` count the redeems: a card fetch's connection is left out. */
interface Hostile extends Loopback {
  requests: Seen[];
}

/** The issuer every handle here names; the peers' cards name it too, so the token is sent. */
const ISSUER = 'ses_peer';
const cardSockets = new WeakSet<Socket>();
/** Peers answer the card request themselves, except where a test is about the card (share-file). */
let autoCard = true;

/** A card naming ISSUER: fetch-peer-file reads it before it sends a token (the token goes only to its issuer). */
function cardFor(port: number): Buffer {
  return Buffer.from(
    JSON.stringify({
      name: 'peer',
      supportedInterfaces: [{ url: `http://127.0.0.1:${port}`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }],
      capabilities: { extensions: [{ uri: 'urn:murmur:capsule:v1', params: { planes: ['peer_files'], sessionId: ISSUER } }] },
    }),
  );
}

/** Connections counted and awaited by the tests are the redeems: a card fetch's connection is left out. */
const REDEEMS_ONLY = { ignored: (socket: Socket) => cardSockets.has(socket) };

/** A peer written with node:http: `handler` answers however the test wants it to lie. */
async function httpPeer(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<Hostile> {
  const requests: Seen[] = [];
  const server = createHttpServer((req, res) => {
    if (autoCard && req.url === '/.well-known/agent-card.json') {
      cardSockets.add(req.socket);
      const card = cardFor((server.address() as { port: number }).port);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': card.length, connection: 'close' });
      res.end(card);
      return;
    }
    requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    handler(req, res);
  });
  return { ...(await listenLoopback(server, REDEEMS_ONLY)), requests };
}

/** A peer written with node:net: `onConnection` gets the raw socket once the request arrived. */
async function rawPeer(onRequest: (socket: Socket) => void): Promise<Hostile> {
  const requests: Seen[] = [];
  const server = createNetServer((socket) => {
    let buffered = '';
    socket.on('data', (chunk) => {
      if (buffered.includes('\r\n\r\n')) return;
      buffered += chunk.toString('latin1');
      if (buffered.includes('\r\n\r\n')) {
        const [method = '', url = ''] = buffered.split('\r\n')[0]!.split(' ');
        if (autoCard && url === '/.well-known/agent-card.json') {
          cardSockets.add(socket);
          const card = cardFor((server.address() as { port: number }).port);
          socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${card.length}\r\nconnection: close\r\n\r\n${card.toString()}`);
          return;
        }
        requests.push({ method, url, headers: {} });
        onRequest(socket);
      }
    });
    socket.on('error', () => undefined);
  });
  return { ...(await listenLoopback(server, REDEEMS_ONLY)), requests };
}

/** A well-shaped token this process never minted (its MAC is noise): what a peer would verify. */
function handleFor(p: string | null = 'report.md'): string {
  const payload = p === null ? Buffer.from('not json') : Buffer.from(JSON.stringify({ v: 1, iss: ISSUER, p, exp: Date.now() + 60_000, n: '0'.repeat(32) }));
  return `mh1.${payload.toString('base64url')}.${randomBytes(32).toString('base64url')}`;
}

/** Serves `body` with a correct etag, the way an honest redeem does. */
function honest(body: Buffer | string, extra: Record<string, string> = {}) {
  return (_req: IncomingMessage, res: ServerResponse) => {
    const bytes = Buffer.from(body);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': bytes.length, etag: etagFor(bytes), ...extra });
    res.end(bytes);
  };
}

function snapshot(dir: string): string[] {
  const out: string[] = [];
  const walk = (abs: string) => {
    for (const name of readdirSync(abs)) {
      const path = join(abs, name);
      const stat = lstatSync(path);
      out.push(relative(dir, path) + (stat.isDirectory() ? '/' : stat.isSymbolicLink() ? '@' : ''));
      if (stat.isDirectory()) walk(path);
    }
  };
  walk(dir);
  return out.sort();
}

function fetchEvents(l: Local): Array<Record<string, unknown>> {
  return readFileSync(l.tracePath, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((e) => e.event_type === 'peer_file_fetch');
}

/** After a refusal: nothing landed, no temporary file, the refusal traced, no token anywhere. */
function assertNothingLanded(l: Local, error: Refusal, handle: string): void {
  const tree = snapshot(l.workdir);
  expect(tree.filter((p) => p !== 'peer-in/')).toEqual([]);
  expect(tree.some((p) => p.includes('.tmp-'))).toBe(false);
  const last = fetchEvents(l).at(-1)!;
  expect(last).toMatchObject({ handle_id: handleId(handle), stored_path: null, bytes: null, sha256: null, outcome: error.code, reason: error.message });
  expect(error.message).not.toContain('mh1.');
  expect(readFileSync(l.tracePath, 'utf8')).not.toContain('mh1.');
}

// ── Etags ────────────────────────────────────────────────────────────────────

describe('a peer lying in its etag', () => {
  it('is refused with etag_mismatch after the body is hashed, and nothing is stored', async () => {
    const gamma = await local();
    const peer = await httpPeer((_req, res) => {
      res.writeHead(200, { etag: etagFor('other bytes'), 'content-length': 11 });
      res.end('hello world');
    });
    const handle = handleFor();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
    expect(error.code).toBe('etag_mismatch');
    assertNothingLanded(gamma, error, handle);
    // The one request the peer saw was the redeem, asserting gamma's own audience.
    expect(peer.requests).toHaveLength(1);
    expect(peer.requests[0]).toMatchObject({ method: 'GET', url: `/resources/peer/${handle}` });
    expect(peer.requests[0]!.headers['x-murmur-audience']).toBe('gamma@localhost:4242');
  });

  it.each([
    ['absent', null],
    ['unquoted', `sha256:${sha256Hex('hello')}`],
    ['uppercase hex', `"sha256:${sha256Hex('hello').toUpperCase()}"`],
    ['weak', `W/"sha256:${sha256Hex('hello')}"`],
    ['another algorithm', `"sha512:${sha256Hex('hello')}"`],
    ['truncated', `"sha256:${sha256Hex('hello').slice(0, 63)}"`],
    ['padded', ` "sha256:${sha256Hex('hello')}" `],
  ])('refuses an etag that is %s before reading the body', async (_label, etag) => {
    const gamma = await local();
    const peer = await httpPeer((_req, res) => {
      res.writeHead(200, { 'content-length': 5, ...(etag === null ? {} : { etag }) });
      res.end('hello');
    });
    const handle = handleFor();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
    expect(error.code).toBe('etag_mismatch');
    assertNothingLanded(gamma, error, handle);
    // Refused on the headers: the inbox was not even created.
    expect(snapshot(gamma.workdir)).toEqual([]);
  });

  it('refuses an etag repeated across two headers', async () => {
    const gamma = await local();
    const peer = await rawPeer((socket) => {
      socket.end(`HTTP/1.1 200 OK\r\ncontent-length: 5\r\netag: ${etagFor('hello')}\r\netag: ${etagFor('hello')}\r\nconnection: close\r\n\r\nhello`);
    });
    const handle = handleFor();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
    expect(error.code).toBe('etag_mismatch');
    assertNothingLanded(gamma, error, handle);
  });
});

// ── Stalls ───────────────────────────────────────────────────────────────────

describe('a peer that never answers', () => {
  it('is peer_unreachable once the total timeout passes', async () => {
    const gamma = await local();
    const peer = await rawPeer(() => undefined);
    const handle = handleFor();
    const started = Date.now();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }, { totalTimeoutMs: 300 }));
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(error.code).toBe('peer_unreachable');
    expect(error.message).toMatch(/300 ms/);
    expect(peer.requests).toHaveLength(1);
    assertNothingLanded(gamma, error, handle);
    await peer.closed();
  });

  it('is peer_unreachable once the connect timeout passes (an https peer that never shakes hands)', async () => {
    const gamma = await local();
    // TCP is accepted, TLS never starts: the connection is never established, whatever the total.
    const t = await listenLoopback(createNetServer(() => undefined));
    const port = t.port;
    const handle = handleFor();
    const started = Date.now();
    const error = await refusal(() =>
      fetchPeerFile(gamma.session, { peer: `https://127.0.0.1:${port}`, handle }, { connectTimeoutMs: 200, totalTimeoutMs: 20_000 }),
    );
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(error.code).toBe('peer_unreachable');
    expect(error.message).toMatch(/not established within 200 ms/);
    expect(t.connections()).toBe(1);
    assertNothingLanded(gamma, error, handle);
  });

  it('treats bad limits as a caller error, not a refusal, and traces nothing', async () => {
    const gamma = await local();
    for (const opts of [{ maxBytes: 0 }, { maxBytes: 1.5 }, { totalTimeoutMs: -1 }, { connectTimeoutMs: Number.NaN }]) {
      await expect(fetchPeerFile(gamma.session, { peer: '127.0.0.1:1', handle: handleFor() }, opts)).rejects.toThrow(TypeError);
    }
    await expect(shareFile(gamma.session, { path: 'x', peer: '127.0.0.1:1' }, { totalTimeoutMs: 0 })).rejects.toThrow(TypeError);
    expect(fetchEvents(gamma)).toEqual([]);
  });

  it('is peer_unreachable when it stalls mid-body, and the partial temporary file is removed', async () => {
    const gamma = await local();
    const peer = await rawPeer((socket) => {
      socket.write(`HTTP/1.1 200 OK\r\ncontent-length: 1000\r\netag: ${etagFor('x'.repeat(1000))}\r\n\r\n${'x'.repeat(100)}`);
    });
    const handle = handleFor();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }, { totalTimeoutMs: 400 }));
    expect(error.code).toBe('peer_unreachable');
    assertNothingLanded(gamma, error, handle);
    expect(snapshot(gamma.workdir)).toEqual(['peer-in/']);
  });

  it('is peer_unreachable when the connection drops mid-body', async () => {
    const gamma = await local();
    const peer = await rawPeer((socket) => {
      socket.end(`HTTP/1.1 200 OK\r\ncontent-length: 1000\r\netag: ${etagFor('x'.repeat(1000))}\r\n\r\n${'x'.repeat(100)}`);
    });
    const handle = handleFor();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
    expect(error.code).toBe('peer_unreachable');
    assertNothingLanded(gamma, error, handle);
  });
});

// ── Floods ───────────────────────────────────────────────────────────────────

describe('a peer sending more than the cap', () => {
  const CAP = 64 * 1024;

  it('is cut off as soon as a chunked body passes the cap, long before any timeout', async () => {
    const gamma = await local();
    let written = 0;
    const peer = await httpPeer((_req, res) => {
      res.writeHead(200, { etag: etagFor('whatever') });
      const chunk = Buffer.alloc(8 * 1024, 0x61);
      const timer = setInterval(() => {
        if (res.destroyed) return clearInterval(timer);
        res.write(chunk);
        written += chunk.length;
      }, 2);
      res.on('close', () => clearInterval(timer));
    });
    const handle = handleFor();
    const started = Date.now();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }, { maxBytes: CAP, totalTimeoutMs: 30_000 }));
    expect(error.code).toBe('too_large');
    expect(error.message).toContain(String(CAP));
    expect(Date.now() - started).toBeLessThan(5_000);
    // The client hung up: the peer's endless stream ended with the connection.
    await peer.closed();
    expect(written).toBeLessThan(CAP * 16);
    assertNothingLanded(gamma, error, handle);
  });

  it('is refused on the headers when the declared length is above the cap, before any body byte', async () => {
    const gamma = await local();
    const peer = await rawPeer((socket) => {
      // Declares far more than the cap, then sends only a little and stalls.
      socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${CAP * 100}\r\netag: ${etagFor('x')}\r\n\r\n${'x'.repeat(10)}`);
    });
    const handle = handleFor();
    const started = Date.now();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }, { maxBytes: CAP, totalTimeoutMs: 30_000 }));
    expect(error.code).toBe('too_large');
    expect(Date.now() - started).toBeLessThan(5_000);
    assertNothingLanded(gamma, error, handle);
    expect(snapshot(gamma.workdir)).toEqual([]);
  });

  it('never lets a lying content-length carry more than it declared into the file', async () => {
    const gamma = await local();
    const flood = Buffer.alloc(CAP * 4, 0x62);
    const peer = await rawPeer((socket) => {
      // Declares 16 bytes (under the cap) and sends four times the cap; the etag names the flood.
      socket.write(`HTTP/1.1 200 OK\r\ncontent-length: 16\r\netag: ${etagFor(flood)}\r\n\r\n`);
      socket.end(flood);
    });
    const handle = handleFor();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }, { maxBytes: CAP }));
    // The framing bounds the body at 16 bytes, which the etag does not describe.
    expect(error.code).toBe('etag_mismatch');
    assertNothingLanded(gamma, error, handle);
  });

  it('refuses a body one byte over the cap and lands one exactly at it', async () => {
    const gamma = await local();
    const exact = Buffer.alloc(CAP, 0x63);
    const over = Buffer.alloc(CAP + 1, 0x63);
    const overHandle = handleFor('over.bin');
    const exactHandle = handleFor('exact.bin');
    const peer = await httpPeer((req, res) => {
      const body = req.url === `/resources/peer/${overHandle}` ? over : exact;
      // Chunked (no content-length), so only the running count can catch it.
      res.writeHead(200, { etag: etagFor(body) });
      res.end(body);
    });
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle: overHandle }, { maxBytes: CAP }));
    expect(error.code).toBe('too_large');
    assertNothingLanded(gamma, error, overHandle);
    const landed = await fetchPeerFile(gamma.session, { peer: peer.address, handle: exactHandle }, { maxBytes: CAP });
    expect(landed.bytes).toBe(CAP);
    expect(readFileSync(join(gamma.workdir, landed.path)).equals(exact)).toBe(true);
  });
});

// ── Refusal bodies, redirects, headers ───────────────────────────────────────

describe('what a peer says when it refuses', () => {
  it.each([
    {
      label: 'its own code',
      status: 403,
      body: '{"error":"handle_not_valid","message":"the handle is not valid for this capsule"}',
      expected: 'handle_not_valid',
    },
    { label: 'handle_expired', status: 410, body: '{"error":"handle_expired"}', expected: 'handle_expired' },
    { label: 'a code outside [a-z_]', status: 403, body: '{"error":"Not Valid!"}', expected: 'http_403' },
    { label: 'the code ok', status: 403, body: '{"error":"ok"}', expected: 'http_403' },
    { label: 'a code only this side decides', status: 403, body: '{"error":"peer_not_allowed"}', expected: 'http_403' },
    { label: 'a forged etag_mismatch', status: 409, body: '{"error":"etag_mismatch"}', expected: 'http_409' },
    { label: 'its own too_large', status: 413, body: '{"error":"too_large"}', expected: 'too_large' },
    { label: 'a 65-character code', status: 404, body: `{"error":"${'a'.repeat(65)}"}`, expected: 'http_404' },
    { label: 'a number for a code', status: 400, body: '{"error":42}', expected: 'http_400' },
    { label: 'no JSON', status: 500, body: 'internal server error', expected: 'http_500' },
    { label: 'a body above 16 KiB', status: 500, body: `{"error":"io_error","message":"${'m'.repeat(20_000)}"}`, expected: 'http_500' },
    { label: 'no body', status: 204, body: '', expected: 'http_204' },
    { label: 'a 2xx other than 200', status: 206, body: 'partial', expected: 'http_206' },
  ])('HTTP $status with $label is refused as $expected', async ({ status, body, expected }) => {
    const gamma = await local();
    const peer = await httpPeer((_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(body);
    });
    const handle = handleFor();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
    expect(error.code).toBe(expected);
    assertNothingLanded(gamma, error, handle);
  });

  it("never copies the peer's own message (or a token in it) into the refusal", async () => {
    const gamma = await local();
    const handle = handleFor();
    const peer = await httpPeer((_req, res) => {
      res.writeHead(403, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: 'handle_not_valid', message: `PEER-CHOSEN TEXT ${handle}` }));
    });
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
    expect(error.code).toBe('handle_not_valid');
    expect(error.message).not.toContain('PEER-CHOSEN');
    expect(readFileSync(gamma.tracePath, 'utf8')).not.toContain('PEER-CHOSEN');
    assertNothingLanded(gamma, error, handle);
  });

  it('follows no redirect: the target of a 302 sees nothing', async () => {
    const gamma = await local();
    const elsewhere = await httpPeer(honest('redirected bytes'));
    const handle = handleFor();
    const peer = await httpPeer((req, res) => {
      res.writeHead(302, { location: `http://${elsewhere.address}${req.url}` });
      res.end();
    });
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
    expect(error.code).toBe('http_302');
    expect(elsewhere.connections()).toBe(0);
    assertNothingLanded(gamma, error, handle);
  });

  it.each([
    ['7', 7],
    ['0', 0],
    ['seven', null],
    ['-1', null],
    [null, null],
  ])('reports the peer generation header %s as %s', async (header, expected) => {
    const gamma = await local();
    const peer = await httpPeer(honest('bytes', header === null ? {} : { 'x-murmur-generation': header }));
    const landed = await fetchPeerFile(gamma.session, { peer: peer.address, handle: handleFor() });
    expect(landed.generation).toBe(expected);
  });
});

// ── The token goes only to its issuer ────────────────────────────────────────

describe('a token goes only to its issuer', () => {
  it("refuses with issuer_mismatch, having sent nothing, when the peer's card names another session", async () => {
    const gamma = await local();
    // B is allow-listed, honest about itself, and would redeem A's token at A if handed it.
    let sawToken = false;
    const b = await httpPeer((req, res) => {
      if (req.url?.includes('mh1.')) sawToken = true;
      honest('B relays A bytes')(req, res);
    });
    const tokenFromA = `mh1.${Buffer.from(JSON.stringify({ v: 1, iss: 'ses_alpha', p: 'r.md', exp: Date.now() + 60_000, n: '0'.repeat(32) })).toString('base64url')}.${randomBytes(32).toString('base64url')}`;
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: b.address, handle: tokenFromA }));
    expect(error.code).toBe('issuer_mismatch');
    expect(sawToken).toBe(false);
    expect(b.requests).toEqual([]);
    const line = readFileSync(gamma.tracePath, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .at(-1);
    expect(line).toMatchObject({ event_type: 'peer_file_fetch', outcome: 'issuer_mismatch', stored_path: null });
  });

  it('refuses with peer_unreachable, having sent nothing, when the peer serves no card', async () => {
    const gamma = await local();
    autoCard = false;
    try {
      const b = await httpPeer((_req, res) => {
        res.writeHead(404);
        res.end();
      });
      const error = await refusal(() => fetchPeerFile(gamma.session, { peer: b.address, handle: handleFor() }));
      expect(error.code).toBe('peer_unreachable');
      expect(b.requests.map((r) => r.url)).toEqual(['/.well-known/agent-card.json']);
    } finally {
      autoCard = true;
    }
  });

  it("RESIDUAL RISK (documented): a peer that lies on its card, naming the issuer's session, is sent the token", async () => {
    const gamma = await local();
    const liar = await httpPeer(honest('liar bytes'));
    const handle = handleFor('r.md'); // iss is ISSUER, which the liar's card also claims
    await fetchPeerFile(gamma.session, { peer: liar.address, handle });
    expect(liar.requests.map((r) => r.url)).toEqual([`/resources/peer/${handle}`]);
  });
});

// ── Where the bytes land ─────────────────────────────────────────────────────

describe('landing fetched bytes', () => {
  it.each([
    ['../../etc/passwd', 'passwd'],
    ['a b;rm -rf.md', 'a_b_rm_-rf.md'],
    ['dir/..', 'file'],
    ['', 'file'],
  ])('names a file from the unverified hint %s as <id>-%s, inside peer-in only', async (hint, name) => {
    const gamma = await local();
    const peer = await httpPeer(honest('named bytes'));
    const handle = handleFor(hint);
    const landed = await fetchPeerFile(gamma.session, { peer: peer.address, handle });
    expect(landed.path).toBe(`peer-in/${handleId(handle)}-${name}`);
    expect(snapshot(gamma.workdir)).toEqual(['peer-in/', landed.path]);
    expect(readFileSync(join(gamma.workdir, landed.path), 'utf8')).toBe('named bytes');
  });

  it('sends nothing for a handle whose payload names no issuer (not JSON): issuer_mismatch, traced', async () => {
    const gamma = await local();
    const peer = await httpPeer(honest('never sent'));
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle: handleFor(null) }));
    expect(error.code).toBe('issuer_mismatch');
    expect(peer.requests).toEqual([]);
    expect(snapshot(gamma.workdir)).toEqual([]);
  });

  it('refuses a peer-in that is a symlink to an outside directory, writing nothing there', async () => {
    const gamma = await local();
    const outside = scratch();
    writeFileSync(join(outside, 'existing.txt'), 'untouched');
    symlinkSync(outside, join(gamma.workdir, 'peer-in'));
    const before = snapshot(outside);
    const peer = await httpPeer(honest('should land nowhere'));
    const handle = handleFor();
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
    expect(error.code).toBe('io_error');
    expect(error.message).toContain('peer-in');
    expect(error.message).not.toContain(outside);
    expect(error.message).not.toContain(gamma.workdir);
    expect(snapshot(outside)).toEqual(before);
    expect(readFileSync(join(outside, 'existing.txt'), 'utf8')).toBe('untouched');
    expect(snapshot(gamma.workdir)).toEqual(['peer-in@']);
    expect(fetchEvents(gamma).at(-1)).toMatchObject({ outcome: 'io_error', stored_path: null });
  });

  it('refuses a peer-in that is a regular file or a symlink to a file', async () => {
    const gamma = await local();
    writeFileSync(join(gamma.workdir, 'decoy'), 'decoy');
    const peer = await httpPeer(honest('bytes'));
    writeFileSync(join(gamma.workdir, 'peer-in'), 'not a directory');
    expect((await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle: handleFor() }))).code).toBe('io_error');
    removeTree(join(gamma.workdir, 'peer-in'));
    symlinkSync('decoy', join(gamma.workdir, 'peer-in'));
    expect((await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle: handleFor() }))).code).toBe('io_error');
    expect(readFileSync(join(gamma.workdir, 'decoy'), 'utf8')).toBe('decoy');
  });

  it('replaces a symlink planted at the final name rather than writing through it', async () => {
    const gamma = await local();
    const outside = scratch();
    writeFileSync(join(outside, 'target.txt'), 'untouched');
    const handle = handleFor('report.md');
    mkdirSync(join(gamma.workdir, 'peer-in'));
    symlinkSync(join(outside, 'target.txt'), join(gamma.workdir, `peer-in/${handleId(handle)}-report.md`));
    const peer = await httpPeer(honest('landed bytes'));
    const landed = await fetchPeerFile(gamma.session, { peer: peer.address, handle });
    expect(lstatSync(join(gamma.workdir, landed.path)).isFile()).toBe(true);
    expect(readFileSync(join(gamma.workdir, landed.path), 'utf8')).toBe('landed bytes');
    expect(readFileSync(join(outside, 'target.txt'), 'utf8')).toBe('untouched');
  });

  it('leaks no descriptor across refusals and landings', async () => {
    const gamma = await local();
    const good = await httpPeer(honest('fine'));
    const liar = await httpPeer((_req, res) => {
      res.writeHead(200, { etag: etagFor('not this') });
      res.end('this');
    });
    const refuser = await httpPeer((_req, res) => {
      res.writeHead(403, { 'content-type': 'application/json' });
      res.end('{"error":"handle_not_valid"}');
    });
    // One round first, so that lazily opened descriptors (thread pool, DNS) exist before counting.
    await fetchPeerFile(gamma.session, { peer: good.address, handle: handleFor() });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const before = fdCount();
    for (let i = 0; i < 5; i++) {
      await fetchPeerFile(gamma.session, { peer: good.address, handle: handleFor() });
      await refusal(() => fetchPeerFile(gamma.session, { peer: liar.address, handle: handleFor() }));
      await refusal(() => fetchPeerFile(gamma.session, { peer: refuser.address, handle: handleFor() }));
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(fdCount()).toBe(before);
  });
});

// ── TLS ──────────────────────────────────────────────────────────────────────

describe('an https peer', () => {
  function selfSigned(): { key: string; cert: string } {
    const dir = scratch();
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=IP:127.0.0.1,DNS:localhost',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
  }

  it('is fetched over TLS when its certificate verifies, and refused when it does not', async () => {
    const { key, cert } = selfSigned();
    const requests: string[] = [];
    const server = createHttpsServer({ key, cert }, (req, res) => {
      if (req.url === '/.well-known/agent-card.json') {
        const card = cardFor((server.address() as { port: number }).port);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': card.length });
        res.end(card);
        return;
      }
      requests.push(req.url ?? '');
      honest('over tls')(req, res);
    });
    const { port } = await listenLoopback(server);
    const gamma = await local();
    const handle = handleFor('secure.md');

    const landed = await fetchPeerFile(gamma.session, { peer: `https://127.0.0.1:${port}`, handle }, { ca: cert });
    expect(readFileSync(join(gamma.workdir, landed.path), 'utf8')).toBe('over tls');
    expect(requests).toEqual([`/resources/peer/${handle}`]);

    // The system store does not know this certificate: no request is ever sent in the clear.
    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: `https://127.0.0.1:${port}`, handle: handleFor() }));
    expect(error.code).toBe('peer_unreachable');
    expect(requests).toHaveLength(1);
  });
});

// ── Agent cards (share-file) ─────────────────────────────────────────────────

describe('share-file against a hostile agent card', () => {
  beforeEach(() => {
    autoCard = false;
  });
  afterEach(() => {
    autoCard = true;
  });
  const jsonrpc = (url: string) => [{ url, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }];

  it.each([
    ['no name', { supportedInterfaces: jsonrpc('http://localhost:1') }, /carries no 'name'/],
    ['a blank name', { name: '  ', supportedInterfaces: jsonrpc('http://localhost:1') }, /carries no 'name'/],
    ['no interfaces', { name: 'peer' }, /JSONRPC/],
    ['only a GRPC interface', { name: 'peer', supportedInterfaces: [{ url: 'http://localhost:1', protocolBinding: 'GRPC' }] }, /JSONRPC/],
    ['an empty JSONRPC url', { name: 'peer', supportedInterfaces: jsonrpc('') }, /JSONRPC/],
    ['not an object', 'a string', /carries no 'name'/],
  ])('refuses a card with %s as peer_unreachable', async (_label, card, reason) => {
    const alpha = await local({ tree: ['out/report.md: x'] });
    const peer = await httpPeer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(card));
    });
    const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: peer.address }));
    expect(error.code).toBe('peer_unreachable');
    expect(error.message).toMatch(reason);
    expect(peer.requests.map((r) => [r.method, r.url])).toEqual([['GET', '/.well-known/agent-card.json']]);
    const mint = readFileSync(alpha.tracePath, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .at(-1);
    expect(mint).toMatchObject({ event_type: 'peer_handle_mint', handle_id: null, path: 'report.md', audience: '', outcome: 'peer_unreachable' });
  });

  it.each([
    [
      'answers 404',
      (_req: IncomingMessage, res: ServerResponse) => {
        res.writeHead(404);
        res.end('{}');
      },
    ],
    [
      'answers with no JSON',
      (_req: IncomingMessage, res: ServerResponse) => {
        res.writeHead(200);
        res.end('<html>');
      },
    ],
    [
      'answers a card larger than 64 KiB',
      (_req: IncomingMessage, res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ name: 'peer', supportedInterfaces: jsonrpc('http://localhost:1'), pad: 'x'.repeat(70_000) }));
      },
    ],
    [
      'streams a card forever',
      (_req: IncomingMessage, res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(' '.repeat(4096))), 2);
        res.on('close', () => clearInterval(timer));
      },
    ],
  ])('refuses a peer that %s as peer_unreachable', async (_label, handler) => {
    const alpha = await local({ tree: ['out/report.md: x'] });
    const peer = await httpPeer(handler);
    const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: peer.address }));
    expect(error.code).toBe('peer_unreachable');
  });

  it('refuses a card that never comes, within the total timeout', async () => {
    const alpha = await local({ tree: ['out/report.md: x'] });
    const peer = await rawPeer(() => undefined);
    const started = Date.now();
    const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: peer.address }, { totalTimeoutMs: 300 }));
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(error.code).toBe('peer_unreachable');
  });

  it('follows no redirect for a card: the target of a 302 sees nothing', async () => {
    const alpha = await local({ tree: ['out/report.md: x'] });
    const elsewhere = await httpPeer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ name: 'elsewhere', supportedInterfaces: jsonrpc('http://localhost:1') }));
    });
    const peer = await httpPeer((_req, res) => {
      res.writeHead(302, { location: `http://${elsewhere.address}/.well-known/agent-card.json` });
      res.end();
    });
    const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: peer.address }));
    expect(error.code).toBe('peer_unreachable');
    expect(error.message).toMatch(/HTTP 302/);
    expect(elsewhere.connections()).toBe(0);
  });

  it('mints for whatever audience a well-formed card states (binding is not authentication)', async () => {
    const alpha = await local({ tree: ['out/report.md: x'] });
    const peer = await httpPeer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          name: 'Reporter',
          supportedInterfaces: [
            { url: 'grpc://ignored:1', protocolBinding: 'GRPC' },
            ...jsonrpc('HTTP://Reporter.Example:41234/a2a'),
            ...jsonrpc('http://second:2'),
          ],
        }),
      );
    });
    const minted = await shareFile(alpha.session, { path: 'report.md', peer: peer.address });
    expect(minted.audience).toBe('reporter@reporter.example:41234');
  });
});
