// The model of the two HTTP clients against a lying server, written from SPEC 6 and 10 and the
// docs (docs/cli.md's exit statuses), sharing no code with src/: what fetch-peer-file must make of a
// peer's card and redeem answer, and what `ls` and `get` must make of an answer. Framing follows
// RFC 9112 as any client reads it: a content-length delimits the body (bytes past it are not the
// body), a body cut before its length or its last chunk is no body at all.
import type { Framing, Scripted } from './hostile.js';
import { sha256Hex } from './hostile.js';

/** SPEC 6: the codes a peer plane answers with; a peer's refusal is reported by its code only if it is one. */
export const PEER_PLANE_CODES = [
  'no_peer_plane',
  'malformed_handle',
  'missing_audience',
  'handle_not_valid',
  'handle_expired',
  'not_found',
  'outside_root',
  'not_a_regular_file',
  'too_large',
  'method_not_allowed',
  'symlink_refused',
  'io_error',
] as const;

/** Both clients read at most this much of a refusal body (src/response-body.ts's cap, docs/security.md). */
export const ERROR_BODY_CAP = 16 * 1024;

/** The bytes a client receives as the body when the framing is complete; null when it is cut. */
export function delivered(a: Scripted): Buffer | null {
  const f: Framing = a.framing;
  switch (f.kind) {
    case 'exact':
    case 'chunked':
      return a.body;
    case 'short':
      return a.body.subarray(0, Math.max(0, a.body.length - f.by));
    case 'none':
      // Close-delimited: whole when the server closes with a FIN.
      return a.ending === 'close' ? a.body : null;
    case 'long':
    case 'chunked-cut':
      return null;
  }
}

/** The content-length the answer declares, if any. */
export function declaredLength(a: Scripted): number | null {
  const f = a.framing;
  if (f.kind === 'exact') return a.body.length;
  if (f.kind === 'short') return Math.max(0, a.body.length - f.by);
  if (f.kind === 'long') return a.body.length + f.by;
  return null;
}

/** SPEC 6 / src/wire.ts's contract: an etag is `"sha256:<64 lowercase hex>"` exactly, else it names nothing. */
export function etagDigest(value: string | undefined): string | null {
  if (value === undefined) return null;
  const m = /^"sha256:([0-9a-f]{64})"$/.exec(value);
  return m ? m[1]! : null;
}

/** The one value of a header in the script (without the whitespace around it, RFC 9112 5.1), or undefined when absent or repeated. */
export function headerOf(a: Scripted, name: string): string | undefined {
  const values = a.headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v.replace(/^[ \t]+|[ \t]+$/g, ''));
  return values.length === 1 ? values[0] : undefined;
}

/** SPEC 6: `peer-in/<handle_id>-<sanitised basename>`. */
export function storedName(token: string, p: string | null): string {
  const id = sha256Hex(token).slice(0, 16);
  const last = p === null ? '' : p.slice(p.lastIndexOf('/') + 1);
  let name = [...last]
    .slice(0, 120)
    .map((c) => (/^[A-Za-z0-9._-]$/.test(c) ? c : '_'))
    .join('');
  if (name === '' || name === '.' || name === '..') name = 'file';
  return `peer-in/${id}-${name}`;
}

/** SPEC 8 and 10: a string as the trace writes it, every `mh1.<seg>.<seg>` in it replaced by `<handle:<handle_id>>`. */
export function traced(text: string): string {
  return text.replace(/mh1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/g, (token) => `<handle:${sha256Hex(token).slice(0, 16)}>`);
}

export type FetchOutcome = { ok: true; bytes: Buffer; generation: number | null } | { ok: false; code: string };

/** The peer's refusal code as the fetcher must report it: the peer plane's code from its JSON, else http_<status>. */
export function refusalCode(a: Scripted): string {
  const fallback = `http_${a.status}`;
  const body = delivered(a);
  if (body === null || body.length > ERROR_BODY_CAP) return fallback;
  try {
    const parsed = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body)) as { error?: unknown } | null;
    const code = parsed?.error;
    return typeof code === 'string' && (PEER_PLANE_CODES as readonly string[]).includes(code) ? code : fallback;
  } catch {
    return fallback;
  }
}

/** SPEC 6 and 10: what fetch-peer-file makes of a redeem answer, with a fetch cap of `cap` bytes. */
export function fetchOutcome(a: Scripted, cap: number): FetchOutcome {
  if (a.status !== 200) return { ok: false, code: refusalCode(a) };
  const digest = etagDigest(headerOf(a, 'etag'));
  if (digest === null) return { ok: false, code: 'etag_mismatch' };
  const declared = declaredLength(a);
  if (declared !== null && declared > cap) return { ok: false, code: 'too_large' };
  const body = delivered(a);
  if (body === null) {
    // Cut: every byte sent arrives before the FIN, so more than the cap is too_large first.
    return { ok: false, code: a.body.length > cap && a.ending === 'close' ? 'too_large' : 'peer_unreachable' };
  }
  if (body.length > cap) return { ok: false, code: 'too_large' };
  if (sha256Hex(body) !== digest) return { ok: false, code: 'etag_mismatch' };
  const g = headerOf(a, 'x-murmur-generation');
  return { ok: true, bytes: body, generation: g !== undefined && /^[0-9]{1,15}$/.test(g) ? Number(g) : null };
}

// ── The operator's client, `ls` and `get` (SPEC 10, docs/cli.md) ───────────

