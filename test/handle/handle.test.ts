/**
 * mh1 tokens: mint and verify, the fixed check order and its three outcomes, the strict
 * base64url every segment is judged by, handle_id, redaction at the trace boundary, and the
 * name a fetched file lands under. Ported case by case from the reference runtime's tests, plus
 * the canonical-encoding cases this implementation adds.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { hmacSha256WithKeyForTests, InstanceKey } from '../../src/handle/key.js';
import {
  checkShape,
  decodeBase64UrlStrict,
  type HandlePayload,
  MAC_DOMAIN,
  mintToken,
  randomNonceHex,
  readUnverified,
  sealRawForTests,
  verifyTokenForTests,
} from '../../src/handle/token.js';
import { handleId, redactHandles, redactHandlesDeep } from '../../src/redact.js';
import { storedPathFor } from '../../src/tools/fetch-peer-file.js';

const keys: InstanceKey[] = [];
function newKey(): InstanceKey {
  const key = InstanceKey.generate();
  keys.push(key);
  return key;
}
afterAll(() => {
  for (const key of keys) key.destroy();
});

const NOW = 1_755_950_000_000;
const IN_AN_HOUR = NOW + 3_600_000;

function payloadFor(path: string, session: string, exp: number): HandlePayload {
  return { v: 1, iss: session, p: path, exp, n: '0123456789abcdef0123456789abcdef' };
}

/**
 * Substitutes the first character of the token's `nth` dot-separated segment. The first, never
 * the last: the last character carries the padding bits, and changing it can make the segment
 * non-canonical, which is a shape refusal rather than the MAC refusal these tests are after.
 */
function tamperSegment(token: string, nth: number): string {
  const segments = token.split('.');
  const segment = segments[nth] as string;
  segments[nth] = (segment[0] === 'A' ? 'B' : 'A') + segment.slice(1);
  return segments.join('.');
}

const verify = (key: InstanceKey, token: string, audience = 'a@b', session = 'ses_1') => verifyTokenForTests(key, token, audience, session, NOW);

