// Interop with the reference runtime's handle code (shared/seeds/peer-handoff.rs.txt), case by case
// where a differential run found the two apart (issue 37). Every expected value below was printed by
// the reference itself (its audience_from_card, mint and serde_json reading of HandlePayload, built
// with Debian's Rust; the handle_id by sha256sum), and is written here as a literal: none of it is
// computed by this code.
//   - audiences: Rust's `trim` strips Unicode White_Space (U+0085 yes, U+FEFF no), JavaScript's does
//     the opposite; the same card must give the same audience on both sides, or no MAC verifies;
//   - `exp` above 2^53-1: the reference saturates a huge ttl to 2^64-1, and mints and verifies such
//     handles; this server must read them (the fetcher reads `iss` from them) and compare exactly;
//   - how a payload is read: serde_json into `v: u8`, `exp: u64`, three strings.
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { audienceFromCard, ownAudience, trimWhiteSpace } from '../../src/handle/audience.js';
import { hmacSha256WithKeyForTests } from '../../src/handle/key.js';
import { readUnverified, sealRawForTests, verifyTokenForTests } from '../../src/handle/token.js';
import { handleId } from '../../src/redact.js';
import { fetchPeerFile } from '../../src/tools/fetch-peer-file.js';
import { openCapsule, type Capsule } from '../helpers/capsule.js';
import { listenLoopback } from '../helpers/loopback.js';
import { rawGet } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

const card = (name: string) => ({ name, supportedInterfaces: [{ url: 'http://127.0.0.1:41234', protocolBinding: 'JSONRPC', protocolVersion: '0.3' }] });

describe("audiences are trimmed as the reference's str::trim trims (Unicode White_Space)", () => {
  // The reference's audience_from_card for a card of each name and url http://127.0.0.1:41234.
  it.each([
    ['\u0085Reporter\u0085', 'reporter@127.0.0.1:41234'],
    ['\uFEFFReporter\uFEFF', '\uFEFFreporter\uFEFF@127.0.0.1:41234'],
    [' Reporter\u3000', 'reporter@127.0.0.1:41234'],
  ])('a card named %j gives %j, minting and asserting alike', (name, expected) => {
    expect(audienceFromCard(card(name))).toBe(expected);
    expect(ownAudience(name, 'http://127.0.0.1:41234')).toBe(expected);
  });

  it('a name of nothing but U+0085 is no name; one of U+FEFF is one', () => {
    expect(() => audienceFromCard(card('\u0085\u2028'))).toThrow(/carries no 'name'/);
    expect(audienceFromCard(card('\uFEFF'))).toBe('\uFEFF@127.0.0.1:41234');
  });

  it('trimWhiteSpace is exactly the White_Space set at both ends', () => {
    const ws = '\t\n\u000B\u000C\r \u0085\u00A0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200A\u2028\u2029\u202F\u205F\u3000';
    expect(trimWhiteSpace(`${ws}a${ws}b${ws}`)).toBe(`a${ws}b`);
    // Not White_Space: BOM, zero-width space, Mongolian vowel separator.
    for (const c of ['\uFEFF', '\u200B', '\u180E']) expect(trimWhiteSpace(`${c}a${c}`)).toBe(`${c}a${c}`);
  });
});

// The reference's mint under the key 00 01 02 … 1f, for the audience reader@127.0.0.1:41234, of
// {v:1, iss:"ses_rust", p:"report.md", n:"0011…eeff"} with a ttl of u64::MAX seconds (saturated).
const RUST_KEY = Buffer.from(Array.from({ length: 32 }, (_, i) => i));
const RUST_JSON = '{"v":1,"iss":"ses_rust","p":"report.md","exp":18446744073709551615,"n":"00112233445566778899aabbccddeeff"}';
const RUST_TOKEN =
  'mh1.eyJ2IjoxLCJpc3MiOiJzZXNfcnVzdCIsInAiOiJyZXBvcnQubWQiLCJleHAiOjE4NDQ2NzQ0MDczNzA5NTUxNjE1LCJuIjoiMDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmYifQ.DR-9gLSRiqu1N-pxBoMDSF6g1Dfo_dB5ppFjWQpIp5M';
const RUST_HANDLE_ID = 'c3f643029e693a5d';
const RUST_AUDIENCE = 'reader@127.0.0.1:41234';