/** docs/cli.md: control and format characters (and lone surrogates) shown as `\x1b`, `\u{202e}`. */
export function printableModel(text: string): string {
  let out = '';
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    const hidden = /^[\p{Cc}\p{Cf}]$/u.test(ch) || (cp >= 0xd800 && cp <= 0xdfff);
    out += !hidden ? ch : cp <= 0xff ? `\\x${cp.toString(16).padStart(2, '0')}` : `\\u{${cp.toString(16)}}`;
  }
  return out;
}

/** What a terminal acts on, anywhere in what a verb prints (a newline ends a line and is allowed). */
export const TERMINAL_CONTROL = /[\p{Cc}\p{Cf}]/u;

/** docs/cli.md, *Exit status*. */
export const EXIT = { ok: 0, unreachable: 3, refused: 4, unverified: 5, tooLarge: 6 } as const;

export interface ClientExpectation {
  status: number;
  /** The error line's text after `error: `, exactly, when the model knows it; else a pattern it matches. */
  error: string | RegExp | null;
  /** `get`: the bytes saved; `ls`: the listing object printed. */
  saved?: Buffer;
  listing?: Record<string, unknown>;
}

/** A refusal (any status but 200) as both verbs print it: the server's code and message through the filter, else the status alone. */
export function refusalLine(a: Scripted): string {
  const body = delivered(a) ?? Buffer.alloc(0);
  const text = body.subarray(0, ERROR_BODY_CAP).toString('utf8');
  try {
    const parsed = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof parsed.error === 'string' && parsed.error !== '') {
      const message = typeof parsed.message === 'string' ? parsed.message : '';
      return `${a.status} ${printableModel(parsed.error)}: ${printableModel(message)}`.trim();
    }
  } catch {
    // not JSON
  }
  return `the server answered ${a.status}`;
}

/** SPEC 10's listing check: texts are strings, counts non-negative integers, times integers. */
export function listingIsWellFormed(value: unknown): boolean {
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  const count = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 0;
  if (!isObject(value)) return false;
  if (!['root', 'mode', 'containment_achieved'].every((k) => typeof value[k] === 'string')) return false;
  if (!count(value.max_bytes) || !count(value.generation) || !Array.isArray(value.entries)) return false;
  return value.entries.every(
    (e) =>
      isObject(e) &&
      typeof e.path === 'string' &&
      typeof e.sha256 === 'string' &&
      count(e.size_bytes) &&
      typeof e.mtime_ms === 'number' &&
      Number.isInteger(e.mtime_ms),
  );
}

/**
 * A header value no HTTP/1.1 client may accept (RFC 9110 5.5: only HTAB, SP, visible ASCII and
 * obs-text): the answer is not HTTP, and the server is as good as unreachable.
 */
export function hasInvalidHeaderValue(a: Scripted): boolean {
  return a.headers.some(([, v]) => /[\x00-\x08\x0a-\x1f\x7f]/.test(v));
}

/** What `get` must do with an answer, saving at most `maxBytes`. Header values are latin1, as sent. */
export function getExpectation(a: Scripted, maxBytes: number): ClientExpectation {
  if (hasInvalidHeaderValue(a))
    return { status: EXIT.unreachable, error: /^cannot reach http:\/\/127\.0\.0\.1:\d+: Response does not match the HTTP\/1\.1 protocol/ };
  if (a.status !== 200) return { status: EXIT.refused, error: refusalLine(a) };
  const etag = headerOf(a, 'etag');
  const digest = etagDigest(etag);
  if (digest === null) return { status: EXIT.unverified, error: /^etag mismatch: the server said .*, which names no sha256 digest; nothing was saved$/ };
  const declared = declaredLength(a);
  if (declared !== null && declared > maxBytes)
    return {
      status: EXIT.tooLarge,
      error: `the file is ${declared} bytes, more than the ${maxBytes} get saves; pass --max-bytes to raise it; nothing was saved`,
    };
  const tooLarge = `the file is larger than the ${maxBytes} bytes get saves; pass --max-bytes to raise it; nothing was saved`;
  const body = delivered(a);
  if (body === null) {
    if (a.body.length > maxBytes && a.ending === 'close') return { status: EXIT.tooLarge, error: tooLarge };
    return { status: EXIT.unreachable, error: /^the download from http:\/\/127\.0\.0\.1:\d+ broke off: .*; nothing was saved$/ };
  }
  if (body.length > maxBytes) return { status: EXIT.tooLarge, error: tooLarge };
  if (sha256Hex(body) !== digest)
    return {
      status: EXIT.unverified,
      error: `etag mismatch: the server said ${printableModel(etag!)} but the bytes hash to sha256:${sha256Hex(body)}; nothing was saved`,
    };
  return { status: EXIT.ok, error: null, saved: body };
}

/** What `ls` must do with an answer. */
export function lsExpectation(a: Scripted): ClientExpectation {
  if (a.status !== 200) return { status: EXIT.refused, error: refusalLine(a) };
  const body = delivered(a);
  if (body === null) return { status: EXIT.unreachable, error: /^cannot reach http:\/\/127\.0\.0\.1:\d+: / };
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return { status: EXIT.unverified, error: /^http:\/\/127\.0\.0\.1:\d+ answered 200 with a listing that is not JSON$/ };
  }
  if (!listingIsWellFormed(parsed)) return { status: EXIT.unverified, error: /^the server sent a malformed listing: / };
  return { status: EXIT.ok, error: null, listing: parsed as Record<string, unknown> };
}