describe('mint and verify', () => {
  it('round-trips a minted handle', () => {
    const key = newKey();
    const payload = payloadFor('report.md', 'ses_1', IN_AN_HOUR);
    const token = mintToken(key, payload, 'reporter@localhost:41234');
    expect(token.startsWith('mh1.')).toBe(true);
    expect(token.split('.')).toHaveLength(3);
    expect(verify(key, token, 'reporter@localhost:41234')).toEqual({ ok: true, payload });
  });

  it('writes compact JSON with the keys in contract order', () => {
    const key = newKey();
    // Built in a scrambled order, on purpose.
    const scrambled = { n: 'ab', exp: 5, p: 'x/y.md', iss: 'ses_1', v: 1 };
    const token = mintToken(key, scrambled, 'a@b');
    const json = Buffer.from(token.split('.')[1] as string, 'base64url').toString('utf8');
    expect(json).toBe('{"v":1,"iss":"ses_1","p":"x/y.md","exp":5,"n":"ab"}');
  });

  it('MACs exactly domain ‖ 0x1f ‖ payload-base64url ‖ 0x1f ‖ audience', () => {
    // The instance key cannot be read, so the layout is checked through the equivalence
    // sealRawForTests(key) ⇔ HMAC(same bytes): the parts hashed by InstanceKey are the concatenation.
    const key = newKey();
    const json = Buffer.from('{"v":1}');
    const macInput = (payloadSegment: string, audience: string) =>
      Buffer.concat([Buffer.from(MAC_DOMAIN), Buffer.from([0x1f]), Buffer.from(payloadSegment), Buffer.from([0x1f]), Buffer.from(audience)]);
    // Audiences beyond ASCII too: each part is UTF-8 on its own (a lone surrogate is U+FFFD's bytes).
    for (const audience of ['a@b', 'ünï🦊@h:1', '\udc00lone\ud800@h:2', '']) {
      const token = sealRawForTests(key, json, audience);
      const [, payloadSegment, macSegment] = token.split('.') as [string, string, string];
      expect(payloadSegment).toBe(json.toString('base64url'));
      expect(Buffer.from(macSegment, 'base64url'), audience).toEqual(key.hmacSha256([macInput(payloadSegment, audience)]));
    }
    const input = macInput(json.toString('base64url'), 'a@b');
    expect(MAC_DOMAIN).toBe('murmur-peer-handle-v1');
    // And the core is a real HMAC-SHA256 (the RFC vectors live in peer-key.test.ts).
    expect(hmacSha256WithKeyForTests(Buffer.from('k'), input)).toHaveLength(32);
  });

  it('uses only url-safe, unpadded base64', () => {
    const key = newKey();
    const token = mintToken(key, payloadFor('a/b/c.md', 'ses_padding', IN_AN_HOUR), 'x@y');
    for (const segment of token.split('.').slice(1)) {
      expect(segment).toMatch(/^[A-Za-z0-9_-]+$/);
    }
  });

  it('refuses to mint a payload that could never verify', () => {
    const key = newKey();
    const bad: HandlePayload[] = [
      { ...payloadFor('a', 'ses_1', IN_AN_HOUR), v: 2 },
      { ...payloadFor('a', 'ses_1', IN_AN_HOUR), exp: 1.5 },
      { ...payloadFor('a', 'ses_1', IN_AN_HOUR), exp: -1 },
      { ...payloadFor('a', 'ses_1', IN_AN_HOUR), exp: Number.NaN },
    ];
    for (const payload of bad) expect(() => mintToken(key, payload, 'a@b')).toThrow();
  });

  it('refuses a tampered payload as not valid', () => {
    const key = newKey();
    const token = mintToken(key, payloadFor('report.md', 'ses_1', IN_AN_HOUR), 'a@b');
    expect(verify(key, tamperSegment(token, 1))).toEqual({ ok: false, reason: 'not_valid' });
  });

  it('refuses a tampered MAC as not valid', () => {
    const key = newKey();
    const token = mintToken(key, payloadFor('report.md', 'ses_1', IN_AN_HOUR), 'a@b');
    expect(verify(key, tamperSegment(token, 2))).toEqual({ ok: false, reason: 'not_valid' });
  });

  it('refuses the wrong audience as not valid', () => {
    const key = newKey();
    const token = mintToken(key, payloadFor('report.md', 'ses_1', IN_AN_HOUR), 'a@b');
    expect(verify(key, token, 'attacker@localhost:1')).toEqual({ ok: false, reason: 'not_valid' });
    // Audiences are compared as bytes: normalising them is the caller's job, before the MAC.
    expect(verify(key, token, 'A@B')).toEqual({ ok: false, reason: 'not_valid' });
    expect(verify(key, token, 'a@b ')).toEqual({ ok: false, reason: 'not_valid' });
  });

  it('gives every refusal cause the same undivided answer', () => {
    const key = newKey();
    const other = newKey();
    const token = mintToken(key, payloadFor('report.md', 'ses_1', IN_AN_HOUR), 'a@b');
    const causes = [
      verify(key, tamperSegment(token, 1)),
      verify(key, tamperSegment(token, 2)),
      verify(other, token),
      verify(key, token, 'attacker@localhost:1'),
      verify(newKey(), mintToken(key, payloadFor('report.md', 'ses_other', IN_AN_HOUR), 'a@b')),
    ];
    for (const cause of causes) expect(cause).toEqual({ ok: false, reason: 'not_valid' });
  });

  it("refuses another instance's handle as not valid", () => {
    const one = newKey();
    const two = newKey();
    const token = mintToken(one, payloadFor('report.md', 'ses_1', IN_AN_HOUR), 'a@b');
    expect(verify(two, token)).toEqual({ ok: false, reason: 'not_valid' });
  });

  it('refuses a destroyed key loudly rather than verifying anything', () => {
    const key = InstanceKey.generate();
    const token = mintToken(key, payloadFor('report.md', 'ses_1', IN_AN_HOUR), 'a@b');
    key.destroy();
    expect(() => verify(key, token)).toThrow(/destroyed/);
  });

  it('refuses a foreign issuer as not valid, not with a code of its own', () => {
    const key = newKey();
    const token = mintToken(key, payloadFor('report.md', 'ses_other', IN_AN_HOUR), 'a@b');
    expect(verify(key, token)).toEqual({ ok: false, reason: 'not_valid' });
  });

  it('reports expiry only once the MAC verified, at exp <= now', () => {
    const key = newKey();
    for (const exp of [NOW - 1, NOW]) {
      const token = mintToken(key, payloadFor('report.md', 'ses_1', exp), 'a@b');
      // The MAC verified, so the payload comes back with the verdict (the redeem traces its path).
      expect(verify(key, token)).toEqual({ ok: false, reason: 'expired', payload: payloadFor('report.md', 'ses_1', exp) });
      // An expired handle presented with the wrong audience is not told it expired.
      expect(verify(key, token, 'x@y')).toEqual({ ok: false, reason: 'not_valid' });
    }
    const fresh = mintToken(key, payloadFor('report.md', 'ses_1', NOW + 1), 'a@b');
    expect(verify(key, fresh).ok).toBe(true);
  });

  it('checks the issuer before the expiry', () => {
    const key = newKey();
    const token = mintToken(key, payloadFor('report.md', 'ses_other', NOW - 1), 'a@b');
    expect(verify(key, token)).toEqual({ ok: false, reason: 'not_valid' });
  });
});

