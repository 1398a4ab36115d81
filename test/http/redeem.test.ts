// The redeem route over a real socket (raw requests, so nothing is normalised on the way): every
// code, status, message and header of SPEC section 6 in its fixed check order, byte-identical 403
// bodies for every MAC failure, and the redeem trace with its path withheld until the MAC verified.
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type Socket } from 'node:net';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Containment } from '../../src/manifest/model.js';
import { mintToken, randomNonceHex, sealRawForTests, type HandlePayload } from '../../src/handle/token.js';
import { handleId } from '../../src/redact.js';
import { openCapsule, type Capsule } from '../helpers/capsule.js';
import { parseResponse, rawGet, rawRequest, readTrace, sha256Hex } from '../helpers/http.js';

// The one sodium-native module object the key calls into, so a test can count its unlocks.
const sodium = createRequire(import.meta.url)('sodium-native') as { sodium_mprotect_readwrite(buf: Buffer): void };
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

const AUD = 'reader@localhost:41235';
const SECRET = 'REDEEM-SECRET-OUTSIDE';
const PEER_YAML = 'name: reporter\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: 10m\n    max_bytes: 1Ki\n';

let workdir: string;
let traceDir: string;
const capsules: Partial<Record<Containment | 'second' | 'undeclared', Capsule>> = {};

beforeAll(async () => {
  workdir = tempDir();
  traceDir = tempDir();
  makeTree(workdir, [
    'out/report.md: known bytes',
    'out/sub/a.txt: in sub',
    'out/link -> report.md',
    'out/escape -> ../secret.txt',
    'out/big.bin @ 2k',
    'out/fifo |',
    `secret.txt: ${SECRET}`,
  ]);
  for (const c of ['sealed', 'scoped'] as const) capsules[c] = await openCapsule({ workdir, traceDir, yaml: PEER_YAML, containment: c });
  // A second session of the same capsule over the same workdir: a different key.
  capsules.second = await openCapsule({ workdir, traceDir, yaml: PEER_YAML, containment: 'sealed' });
  capsules.undeclared = await openCapsule({ workdir, traceDir, yaml: 'name: x\nversion: "1"\n' });
});

afterAll(async () => {
  for (const c of Object.values(capsules)) await c!.close();
  removeTree(workdir);
  removeTree(traceDir);
});

function cap(c: keyof typeof capsules = 'sealed'): Capsule {
  return capsules[c]!;
}

function payload(p: string, overrides: Partial<HandlePayload> = {}, c: keyof typeof capsules = 'sealed'): HandlePayload {
  return { v: 1, iss: cap(c).session.sessionId, p, exp: Date.now() + 60_000, n: randomNonceHex(), ...overrides };
}

function mint(p: string, overrides: Partial<HandlePayload> = {}, c: keyof typeof capsules = 'sealed', audience = AUD): string {
  return mintToken(cap(c).session.key!, payload(p, overrides, c), audience);
}

function tamper(token: string, segment: number): string {
  const parts = token.split('.');
  const s = parts[segment]!;
  parts[segment] = (s[0] === 'A' ? 'B' : 'A') + s.slice(1);
  return parts.join('.');
}

const redeem = (token: string, audience: string | null = AUD, c: keyof typeof capsules = 'sealed') =>
  rawGet(cap(c).url, `/resources/peer/${token}`, audience === null ? [] : [['x-murmur-audience', audience]]);

function errorOf(res: { body: Buffer }): { error: string; message: string } {
  return JSON.parse(res.body.toString());
}

