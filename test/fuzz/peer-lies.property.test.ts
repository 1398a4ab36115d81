// Issue 28's gaps in SPEC 6 and 10: a lying peer and a lying card. fetch-peer-file (through
// callTool, as the MCP server calls it) fetches from a generated hostile peer on a real loopback
// socket (test/fuzz/hostile.ts), whose card and redeem answer lie in generated ways:
// - the card: the token's issuer, another session, the issuer under a foreign extension, no
//   session id or not a string, not JSON, not 200, larger than a card may be;
// - the token: its `iss` the card's session or another, or a payload that is no handle's;
// - the redeem answer: a status (200, other 2xx, 3xx, 4xx, 5xx) with a refusal body that names a
//   peer-plane code, one of the fetcher's own codes, nonsense, or is not JSON or too long; an
//   etag naming the delivered bytes, all the bytes sent, other bytes, or malformed; a
//   content-length that is exact, short, long or absent, chunked framing whole or cut; the answer
//   ended by a FIN, kept open, or reset; bodies on both sides of 64 KiB and of the fetch cap; an
//   `x-murmur-generation` that is a number or not.
// The model (peer-model.ts) predicts the tool's result or refusal code, and the property checks,
// against it: the bytes landed (exactly the delivered bytes, under the stored name SPEC 6 gives)
// or nothing landed and no temporary file left; one `peer_file_fetch` line with the outcome and
// fields the model says; the token sent only in a redeem, and only when the card names the token's
// issuer (`issuer_mismatch`: the server never receives a byte of the token); the redeem asserting
// the fetcher's own audience; no token in a result, a refusal or the trace.
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { callTool } from '../../src/tools/index.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, type Served } from './capsules.js';
import { bytesFrom, framingAndEnding, hostileServer, sha256Hex, type Ending, type Framing, type Scripted } from './hostile.js';
import { fetchOutcome, PEER_PLANE_CODES, storedName, traced } from './peer-model.js';
import { fuzzIt, guard } from './runner.js';
import { TraceTail } from './wire.js';

/** The fetcher's cap (its launch's fetchMaxBytes): small, so both sides of it are cheap. */
const CAP = 70_000;
const SIZES = [0, 1, 100, 65_535, 65_536, CAP, CAP + 1, 100_000];
const ISSUER = 'ses_hostile_issuer';
const CAPSULE_URI = 'urn:murmur:capsule:v1';

type CardLie = 'honest' | 'other-session' | 'foreign-uri' | 'no-session' | 'session-not-string' | 'not-json' | 'status-404' | 'oversized';
type TokenIssuer = 'card' | 'other' | 'no-payload';
type EtagLie = 'delivered' | 'sent' | 'other' | 'absent' | 'unquoted' | 'weak' | 'upper' | 'twice';
type RefusalBody = { kind: 'code'; code: string } | { kind: 'not-json' } | { kind: 'long'; code: string };

interface Case {
  card: CardLie;
  issuer: TokenIssuer;
  /** The handle's `p`: where the stored name comes from. */
  name: string;
  status: number;
  refusal: RefusalBody;
  size: number;
  seed: number;
  etag: EtagLie;
  framing: Framing;
  ending: Ending;
  generation: string | null;
}

let base: string;
let fetcher: Served;
let tail: TraceTail;

beforeAll(async () => {
  base = tempDir('rp-fuzz-peer-lies-');
  const workdir = join(base, 'fetcher');
  mkdirSync(workdir);
  fetcher = await serveCapsule({
    workdir,
    traceDir: join(base, 'traces'),
    yaml: 'name: fetcher\nversion: "1"\ncapabilities:\n  peer_fetch:\n    allow: [127.0.0.1]\n',
    fetchMaxBytes: CAP,
  });
  tail = new TraceTail(fetcher.tracePath);
  tail.next();
}, 60_000);

afterAll(async () => {
  await fetcher?.close();
  removeTree(base);
});