describe('malformed tokens', () => {
  const MAC = Buffer.alloc(32, 7).toString('base64url');

  it('refuses every malformed shape', () => {
    const key = newKey();
    for (const candidate of [
      '',
      'report.md',
      'mh1',
      'mh1.',
      'mh1..',
      'mh1.abc',
      'mh1.abc.def.ghi',
      'mh2.YWJj.YWJj',
      `MH1.YWJj.${MAC}`,
      'mh1.!!!.YWJj',
      'mh1.YWJj.!!!',
      'mh1.YWJj.YWJj', // a MAC that is not 32 bytes
      'mh1.YWJj.', // empty MAC
      `mh1..${MAC}`, // empty payload
      ` mh1.YWJj.${MAC}`,
      `mh1.YWJj.${MAC} `,
    ]) {
      expect(checkShape(candidate), candidate).toBe(false);
      expect(verify(key, candidate), candidate).toEqual({ ok: false, reason: 'malformed' });
    }
    expect(checkShape(`mh1.YWJj.${MAC}`)).toBe(true);
  });

  it('refuses padding, the standard alphabet and foreign characters', () => {
    for (const payload of ['YWI=', 'YQ==', 'YW+j', 'YW/j', 'YW j', 'YW\nj', 'YWé', 'YW.j']) {
      expect(checkShape(`mh1.${payload}.${MAC}`), JSON.stringify(payload)).toBe(false);
    }
    // The MAC segment too: padded to a multiple of four, it is refused.
    expect(checkShape(`mh1.YWJj.${MAC}=`)).toBe(false);
  });

  it('refuses a non-canonical final character (non-zero trailing bits)', () => {
    // "YWI" encodes "ab"; "YWJ" differs only in the final character's 2 unused bits.
    expect(decodeBase64UrlStrict('YWI')).toEqual(Buffer.from('ab'));
    expect(decodeBase64UrlStrict('YWJ')).toBeNull();
    // "YQ" encodes "a"; "YR" sets one of its 4 unused bits.
    expect(decodeBase64UrlStrict('YQ')).toEqual(Buffer.from('a'));
    expect(decodeBase64UrlStrict('YR')).toBeNull();
    // Node would decode all of these; that is why the codec is our own.
    expect(Buffer.from('YWJ', 'base64url')).toEqual(Buffer.from('ab'));
    expect(checkShape(`mh1.YWJ.${MAC}`)).toBe(false);
    expect(checkShape(`mh1.YR.${MAC}`)).toBe(false);
    // A 32-byte MAC is 43 characters, with 2 unused bits in the last one.
    const last = MAC[MAC.length - 1] as string;
    const bumped = MAC.slice(0, -1) + String.fromCharCode(last.charCodeAt(0) + 1);
    expect(checkShape(`mh1.YWJj.${bumped}`)).toBe(false);
  });

  it('refuses a length of 1 mod 4', () => {
    expect(decodeBase64UrlStrict('Y')).toBeNull();
    expect(decodeBase64UrlStrict('YWJjZ')).toBeNull();
    expect(checkShape(`mh1.YWJjZ.${MAC}`)).toBe(false);
  });

  it('decodes every canonical encoding exactly', () => {
    for (let length = 1; length < 70; length++) {
      const bytes = Buffer.from(Array.from({ length }, (_, i) => (i * 37 + length) & 0xff));
      expect(decodeBase64UrlStrict(bytes.toString('base64url'))).toEqual(bytes);
    }
    expect(decodeBase64UrlStrict('')).toBeNull();
    expect(decodeBase64UrlStrict('_-_-')).toEqual(Buffer.from([0xff, 0xef, 0xfe]));
  });

  it('calls a validly MACed non-JSON or wrong-version payload malformed', () => {
    const key = newKey();
    for (const json of [
      'not json',
      '{"v":2,"iss":"ses_1","p":"a","exp":99999999999999,"n":"00"}',
      '{"v":"1","iss":"ses_1","p":"a","exp":99999999999999,"n":"00"}',
      '{"v":1,"iss":"ses_1","p":"a","exp":"99999999999999","n":"00"}',
      '{"v":1,"iss":"ses_1","p":"a","exp":99999999999999}',
      '{"v":1,"iss":1,"p":"a","exp":99999999999999,"n":"00"}',
      '{"v":1,"iss":"ses_1","p":"a","exp":1.5,"n":"00"}',
      '[1]',
      'null',
    ]) {
      const token = sealRawForTests(key, Buffer.from(json), 'a@b');
      expect(checkShape(token), json).toBe(true);
      expect(verify(key, token), json).toEqual({ ok: false, reason: 'malformed' });
    }
    // Invalid UTF-8 is not JSON either.
    const token = sealRawForTests(key, Buffer.from([0x7b, 0xff, 0x7d]), 'a@b');
    expect(verify(key, token)).toEqual({ ok: false, reason: 'malformed' });
  });

  it('checks the MAC before reading the payload', () => {
    const key = newKey();
    const token = sealRawForTests(key, Buffer.from('not json'), 'a@b');
    // Not JSON, and not ours for this audience: the MAC answer comes first.
    expect(verify(key, token, 'x@y')).toEqual({ ok: false, reason: 'not_valid' });
  });
});