describe('a valid redeem', () => {
  it('serves the bytes with the read headers, x-murmur-handle-id and no export root', async () => {
    const token = mint('report.md');
    const res = await redeem(token);
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('known bytes');
    expect(res.headerNames.filter((n) => n.startsWith('x-murmur') || ['content-type', 'etag', 'content-length'].includes(n))).toEqual([
      'content-type',
      'etag',
      'x-murmur-mtime-ms',
      'x-murmur-generation',
      'x-murmur-containment',
      'x-murmur-handle-id',
      'content-length',
    ]);
    expect(res.header('etag')).toBe(`"sha256:${sha256Hex('known bytes')}"`);
    expect(res.header('x-murmur-handle-id')).toBe(handleId(token));
    expect(res.header('x-murmur-export-root')).toBeUndefined();
    expect(res.header('content-type')).toBe('application/octet-stream');
  });

  it('is idempotent and follows a rename to the new bytes and a new etag', async () => {
    const dir = tempDir();
    const tdir = tempDir();
    makeTree(dir, ['out/f.md: first']);
    const c = await openCapsule({ workdir: dir, traceDir: tdir, yaml: PEER_YAML, containment: 'sealed' });
    try {
      const token = mintToken(c.session.key!, { v: 1, iss: c.session.sessionId, p: 'f.md', exp: Date.now() + 60_000, n: randomNonceHex() }, AUD);
      const get = () => rawGet(c.url, `/resources/peer/${token}`, [['x-murmur-audience', AUD]]);
      const first = await get();
      expect((await get()).header('etag')).toBe(first.header('etag'));
      writeFileSync(join(dir, 'out/.tmp'), 'second and longer');
      renameSync(join(dir, 'out/.tmp'), join(dir, 'out/f.md'));
      const second = await get();
      expect(second.body.toString()).toBe('second and longer');
      expect(second.header('etag')).not.toBe(first.header('etag'));
    } finally {
      await c.close();
      removeTree(dir);
      removeTree(tdir);
    }
  });

  it('asserted audiences are compared after trimming', async () => {
    expect((await redeem(mint('report.md'), `  ${AUD}  `)).status).toBe(200);
  });
});

describe('redeems that arrive together', () => {
  it('share one unlock of the key, each still checked on its own', async () => {
    const keyBuffer = cap().session.key!._unsafeBufferForTest();
    const n = 12;
    const tokens = Array.from({ length: n }, (_, i) => (i % 3 === 2 ? tamper(mint('report.md'), 2) : mint('report.md')));
    const { port } = new URL(cap().url);
    // Every connection open first, then every request written in one go: the server reads them
    // all in one turn of its loop.
    const sockets = await Promise.all(
      tokens.map(
        () =>
          new Promise<Socket>((resolve, reject) => {
            const socket = connect(Number(port), '127.0.0.1', () => resolve(socket));
            socket.once('error', reject);
          }),
      ),
    );
    const answers = sockets.map(
      (socket) =>
        new Promise<Buffer>((resolve) => {
          const chunks: Buffer[] = [];
          socket.on('data', (c: Buffer) => chunks.push(c));
          socket.on('end', () => resolve(Buffer.concat(chunks)));
        }),
    );
    // Accepted by the server too (a client's connect completes before the server accepts), so
    // the requests are read in one turn, as a busy server's established connections are.
    const server = cap().server.app.server;
    await expect.poll(() => new Promise<number>((resolve) => server.getConnections((_e, count) => resolve(count)))).toBeGreaterThanOrEqual(n);
    const unlocks = vi.spyOn(sodium, 'sodium_mprotect_readwrite');
    try {
      tokens.forEach((token, i) =>
        sockets[i]!.write(`GET /resources/peer/${token} HTTP/1.1\r\nHost: x\r\nX-Murmur-Audience: ${AUD}\r\nConnection: close\r\n\r\n`),
      );
      const statuses = (await Promise.all(answers)).map((raw) => parseResponse(raw).status);
      expect(statuses).toEqual(tokens.map((_, i) => (i % 3 === 2 ? 403 : 200)));
      const keyUnlocks = unlocks.mock.calls.filter(([buffer]) => buffer === keyBuffer).length;
      expect(keyUnlocks, `${n} redeems read in one turn took ${keyUnlocks} unlocks`).toBeLessThanOrEqual(2);
    } finally {
      unlocks.mockRestore();
    }
  });
});