function cardBody(lie: CardLie, port: number): Buffer {
  const ext = (uri: string, params: Record<string, unknown>) => ({ capabilities: { extensions: [{ uri, params: { planes: ['peer_files'], ...params } }] } });
  const shape = (extra: object) => ({
    name: 'peer',
    supportedInterfaces: [{ url: `http://127.0.0.1:${port}`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }],
    ...extra,
  });
  switch (lie) {
    case 'honest':
      return Buffer.from(JSON.stringify(shape(ext(CAPSULE_URI, { sessionId: ISSUER }))));
    case 'other-session':
      return Buffer.from(JSON.stringify(shape(ext(CAPSULE_URI, { sessionId: `${ISSUER}_x` }))));
    case 'foreign-uri':
      return Buffer.from(JSON.stringify(shape(ext('urn:example:other', { sessionId: ISSUER }))));
    case 'no-session':
      return Buffer.from(JSON.stringify(shape(ext(CAPSULE_URI, {}))));
    case 'session-not-string':
      return Buffer.from(JSON.stringify(shape(ext(CAPSULE_URI, { sessionId: [ISSUER] }))));
    case 'not-json':
      return Buffer.from(`{"name": "peer", "sessionId": "${ISSUER}"`);
    case 'status-404':
      return Buffer.from('{"error":"not_found"}');
    case 'oversized':
      return Buffer.from(JSON.stringify(shape({ ...ext(CAPSULE_URI, { sessionId: ISSUER }), pad: 'x'.repeat(64 * 1024) })));
  }
}

function tokenFor(c: Case): string {
  const payload =
    c.issuer === 'no-payload'
      ? Buffer.from(JSON.stringify({ v: 1, iss: ISSUER, p: c.name }))
      : Buffer.from(
          JSON.stringify({
            v: 1,
            iss: c.issuer === 'card' ? ISSUER : 'ses_someone_else',
            p: c.name,
            exp: 4_102_444_800_000,
            n: sha256Hex(String(c.seed)).slice(0, 32),
          }),
        );
  return `mh1.${payload.toString('base64url')}.${bytesFrom(c.seed, 32).toString('base64url')}`;
}

function redeemAnswer(c: Case): Scripted {
  const headers: Array<[string, string]> = [['content-type', 'application/octet-stream']];
  if (c.status !== 200) {
    const r = c.refusal;
    const text = r.kind === 'not-json' ? 'no such thing' : JSON.stringify({ error: r.code, message: r.kind === 'long' ? 'm'.repeat(17 * 1024) : 'refused' });
    return { status: c.status, headers: [['content-type', 'application/json']], body: Buffer.from(text), framing: { kind: 'exact' }, ending: c.ending };
  }
  const body = bytesFrom(c.seed, c.size);
  const f = c.framing;
  const deliveredBytes = f.kind === 'short' ? body.subarray(0, Math.max(0, body.length - f.by)) : body;
  const hex = c.etag === 'sent' ? sha256Hex(body) : c.etag === 'other' ? sha256Hex(`other ${c.seed}`) : sha256Hex(deliveredBytes);
  const etag: Record<EtagLie, string[]> = {
    delivered: [`"sha256:${hex}"`],
    sent: [`"sha256:${hex}"`],
    other: [`"sha256:${hex}"`],
    absent: [],
    unquoted: [`sha256:${hex}`],
    weak: [`W/"sha256:${hex}"`],
    upper: [`"sha256:${hex.toUpperCase()}"`],
    twice: [`"sha256:${hex}"`, `"sha256:${hex}"`],
  };
  for (const v of etag[c.etag]) headers.push(['etag', v]);
  if (c.generation !== null) headers.push(['x-murmur-generation', c.generation]);
  return { status: 200, headers, body, framing: c.framing, ending: c.ending };
}

/** The card is readable and names a session; the token goes only if that is the token's issuer. */
function cardSaysIssuer(c: Case): 'unreachable' | 'mismatch' | 'match' {
  if (c.card === 'not-json' || c.card === 'status-404' || c.card === 'oversized') return 'unreachable';
  return c.card === 'honest' && c.issuer === 'card' ? 'match' : 'mismatch';
}

function inbox(): string[] {
  const dir = join(fetcher.workdir, 'peer-in');
  return existsSync(dir) ? readdirSync(dir).sort() : [];
}