describe('the audience', () => {
  it('is covered by the MAC but not carried in the token', () => {
    const key = newKey();
    const payload = payloadFor('report.md', 'ses_1', IN_AN_HOUR);
    const one = mintToken(key, payload, 'reporter@localhost:1');
    const two = mintToken(key, payload, 'reporter@localhost:2');
    expect(one.split('.')[1]).toBe(two.split('.')[1]);
    expect(one).not.toBe(two);
    const decoded = Buffer.from(one.split('.')[1] as string, 'base64url').toString('utf8');
    expect(decoded).not.toContain('reporter@localhost:1');
    expect(decoded).not.toContain('reporter');
  });
});

describe('nonces and handle ids', () => {
  it('gives two handles for the same file and audience distinct nonces and tokens', () => {
    const key = newKey();
    const a = randomNonceHex();
    const b = randomNonceHex();
    expect(a).toMatch(/^[0-9a-f]{32}$/);
    expect(b).toMatch(/^[0-9a-f]{32}$/);
    expect(a).not.toBe(b);
    const first = mintToken(key, { ...payloadFor('report.md', 'ses_1', IN_AN_HOUR), n: a }, 'a@b');
    const second = mintToken(key, { ...payloadFor('report.md', 'ses_1', IN_AN_HOUR), n: b }, 'a@b');
    expect(first).not.toBe(second);
  });

  it('makes a handle_id of sixteen lowercase hex characters, stable per token', () => {
    const id = handleId('mh1.abc.def');
    expect(id).toMatch(/^[0-9a-f]{16}$/);
    expect(handleId('mh1.abc.def')).toBe(id);
    expect(handleId('mh1.abc.deg')).not.toBe(id);
    // The first 16 hex of sha256 of the token text.
    expect(handleId('abc')).toBe('ba7816bf8f01cfea');
  });
});

/** A peer's payload as fetch-peer-file reads it: never trusted, and null for what is not a handle. */
const payloadUnverified = (token: string) => readUnverified(token)?.payload ?? null;