describe('refusals in the fixed order', () => {
  it('gives byte-identical 403 bodies for tampered payload, tampered MAC, foreign key and wrong audience', async () => {
    const token = mint('report.md');
    const foreign = mint('report.md', { iss: cap('sealed').session.sessionId }, 'second');
    const foreignIss = mint('report.md', { iss: 'ses_someone_else' });
    const refusals = await Promise.all([
      redeem(tamper(token, 1)),
      redeem(tamper(token, 2)),
      redeem(foreign),
      redeem(token, 'attacker@localhost:1'),
      redeem(token, AUD.toUpperCase()),
      redeem(foreignIss),
    ]);
    for (const r of refusals) {
      expect(r.status).toBe(403);
      expect(r.body.equals(refusals[0]!.body)).toBe(true);
      expect(r.body.toString()).not.toContain('known bytes');
    }
    expect(errorOf(refusals[0]!)).toEqual({ error: 'handle_not_valid', message: 'the handle is not valid for this capsule' });
  });

  it("a second session over the same workdir does not accept the first one's handles", async () => {
    const res = await redeem(mint('report.md'), AUD, 'second');
    expect(res.status).toBe(403);
    expect(errorOf(res).error).toBe('handle_not_valid');
  });

  it.each(['mh1', 'mh1.', 'mh1.abc', 'mh1.abc.def.ghi', 'mh2.YWJj.YWJj', 'mh1.!!!.YWJj', 'mh1.YWJj.!!!', 'report.md', 'a/b/c', 'mh1..'])(
    'malformed shape %s is 400 malformed_handle, before the audience is required',
    async (token) => {
      for (const audience of [AUD, null]) {
        const res = await redeem(token, audience);
        expect(res.status).toBe(400);
        expect(errorOf(res)).toEqual({ error: 'malformed_handle', message: 'the handle is not a well-formed mh1 token' });
      }
    },
  );

  it('refuses padding and non-canonical base64url', async () => {
    const token = mint('report.md');
    const [tag, p, mac] = token.split('.') as [string, string, string];
    for (const bad of [
      `${tag}.${p}=.${mac}`,
      `${tag}.${p}.${mac}=`,
      `${tag}.${p}.${mac.slice(0, -1)}${mac.endsWith('A') ? 'B' : 'A'}`,
      `${tag}.${p}.${mac}A`,
    ]) {
      const res = await redeem(bad);
      expect([400, 403]).toContain(res.status);
      if (res.status === 400) expect(errorOf(res).error).toBe('malformed_handle');
    }
    expect((await redeem(`${tag}.${p}=.${mac}`)).status).toBe(400);
  });

  it('a validly MACed payload that is not JSON, or has v != 1, is malformed', async () => {
    const key = cap().session.key!;
    for (const body of ['not json', JSON.stringify({ v: 2, iss: cap().session.sessionId, p: 'report.md', exp: Date.now() + 60_000, n: '00' })]) {
      const res = await redeem(sealRawForTests(key, Buffer.from(body), AUD));
      expect(res.status).toBe(400);
      expect(errorOf(res).error).toBe('malformed_handle');
    }
  });

  it.each([[null], [''], ['   ']])('audience %j is 400 missing_audience', async (audience) => {
    const res = await redeem(mint('report.md'), audience);
    expect(res.status).toBe(400);
    expect(errorOf(res)).toEqual({ error: 'missing_audience', message: 'a redeem must assert its audience in the x-murmur-audience header' });
  });

  it('an expired handle is 410, with a real 1 s lifetime', async () => {
    const token = mint('report.md', { exp: Date.now() + 1000 });
    expect((await redeem(token)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1100));
    const res = await redeem(token);
    expect(res.status).toBe(410);
    expect(errorOf(res)).toEqual({ error: 'handle_expired', message: 'the handle has expired' });
    // An expired handle with the wrong audience is not told it expired.
    expect((await redeem(token, 'x@y')).status).toBe(403);
  });

  it.each([
    ['sealed', 'missing.md', 404, 'not_found', 'no such file under the peer export root'],
    ['sealed', '../secret.txt', 403, 'outside_root', 'the handle names a path outside the peer export root'],
    ['sealed', 'escape', 403, 'outside_root', 'the handle names a path outside the peer export root'],
    ['sealed', 'sub', 403, 'not_a_regular_file', 'the handle does not name a regular file'],
    ['sealed', 'fifo', 403, 'not_a_regular_file', 'the handle does not name a regular file'],
    ['sealed', 'big.bin', 413, 'too_large', 'file exceeds the declared exports.peer_files.max_bytes of 1024 bytes'],
    ['sealed', 'link', 200, null, null],
    ['scoped', 'link', 403, 'symlink_refused', 'a symlink was encountered and the achieved containment class is scoped'],
    ['scoped', 'escape', 403, 'symlink_refused', 'a symlink was encountered and the achieved containment class is scoped'],
  ] as const)('%s: a handle naming %s answers %i', async (c, p, status, code, message) => {
    const res = await redeem(mint(p, {}, c), AUD, c);
    expect(res.status).toBe(status);
    if (code) {
      expect(errorOf(res)).toEqual({ error: code, message });
      expect(res.header('x-murmur-generation')).toBe('0');
      expect(res.header('x-murmur-handle-id')).toMatch(/^[0-9a-f]{16}$/);
    }
    expect(res.raw.toString('latin1')).not.toContain(SECRET);
  });

  it('routes a long token (no 414 from the router)', async () => {
    const token = mint(`${'d/'.repeat(1500)}x.md`);
    expect(token.length).toBeGreaterThan(4000);
    const res = await redeem(token);
    expect(res.status).toBe(404);
    expect(errorOf(res).error).toBe('not_found');
  });
});