async function runCase(c: Case): Promise<void> {
  const token = tokenFor(c);
  const peer = await hostileServer((r) => {
    if (r.target === '/.well-known/agent-card.json') {
      const body = cardBody(c.card, peer.port);
      return {
        status: c.card === 'status-404' ? 404 : 200,
        headers: [['content-type', 'application/json']],
        body,
        framing: { kind: 'exact' },
        ending: 'close',
      };
    }
    return redeemAnswer(c);
  });
  try {
    const before = inbox();
    let result: Record<string, unknown> | null = null;
    let refusal: { code: string; message: string } | null = null;
    try {
      result = (await callTool(fetcher.launched.session, 'fetch-peer-file', { peer: peer.address, handle: token })) as unknown as Record<string, unknown>;
    } catch (error) {
      const e = error as { code?: unknown; message?: unknown };
      if (typeof e.code !== 'string') throw error;
      refusal = { code: e.code, message: String(e.message) };
    }
    const label = `${JSON.stringify({ ...c, name: c.name })} → ${refusal ? refusal.code : 'ok'} ${refusal?.message ?? ''}`;
    const id = sha256Hex(token).slice(0, 16);
    const stored = storedName(token, c.issuer === 'no-payload' ? null : c.name);
    const lines = tail.next().filter((l) => l.event_type === 'peer_file_fetch');
    expect(lines.length, `${label}: one peer_file_fetch line`).toBe(1);
    const line = lines[0]!;
    expect(line, label).toMatchObject({ peer: peer.address, handle_id: id });
    const after = inbox();
    expect(
      after.filter((n) => n.startsWith('.')),
      `${label}: no temporary file left`,
    ).toEqual([]);

    // Where the token may go: only a redeem, only to its issuer.
    const said = cardSaysIssuer(c);
    const redeems = peer.requests.filter((r) => r.target !== '/.well-known/agent-card.json');
    const [, payloadSeg, macSeg] = token.split('.');
    if (said !== 'match') {
      expect(refusal?.code, label).toBe(said === 'unreachable' ? 'peer_unreachable' : 'issuer_mismatch');
      expect(redeems, `${label}: no redeem was sent`).toEqual([]);
      const carried = peer.bytes().toString('latin1');
      expect(carried.includes(macSeg!) || carried.includes(payloadSeg!), `${label}: the token reached the server`).toBe(false);
      expect(after, `${label}: nothing landed`).toEqual(before);
      expect(line, label).toMatchObject({ stored_path: null, bytes: null, sha256: null, outcome: refusal!.code });
    } else {
      expect(redeems.length, `${label}: one redeem`).toBe(1);
      expect(redeems[0]!.method, label).toBe('GET');
      expect(redeems[0]!.target, label).toBe(`/resources/peer/${token}`);
      expect(redeems[0]!.head.toLowerCase(), label).toContain(`\r\nx-murmur-audience: ${fetcher.audience}`);
      const expected = fetchOutcome(redeemAnswer(c), CAP);
      if (expected.ok) {
        expect(refusal, label).toBeNull();
        expect(result, label).toEqual({
          path: stored,
          bytes: expected.bytes.length,
          sha256: sha256Hex(expected.bytes),
          peer: peer.address,
          generation: expected.generation,
        });
        expect(after, `${label}: the file landed`).toEqual([...new Set([...before, stored.slice('peer-in/'.length)])].sort());
        expect(readFileSync(join(fetcher.workdir, stored)).equals(expected.bytes), `${label}: the landed bytes`).toBe(true);
        expect(line, label).toMatchObject({
          stored_path: traced(stored),
          bytes: expected.bytes.length,
          sha256: sha256Hex(expected.bytes),
          outcome: 'ok',
          reason: null,
        });
      } else {
        expect(refusal?.code, label).toBe(expected.code);
        expect(after, `${label}: nothing landed`).toEqual(before);
        expect(line, label).toMatchObject({ stored_path: null, bytes: null, sha256: null, outcome: expected.code });
      }
    }
    if (refusal) {
      expect(line.reason, label).toBe(refusal.message);
      expect(refusal.message, label).not.toContain(macSeg!);
    }
    expect(fetcher.trace(), label).not.toContain(macSeg!);
  } finally {
    await peer.close();
  }
}

// ── Generators ───────────────────────────────────────────────────────────────

const NAMES = ['report.md', 'a/b/c.txt', '..', '.', '', 'x'.repeat(130), 'naïve résumé.pdf', 'sp ace\u202e.exe', 'dir/', 'mh1.e30.e30'];
const STATUSES = [200, 201, 203, 206, 301, 302, 400, 403, 404, 410, 413, 500, 503];
const REFUSAL_CODES = [...PEER_PLANE_CODES, 'peer_not_allowed', 'issuer_mismatch', 'etag_mismatch', 'peer_unreachable', 'ok', 'http_200', '', 'NOT_FOUND'];