describe('an exp above 2^53-1, as the reference mints it', () => {
  it("is byte for byte the reference's token, and its issuer is read", () => {
    const [, segment, mac] = RUST_TOKEN.split('.');
    expect(Buffer.from(segment!, 'base64url').toString()).toBe(RUST_JSON);
    expect(hmacSha256WithKeyForTests(RUST_KEY, Buffer.from(`murmur-peer-handle-v1\u001f${segment}\u001f${RUST_AUDIENCE}`)).toString('base64url')).toBe(mac);
    expect(handleId(RUST_TOKEN)).toBe(RUST_HANDLE_ID);
    const read = readUnverified(RUST_TOKEN);
    expect(read?.payload).toMatchObject({ v: 1, iss: 'ses_rust', p: 'report.md', n: '00112233445566778899aabbccddeeff' });
  });

  it('fetch-peer-file sends it to the peer whose card names its issuer (not issuer_mismatch)', async () => {
    const workdir = tempDir();
    const traceDir = tempDir();
    const bytes = Buffer.from('bytes from a rust capsule');
    const etag = `"sha256:${createHash('sha256').update(bytes).digest('hex')}"`;
    const seen: string[] = [];
    const server = createServer((req, res) => {
      seen.push(req.url ?? '');
      if (req.url === '/.well-known/agent-card.json') {
        const port = (server.address() as { port: number }).port;
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            ...card('rust'),
            supportedInterfaces: [{ url: `http://127.0.0.1:${port}`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }],
            capabilities: { extensions: [{ uri: 'urn:murmur:capsule:v1', params: { planes: ['peer_files'], sessionId: 'ses_rust' } }] },
          }),
        );
        return;
      }
      res.writeHead(200, { 'content-type': 'application/octet-stream', etag, 'x-murmur-generation': '0' });
      res.end(bytes);
    });
    const peer = await listenLoopback(server);
    const reader = await openCapsule({ workdir, traceDir, yaml: 'name: reader\nversion: "1"\ncapabilities:\n  peer_fetch:\n    allow: ["127.0.0.1"]\n' });
    try {
      const landed = await fetchPeerFile(reader.session, { peer: peer.address, handle: RUST_TOKEN });
      expect(landed).toMatchObject({ path: `peer-in/${RUST_HANDLE_ID}-report.md`, bytes: bytes.length });
      expect(seen).toEqual(['/.well-known/agent-card.json', `/resources/peer/${RUST_TOKEN}`]);
    } finally {
      await reader.close();
      removeTree(workdir);
      removeTree(traceDir);
    }
  });
});

describe('a payload is read as the reference reads it', () => {
  let workdir: string;
  let traceDir: string;
  let issuer: Capsule;
  beforeAll(async () => {
    workdir = tempDir();
    traceDir = tempDir();
    makeTree(workdir, ['out/report.md: known bytes']);
    issuer = await openCapsule({ workdir, traceDir, yaml: 'name: reporter\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n' });
  });
  afterAll(async () => {
    await issuer.close();
    removeTree(workdir);
    removeTree(traceDir);
  });
  const seal = (json: string) => sealRawForTests(issuer.session.key!, Buffer.from(json), RUST_AUDIENCE);
  // `@ISS@` stands for the issuer's session id, known only once it is open.
  const template = (exp: string, extra = '') => `{"v":1,"iss":"@ISS@","p":"report.md","exp":${exp},"n":"00"${extra}}`;
  const payload = (exp: string, extra = '') => template(exp, extra).replace('@ISS@', issuer.session.sessionId);

  it('a saturated exp redeems over HTTP (it was malformed_handle)', async () => {
    const res = await rawGet(issuer.url, `/resources/peer/${seal(payload('18446744073709551615'))}`, [['x-murmur-audience', RUST_AUDIENCE]]);
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('known bytes');
  });

  it('an exp just above 2^53 is compared exactly with the clock', () => {
    const key = issuer.session.key!;
    const id = issuer.session.sessionId;
    // 2^53 + 1 rounds to 2^53 as a number: only an exact comparison sees it is later than 2^53.
    expect(verifyTokenForTests(key, seal(payload('9007199254740993')), RUST_AUDIENCE, id, 2 ** 53)).toMatchObject({ ok: true });
    expect(verifyTokenForTests(key, seal(payload('9007199254740992')), RUST_AUDIENCE, id, 2 ** 53)).toMatchObject({ ok: false, reason: 'expired' });
    expect(verifyTokenForTests(key, seal(payload('18446744073709551615')), RUST_AUDIENCE, id, Date.now())).toMatchObject({ ok: true });
  });

  // What serde_json::from_str::<HandlePayload> answered for each (Err: this server's malformed).
  it.each([
    ['a duplicate field', template('18446744073709551615', ',"exp":1'), 'malformed'],
    ['a BOM before the object', `\uFEFF${template('18446744073709551615')}`, 'malformed'],
    ['exp with a fraction', template('1.0'), 'malformed'],
    ['exp with an exponent', template('1e15'), 'malformed'],
    ['exp of 2^64', template('18446744073709551616'), 'malformed'],
    ['a negative exp', template('-1'), 'malformed'],
    ['v of 1.0', template('18446744073709551615').replace('"v":1', '"v":1.0'), 'malformed'],
    ['an unknown extra field', template('18446744073709551615', ',"x":{"exp":1,"exp":2}'), 'ok'],
  ])('%s: %s', (_what, json, outcome) => {
    const result = verifyTokenForTests(
      issuer.session.key!,
      seal(json.replace('@ISS@', issuer.session.sessionId)),
      RUST_AUDIENCE,
      issuer.session.sessionId,
      Date.now(),
    );
    expect(result.ok ? 'ok' : result.reason).toBe(outcome);
  });
});
