/**
 * mh1 peer handles: the token format, minting and verification.
 *
 * A handle is `mh1.<base64url(payload JSON)>.<base64url(HMAC-SHA256)>`. The payload is in the
 * clear on purpose; the MAC makes it unforgeable, and the audience — covered by the MAC but never
 * carried — makes it useless to whoever merely finds it. This file owns the exact bytes the MAC
 * covers, the strict base64url codec every segment is judged by, the fixed order a token is
 * checked in. The `handle_id` that stands in for a token wherever one would be recorded, and the
 * redaction that enforces that, live in src/redact.ts. It knows nothing about HTTP, files or the
 * trace.
 */
import { TOKEN_TAG } from '../redact.js';
import { constantTimeEqual, type InstanceKey, randomBytes } from './key.js';

export interface HandlePayload {
  v: number;
  iss: string;
  p: string;
  /** Unix ms. Above 2^53-1 (a reference handle's saturated expiry) this number is rounded; verification compares the exact digits. */
  exp: number;
  n: string;
}

/** Domain separator leading every MAC input, so no other MAC this key makes can pass as one. */
export const MAC_DOMAIN = 'murmur-peer-handle-v1';
/** The only payload version minted or accepted. */
export const PAYLOAD_VERSION = 1;
/** Bytes of randomness in a payload's nonce. */
export const NONCE_BYTES = 16;

const MAC_BYTES = 32;

export type VerifyResult =
  | { ok: true; payload: HandlePayload }
  | { ok: false; reason: 'malformed' | 'not_valid' }
  // The MAC verified, so the payload is this instance's own record and may be reported.
  | { ok: false; reason: 'expired'; payload: HandlePayload };

// ── Strict base64url ─────────────────────────────────────────────────────────
// Node's decoder skips characters it does not know, accepts padding and either alphabet, and
// ignores non-zero trailing bits, so many strings would decode to the same bytes. A token must
// have exactly one spelling: otherwise `handle_id` (a hash of the spelling) could differ for the
// same MAC'd payload, and a validator would be agreeing with bytes nobody minted.

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const DECODE_TABLE: Int8Array = (() => {
  const table = new Int8Array(128).fill(-1);
  for (let i = 0; i < ALPHABET.length; i++) table[ALPHABET.charCodeAt(i)] = i;
  return table;
})();

function sextet(text: string, index: number): number {
  const code = text.charCodeAt(index);
  return code < 128 ? (DECODE_TABLE[code] as number) : -1;
}

/**
 * Decodes unpadded base64url, or returns null unless `text` is the one canonical encoding of
 * some non-empty byte string: alphabet `[A-Za-z0-9_-]` only, no `=`, a length that is not 1
 * mod 4, and zero bits in whatever the final character carries beyond the last whole byte.
 */
export function decodeBase64UrlStrict(text: string): Buffer | null {
  const length = text.length;
  if (length === 0 || length % 4 === 1) return null;
  const out = Buffer.alloc(Math.floor((length * 3) / 4));
  let acc = 0;
  let bits = 0;
  let written = 0;
  for (let i = 0; i < length; i++) {
    const value = sextet(text, i);
    if (value < 0) return null;
    acc = ((acc << 6) | value) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[written++] = (acc >> bits) & 0xff;
    }
  }
  // The bits left over are the final character's padding bits; a canonical encoder writes zeros.
  if ((acc & ((1 << bits) - 1)) !== 0) return null;
  return out;
}

function encodeBase64Url(bytes: Buffer): string {
  // Node's encoder is exact (unpadded, url alphabet); only its decoder is lenient.
  return bytes.toString('base64url');
}

// ── Shape ────────────────────────────────────────────────────────────────────

/** A well-shaped token, split and decoded once (parseToken), for verifyParsed. */
export interface TokenParts {
  payloadSegment: string;
  payload: Buffer;
  mac: Buffer;
}

/** The token split and decoded, or null unless it is well-shaped (what `checkShape` accepts). */
export function parseToken(token: string): TokenParts | null {
  const segments = token.split('.');
  if (segments.length !== 3 || segments[0] !== TOKEN_TAG) return null;
  const payloadSegment = segments[1] as string;
  const payload = decodeBase64UrlStrict(payloadSegment);
  const mac = decodeBase64UrlStrict(segments[2] as string);
  if (payload === null || mac === null || mac.length !== MAC_BYTES) return null;
  return { payloadSegment, payload, mac };
}

/** Shape alone: `mh1.<b64url>.<b64url>` with a 32-byte MAC. Nothing is read from the payload. */
export function checkShape(token: string): boolean {
  return parseToken(token) !== null;
}