describe('no list verb, no write verb, no plane', () => {
  it.each(['/resources/peer', '/resources/peer/', '/resources/peer?x=1', '/resources/peer/?list'])('%s is 404 not_found with no list', async (target) => {
    const before = readTrace(cap().tracePath).length;
    const res = await rawGet(cap().url, target, [['x-murmur-audience', AUD]]);
    expect(res.status).toBe(404);
    expect(errorOf(res)).toEqual({ error: 'not_found', message: 'no such file under the peer export root' });
    expect(res.body.toString()).not.toContain('[');
    expect(readTrace(cap().tracePath).length).toBe(before);
  });

  it.each(['POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'])('%s is 405 with allow: GET, untraced', async (method) => {
    const before = readTrace(cap().tracePath).length;
    const token = mint('report.md');
    const res = await rawRequest(cap().url, { method, target: `/resources/peer/${token}`, headers: [['x-murmur-audience', AUD]] });
    expect(res.status).toBe(405);
    expect(res.header('allow')).toBe('GET');
    // Like every refusal: the generation and the handle id.
    expect(res.header('x-murmur-generation')).toBe('0');
    expect(res.header('x-murmur-handle-id')).toBe(handleId(token));
    if (method !== 'HEAD') {
      expect(errorOf(res)).toEqual({ error: 'method_not_allowed', message: 'the peer plane serves GET only; it has no write path and no list verb' });
    }
    expect(readTrace(cap().tracePath).length).toBe(before);
  });

  it('an undeclared capsule answers no_peer_plane, traced', async () => {
    const res = await rawGet(cap('undeclared').url, '/resources/peer/mh1.YWJj.YWJj', [['x-murmur-audience', AUD]]);
    expect(res.status).toBe(404);
    expect(errorOf(res)).toEqual({ error: 'no_peer_plane', message: 'this capsule declares no exports.peer_files block, so it has no peer plane' });
    const last = readTrace(cap('undeclared').tracePath).at(-1)!;
    expect(last.event_type).toBe('peer_handle_redeem');
    expect(last.outcome).toBe('no_peer_plane');
  });
});

describe('the redeem trace', () => {
  it('records fields in order, the path only once the MAC verified, and never a token', async () => {
    const ok = mint('report.md');
    const expired = mint('sub/a.txt', { exp: Date.now() - 1 });
    await redeem(ok);
    await redeem(tamper(ok, 1));
    await redeem(expired);
    await redeem(ok, null);
    const events = readTrace(cap().tracePath).filter((e) => e.event_type === 'peer_handle_redeem');
    const mine = (id: string) => events.filter((e) => e.handle_id === id);
    const okEvent = mine(handleId(ok)).find((e) => e.outcome === 'ok')!;
    expect(Object.keys(okEvent)).toEqual([
      'event_type',
      'event_id',
      'parent_id',
      'session_id',
      'timestamp',
      'handle_id',
      'path',
      'generation',
      'audience_asserted',
      'bytes',
      'sha256',
      'outcome',
      'reason',
    ]);
    expect(okEvent).toMatchObject({ path: 'report.md', audience_asserted: AUD, bytes: 11, sha256: sha256Hex('known bytes'), reason: null });
    expect(mine(handleId(tamper(ok, 1)))[0]).toMatchObject({ path: null, outcome: 'handle_not_valid', bytes: null, sha256: null });
    expect(mine(handleId(expired))[0]).toMatchObject({ path: 'sub/a.txt', outcome: 'handle_expired' });
    expect(mine(handleId(ok)).find((e) => e.outcome === 'missing_audience')).toMatchObject({ path: null, audience_asserted: null });
    const text = JSON.stringify(readTrace(cap().tracePath));
    expect(text).not.toContain('mh1.');
  });
});