describe('readUnverified', () => {
  it("reads a peer's payload without a key, and nothing that is not a handle", () => {
    const key = newKey();
    const payload = payloadFor('dir/report.md', 'ses_peer', IN_AN_HOUR);
    const token = mintToken(key, payload, 'a@b');
    expect(payloadUnverified(token)).toEqual(payload);
    // The MAC is not checked: that is the point, and why the result decides nothing.
    expect(payloadUnverified(tamperSegment(token, 2))).toEqual(payload);
    expect(payloadUnverified('report.md')).toBeNull();
    expect(payloadUnverified(sealRawForTests(key, Buffer.from('not json'), 'a@b'))).toBeNull();
  });

  it('readUnverified is checkShape and the payload in one pass, never disagreeing with either', () => {
    const key = newKey();
    const token = mintToken(key, payloadFor('dir/report.md', 'ses_peer', IN_AN_HOUR), 'a@b');
    const candidates = [
      token,
      tamperSegment(token, 2),
      `${token}/x`,
      'report.md',
      'mh1.a.b',
      sealRawForTests(key, Buffer.from('not json'), 'a@b'),
      sealRawForTests(key, Buffer.from('{"v":2}'), 'a@b'),
    ];
    for (const candidate of candidates) {
      const read = readUnverified(candidate);
      expect(read !== null, candidate).toBe(checkShape(candidate));
      expect(read?.payload ?? null, candidate).toEqual(
        candidate === token || candidate === tamperSegment(token, 2) ? payloadFor('dir/report.md', 'ses_peer', IN_AN_HOUR) : null,
      );
    }
    expect(readUnverified('mh1.a.b')).toBeNull();
    expect(readUnverified(sealRawForTests(key, Buffer.from('not json'), 'a@b'))).toEqual({ payload: null });
  });
});

describe('redaction at the trace boundary', () => {
  const key = InstanceKey.generate();
  afterAll(() => key.destroy());
  const token = mintToken(key, payloadFor('report.md', 'ses_1', IN_AN_HOUR), 'a@b');
  const id = handleId(token);

  it('replaces a token in a sentence, leaving the full stop', () => {
    const redacted = redactHandles(`fetching ${token} from the peer.`);
    expect(redacted).toBe(`fetching <handle:${id}> from the peer.`);
    expect(redacted).not.toContain('mh1.');
    expect(redactHandles(`Here is the handle: ${token}.`)).toBe(`Here is the handle: <handle:${id}>.`);
  });

  it('replaces two tokens, one at the very end', () => {
    expect(redactHandles(`${token} and ${token}`)).toBe(`<handle:${id}> and <handle:${id}>`);
    const other = mintToken(key, payloadFor('other.md', 'ses_1', IN_AN_HOUR), 'a@b');
    expect(redactHandles(`${token},${other}`)).toBe(`<handle:${id}>,<handle:${handleId(other)}>`);
  });

  it('leaves text that only mentions the tag untouched', () => {
    const plain = ['no handle here, just mh1 as a word', 'nothing at all', 'mh1.', 'mh1.abc', ''];
    for (const text of [...plain, 'mh1..x', 'mh1.abc.', 'MH1.abc.def']) {
      expect(redactHandles(text)).toBe(text);
    }
  });

  it('handles non-ASCII around a token', () => {
    expect(redactHandles(`— ${token} —`)).toBe(`— <handle:${id}> —`);
    expect(redactHandles(`«${token}»`)).toBe(`«<handle:${id}>»`);
  });

  it('redacts anything token-shaped, even if it would not verify', () => {
    expect(redactHandles('see mh1.abc.def.')).toBe(`see <handle:${handleId('mh1.abc.def')}>.`);
    // Three segments exactly: a fourth is left outside the token.
    expect(redactHandles('mh1.abc.def.ghi')).toBe(`<handle:${handleId('mh1.abc.def')}>.ghi`);
    // Inside a URL path or JSON text.
    expect(redactHandles(`GET /resources/peer/${token}?x=1`)).toBe(`GET /resources/peer/<handle:${id}>?x=1`);
    expect(redactHandles(JSON.stringify({ handle: token }))).toBe(`{"handle":"<handle:${id}>"}`);
  });

  it('redacts every string in a JSON value, keys included, without mutating it', () => {
    const value = {
      peer: 'localhost:1',
      handle: token,
      nested: { list: [token, 'unrelated', 3, null, true] },
      [token]: 'as a key',
    };
    const snapshot = JSON.stringify(value);
    const redacted = redactHandlesDeep(value);
    const rendered = JSON.stringify(redacted);
    expect(rendered).not.toContain('mh1.');
    expect(rendered).toContain(`<handle:${id}>`);
    expect(redacted.peer).toBe('localhost:1');
    expect(redacted.nested.list).toEqual([`<handle:${id}>`, 'unrelated', 3, null, true]);
    expect((redacted as Record<string, unknown>)[`<handle:${id}>`]).toBe('as a key');
    expect(JSON.stringify(value)).toBe(snapshot);
    expect(redactHandlesDeep(`x ${token}`)).toBe(`x <handle:${id}>`);
    expect(redactHandlesDeep(42)).toBe(42);
    expect(redactHandlesDeep(null)).toBeNull();
  });

  it('keeps a "__proto__" key a plain key', () => {
    const value = JSON.parse(`{"__proto__": {"h": "${token}"}}`) as Record<string, unknown>;
    const redacted = redactHandlesDeep(value);
    expect(Object.getPrototypeOf(redacted)).toBe(Object.prototype);
    expect(JSON.stringify(redacted)).toBe(`{"__proto__":{"h":"<handle:${id}>"}}`);
  });
});