// ── The payload ──────────────────────────────────────────────────────────────

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The five fields with the types a handle requires, or null. Unknown extra fields are ignored. */
function toPayload(value: unknown): HandlePayload | null {
  if (!isRecord(value)) return null;
  const { v, iss, p, exp, n } = value;
  if (v !== PAYLOAD_VERSION) return null;
  if (typeof iss !== 'string' || typeof p !== 'string' || typeof n !== 'string') return null;
  if (typeof exp !== 'number' || !Number.isSafeInteger(exp) || exp < 0) return null;
  return { v, iss, p, exp, n };
}

// The reference reads a payload with serde_json into a struct of `v: u8`, `exp: u64` and three
// strings, and this reader agrees with it on every input: a BOM, a duplicate field, a fraction or
// an exponent in `v` or `exp`, or an `exp` outside 0..2^64-1 is malformed; unknown fields are
// ignored. An `exp` above 2^53-1 (the reference saturates a huge ttl to 2^64-1) is read from its
// own digits, so its comparison with the clock is exact.

/** ignoreBOM: a BOM stays in the text, where JSON.parse refuses it (as serde_json does). */
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const U64_MAX = 2n ** 64n - 1n;
const UNSIGNED_LITERAL = /^(0|[1-9][0-9]*)$/;
const PAYLOAD_FIELDS = new Set(['v', 'iss', 'p', 'exp', 'n']);

/** A payload as read, with its expiry exact (the `exp` field may be rounded above 2^53-1). */
interface ReadPayload {
  payload: HandlePayload;
  expExact: bigint;
}

/**
 * The top level of a payload already known to be valid JSON: whether one of the five fields appears
 * twice, and the literal text of `v` and `exp` when they are numbers (JSON.parse has rounded them
 * already). A scan rather than JSON.parse's source-text reviver, which Node 20 (the arm64 test's) lacks.
 */
function topLevel(text: string): { duplicate: boolean; literals: Map<string, string> } {
  const seen = new Set<string>();
  const literals = new Map<string, string>();
  let duplicate = false;
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      if (depth === 1) {
        let k = j + 1;
        while (/\s/.test(text[k] ?? '')) k++;
        if (text[k] === ':') {
          const key = JSON.parse(text.slice(i, j + 1)) as string;
          if (PAYLOAD_FIELDS.has(key)) {
            if (seen.has(key)) duplicate = true;
            seen.add(key);
            let v = k + 1;
            while (/\s/.test(text[v] ?? '')) v++;
            const number = /^-?[0-9][0-9.eE+-]*/.exec(text.slice(v, v + 64));
            if (number) literals.set(key, number[0]);
          }
        }
      }
      i = j;
    } else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') depth--;
  }
  return { duplicate, literals };
}

/** `exp > nowMs`, exactly: an exp above 2^53-1 is compared by its digits, not by the rounded number. */
function expiresAfter(expExact: bigint, exp: number, nowMs: number): boolean {
  if (Number.isSafeInteger(exp)) return exp > nowMs;
  if (!Number.isFinite(nowMs)) return nowMs < 0;
  return expExact > BigInt(Math.floor(nowMs));
}

function parsePayload(bytes: Buffer): ReadPayload | null {
  let text: string;
  let root: unknown;
  try {
    text = UTF8.decode(bytes);
    root = JSON.parse(text);
  } catch {
    return null;
  }
  if (!isRecord(root)) return null;
  const { v, iss, p, exp, n } = root;
  const { duplicate, literals } = topLevel(text);
  if (duplicate) return null;
  if (v !== PAYLOAD_VERSION || literals.get('v') !== '1') return null;
  if (typeof iss !== 'string' || typeof p !== 'string' || typeof n !== 'string') return null;
  const expLiteral = literals.get('exp');
  if (typeof exp !== 'number' || expLiteral === undefined || !UNSIGNED_LITERAL.test(expLiteral)) return null;
  const expExact = BigInt(expLiteral);
  if (expExact > U64_MAX) return null;
  return { payload: { v, iss, p, exp, n }, expExact };
}

/** Compact JSON with the keys in the contract's order, whatever order the caller built them in. */
function serialisePayload(payload: HandlePayload): Buffer {
  const { v, iss, p, exp, n } = payload;
  return Buffer.from(JSON.stringify({ v, iss, p, exp, n }), 'utf8');
}

// ── Mint and verify ──────────────────────────────────────────────────────────

