// The model of the two HTTP clients against a lying server, written from SPEC 6 and 10 and the
// docs (docs/cli.md's exit statuses), sharing no code with src/: what fetch-peer-file must make of a
// peer's card and redeem answer, and what `ls` and `get` must make of an answer. Framing follows
// RFC 9112 as any client reads it: a content-length delimits the body (bytes past it are not the
// body), a body cut before its length or its last chunk is no body at all.
import type { Framing, Scripted } from './hostile.js';
import { sha256Hex } from './hostile.js';

/** SPEC 6: the codes a peer plane answers with; a peer's refusal is reported by its code only if it is one. */
export const PEER_PLANE_CODES = [
  'no_peer_plane', 'malformed_handle', 'missing_audience', 'handle_not_valid', 'handle_expired', 'not_found',
  'outside_root', 'not_a_regular_file', 'too_large', 'method_not_allowed', 'symlink_refused', 'io_error',
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
  let name = [...last].slice(0, 120).map((c) => (/^[A-Za-z0-9._-]$/.test(c) ? c : '_')).join('');
  if (name === '' || name === '.' || name === '..') name = 'file';
  return `peer-in/${id}-${name}`;
}

/** SPEC 8 and 10: a string as the trace writes it, every `mh1.<seg>.<seg>` in it replaced by `<handle:<handle_id>>`. */
export function traced(text: string): string {
  return text.replace(/mh1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/g, (token) => `<handle:${sha256Hex(token).slice(0, 16)}>`);
}

export type FetchOutcome =
  | { ok: true; bytes: Buffer; generation: number | null }
  | { ok: false; code: string };

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