describe('the stored path of a fetched file', () => {
  it('is runtime-chosen and sanitised', () => {
    expect(storedPathFor('3f2a', 'report.md')).toBe('peer-in/3f2a-report.md');
    expect(storedPathFor('3f2a', '../../etc/passwd')).toBe('peer-in/3f2a-passwd');
    expect(storedPathFor('3f2a', '..')).toBe('peer-in/3f2a-file');
    expect(storedPathFor('3f2a', '.')).toBe('peer-in/3f2a-file');
    expect(storedPathFor('3f2a', 'dir/')).toBe('peer-in/3f2a-file');
    expect(storedPathFor('3f2a', '')).toBe('peer-in/3f2a-file');
    expect(storedPathFor('3f2a', null)).toBe('peer-in/3f2a-file');
    expect(storedPathFor('3f2a', 'a b;rm -rf.md')).toBe('peer-in/3f2a-a_b_rm_-rf.md');
    expect(storedPathFor('3f2a', 'a\\b\0c')).toBe('peer-in/3f2a-a_b_c');
  });

  it('replaces each non-ASCII character with one underscore and caps at 120 characters', () => {
    expect(storedPathFor('id', 'résumé.pdf')).toBe('peer-in/id-r_sum_.pdf');
    expect(storedPathFor('id', '😀.md')).toBe('peer-in/id-_.md');
    expect(storedPathFor('id', 'x'.repeat(300))).toBe(`peer-in/id-${'x'.repeat(120)}`);
    expect(storedPathFor('id', '😀'.repeat(300))).toBe(`peer-in/id-${'_'.repeat(120)}`);
  });
});

describe('redaction of overlapping tokens', () => {
  it('redacts a token hidden after another token-like prefix, leaving no working segments', () => {
    const inner = 'mh1.UGF5bG9hZA.TUFDbWFjbWFj';
    for (const text of [`mh1.x.${inner}`, `mh1.x.mh1.y.${inner}`, `a mh1.x.${inner}.`]) {
      const out = redactHandles(text);
      expect(out).not.toContain('UGF5bG9hZA');
      expect(out).not.toContain('TUFDbWFjbWFj');
      expect(out).toContain(`<handle:${handleId(inner)}>`);
    }
    // Run together, the boundary is ambiguous; what matters is that no segment survives.
    expect(redactHandles(`${inner}mh1.q.r`)).not.toMatch(/UGF5bG9hZA|TUFDbWFjbWFj|\.q\.r/);
    expect(redactHandles(`see mh1.x.${inner}.`)).toBe(`see <handle:${handleId('mh1.x.mh1')}><handle:${handleId(inner)}>.`);
  });
});