/**
 * What a handle's MAC is computed over: one buffer, one hash update inside the unlocked window,
 * the same bytes as the parts one by one (U+001F is the byte 0x1F in UTF-8, and neither neighbour
 * can pair with it).
 */
function macMessage(payloadSegment: string, audience: string): Buffer[] {
  return [Buffer.from(`${MAC_DOMAIN}\u001f${payloadSegment}\u001f${audience}`, 'utf8')];
}

function macFor(key: InstanceKey, payloadSegment: string, audience: string): Buffer {
  return key.hmacSha256(macMessage(payloadSegment, audience));
}

/** Seals arbitrary payload bytes (mintToken's last step). */
function sealRaw(key: InstanceKey, payloadJson: Buffer, audience: string): string {
  const payloadSegment = encodeBase64Url(payloadJson);
  const mac = macFor(key, payloadSegment, audience);
  return `${TOKEN_TAG}.${payloadSegment}.${encodeBase64Url(mac)}`;
}

/**
 * Mints a token for `audience`. Refuses a payload that verification would call malformed, so
 * no caller can hand out a handle that can never redeem.
 */
export function mintToken(key: InstanceKey, payload: HandlePayload, audience: string): string {
  if (toPayload(payload) === null) {
    throw new Error('a handle payload needs v=1, string iss/p/n and a non-negative integer exp');
  }
  return sealRaw(key, serialisePayload(payload), audience);
}

/**
 * Verifies a token in a fixed order: shape → MAC → payload → issuer → expiry.
 *
 * Nothing in the payload is read before the MAC has proven this instance wrote it. Every MAC
 * failure — tampered payload, tampered MAC, another instance's key, the wrong audience — is the
 * single `not_valid`, and so is a foreign `iss`: splitting them would tell a prober which field
 * to change next.
 */
export function verifyTokenForTests(key: InstanceKey, token: string, audience: string, sessionId: string, nowMs: number): VerifyResult {
  const parts = parseToken(token);
  if (parts === null) return { ok: false, reason: 'malformed' };
  return verifyParsed(key, parts, audience, sessionId, nowMs);
}

/** The verification's checks after the shape, on a token parseToken has already split and decoded. */
export function verifyParsed(key: InstanceKey, parts: TokenParts, audience: string, sessionId: string, nowMs: number): VerifyResult {
  return judge(macFor(key, parts.payloadSegment, audience), parts, sessionId, nowMs);
}

/**
 * verifyParsed with the MAC computed together with the others asked for in this turn of the event
 * loop (InstanceKey.hmacSha256Soon: one unlock for a batch of redeems). `now` is read once the
 * MAC is known. Rejects only when the key is destroyed (the session is stopping).
 */
export async function verifyParsedSoon(key: InstanceKey, parts: TokenParts, audience: string, sessionId: string, now: () => number): Promise<VerifyResult> {
  const expected = await key.hmacSha256Soon(macMessage(parts.payloadSegment, audience));
  return judge(expected, parts, sessionId, now());
}

/** The checks after the MAC, in the spec's order: MAC → payload → issuer → expiry. */
function judge(expected: Buffer, parts: TokenParts, sessionId: string, nowMs: number): VerifyResult {
  if (!constantTimeEqual(expected, parts.mac)) return { ok: false, reason: 'not_valid' };
  const read = parsePayload(parts.payload);
  if (read === null) return { ok: false, reason: 'malformed' };
  const { payload, expExact } = read;
  if (payload.iss !== sessionId) return { ok: false, reason: 'not_valid' };
  if (!expiresAfter(expExact, payload.exp, nowMs)) return { ok: false, reason: 'expired', payload };
  return { ok: true, payload };
}

/**
 * A token this process cannot verify (a peer's), split and decoded in one pass: null unless it is
 * well-shaped (what `checkShape` accepts); `payload` null unless it has a handle's fields. The
 * payload is caller-controlled: fit for choosing where the token may go and what to name what it
 * fetches, never for trusting it.
 */
export function readUnverified(token: string): { payload: HandlePayload | null } | null {
  const parts = parseToken(token);
  return parts === null ? null : { payload: parsePayload(parts.payload)?.payload ?? null };
}

/** 32 lowercase hex characters of fresh randomness, for a payload's `n`. */
export function randomNonceHex(): string {
  return randomBytes(NONCE_BYTES).toString('hex');
}

/**
 * Tests only: validly MAC'd payload bytes that need not be a handle (a payload verification must
 * call malformed, a field the parser must refuse). Nothing in src/ calls it.
 */
export const sealRawForTests = sealRaw;