const refusalBody: fc.Arbitrary<RefusalBody> = fc.oneof(
  fc.constantFrom(...REFUSAL_CODES).map((code): RefusalBody => ({ kind: 'code', code })),
  fc.constant<RefusalBody>({ kind: 'not-json' }),
  fc.constantFrom(...PEER_PLANE_CODES).map((code): RefusalBody => ({ kind: 'long', code })),
);

const caseArb: fc.Arbitrary<Case> = fc
  .record({
    card: fc.oneof(
      { weight: 4, arbitrary: fc.constant<CardLie>('honest') },
      {
        weight: 3,
        arbitrary: fc.constantFrom<CardLie>('other-session', 'foreign-uri', 'no-session', 'session-not-string', 'not-json', 'status-404', 'oversized'),
      },
    ),
    issuer: fc.oneof({ weight: 4, arbitrary: fc.constant<TokenIssuer>('card') }, { weight: 1, arbitrary: fc.constantFrom<TokenIssuer>('other', 'no-payload') }),
    name: fc.constantFrom(...NAMES),
    status: fc.oneof({ weight: 3, arbitrary: fc.constant(200) }, { weight: 2, arbitrary: fc.constantFrom(...STATUSES) }),
    refusal: refusalBody,
    size: fc.constantFrom(...SIZES),
    seed: fc.integer(),
    etag: fc.oneof(
      { weight: 3, arbitrary: fc.constant<EtagLie>('delivered') },
      { weight: 3, arbitrary: fc.constantFrom<EtagLie>('sent', 'other', 'absent', 'unquoted', 'weak', 'upper', 'twice') },
    ),
    generation: fc.constantFrom<string | null>(null, '0', '7', '999999999999999', '1000000000000000', '-1', '1e3', '0x10', ' 7', 'seven', ''),
  })
  .chain((c) => framingAndEnding(c.size, CAP, 20_000).map((fe) => ({ ...c, ...fe })));

/** Fixed cases in every run: each card lie, each token lie, and each redeem lie at least once. */
function examples(): Array<[Case]> {
  const base: Case = {
    card: 'honest',
    issuer: 'card',
    name: 'report.md',
    status: 200,
    refusal: { kind: 'code', code: 'not_found' },
    size: 100,
    seed: 1,
    etag: 'delivered',
    framing: { kind: 'exact' },
    ending: 'close',
    generation: '4',
  };
  const out: Case[] = [base];
  for (const card of ['other-session', 'foreign-uri', 'no-session', 'session-not-string', 'not-json', 'status-404', 'oversized'] as const)
    out.push({ ...base, card });
  for (const issuer of ['other', 'no-payload'] as const) out.push({ ...base, issuer });
  for (const etag of ['sent', 'other', 'absent', 'weak', 'twice'] as const) out.push({ ...base, etag, framing: { kind: 'short', by: 10 } });
  out.push({ ...base, size: 65_536, framing: { kind: 'short', by: 7 } });
  out.push({ ...base, size: 65_536, framing: { kind: 'long', by: 10 }, ending: 'reset' });
  out.push({ ...base, size: CAP, framing: { kind: 'long', by: 1 } });
  out.push({ ...base, size: CAP + 1, framing: { kind: 'none' } });
  out.push({ ...base, size: CAP + 1, framing: { kind: 'short', by: 1 } });
  out.push({ ...base, size: 100_000, framing: { kind: 'chunked' }, ending: 'keep-alive' });
  out.push({ ...base, size: 65_536, framing: { kind: 'chunked-cut' }, ending: 'reset' });
  out.push({ ...base, generation: '1e3' });
  for (const status of [206, 302, 500]) out.push({ ...base, status, refusal: { kind: 'code', code: 'peer_not_allowed' } });
  out.push({ ...base, status: 403, refusal: { kind: 'code', code: 'handle_not_valid' } });
  out.push({ ...base, status: 403, refusal: { kind: 'long', code: 'handle_not_valid' } });
  out.push({ ...base, name: '..' });
  return out.map((c) => [c]);
}

describe('fetch-peer-file against a lying peer and a lying card', () => {
  fuzzIt({
    name: 'peer-lies',
    file: import.meta.filename,
    runs: 150,
    timeoutMs: 60_000,
    examples,
    // Invariant: the result or refusal code is the model's; exactly the delivered bytes land, or nothing does; one peer_file_fetch line says so; the token reaches the server only in a redeem, only when the card names its issuer; no token in a result, refusal or the trace.
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
