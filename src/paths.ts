// Lowering a request path into a relpath, before any filesystem access (SPEC section 4). Pure:
// no fs, no normalisation. A request that is not already in canonical form is refused, never
// rewritten into something servable — `a/./b` and `a/../b` are refusals, not aliases of `a/b`.

export type Lowered = { ok: true; relpath: string; display: string } | { ok: false; display: string };

const HEX = /^[0-9A-Fa-f]{2}$/;
// ignoreBOM: a decoder otherwise drops a leading U+FEFF, which would lower `%EF%BB%BFa` to `a`:
// a request normalised into another file's name (found by test/fuzz).
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const lossy = new TextDecoder('utf-8', { ignoreBOM: true });

/**
 * Percent-decodes exactly once, on bytes. `%2F` becomes `/` (and so splits components);
 * a `%` without two hex digits after it stays literal.
 */
export function percentDecodeOnce(input: Buffer): Buffer {
  const out = Buffer.allocUnsafe(input.length);
  let n = 0;
  for (let i = 0; i < input.length; i++) {
    const byte = input[i]!;
    if (byte === 0x25 && i + 2 < input.length && HEX.test(input.toString('latin1', i + 1, i + 3))) {
      out[n++] = parseInt(input.toString('latin1', i + 1, i + 3), 16);
      i += 2;
    } else {
      out[n++] = byte;
    }
  }
  return out.subarray(0, n);
}

/**
 * Lowers a relpath. `source: 'url'` is the part of a raw request target after the plane's prefix,
 * as Node hands it over (latin1 octets); `source: 'text'` is a tool's `path` argument (a JS
 * string, UTF-8). Both are percent-decoded once, so `%2e%2e%2f` is an escape on either route.
 * `display` is the decoded form, lossy where the bytes are not UTF-8, for the trace.
 */
export function lowerRelpath(raw: string, source: 'url' | 'text'): Lowered {
  if (source === 'text' && !raw.isWellFormed()) {
    return { ok: false, display: raw.toWellFormed() };
  }
  const bytes = percentDecodeOnce(Buffer.from(raw, source === 'url' ? 'latin1' : 'utf8'));
  const display = lossy.decode(bytes);
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return { ok: false, display };
  }
  const relpath = canonicalRelpath(text);
  return relpath === null ? { ok: false, display } : { ok: true, relpath, display };
}

/**
 * The lexical refusals on an already-decoded path: empty, NUL, absolute, and any empty, `.` or
 * `..` component after dropping one trailing `/`. Returns the canonical relpath or null. Used
 * directly (without decoding again) on a handle's MAC-verified `p`, which is already canonical.
 */
export function canonicalRelpath(text: string): string | null {
  if (text.length === 0 || text.includes('\0') || text.startsWith('/')) return null;
  const trimmed = text.endsWith('/') ? text.slice(0, -1) : text;
  for (const component of trimmed.split('/')) {
    if (component === '' || component === '.' || component === '..') return null;
  }
  return trimmed;
}

/** The path part of a raw request target: query stripped, absolute-form scheme and authority cut. */
export function requestPath(rawUrl: string): string {
  let target = rawUrl;
  const q = target.indexOf('?');
  if (q >= 0) target = target.slice(0, q);
  const hash = target.indexOf('#');
  if (hash >= 0) target = target.slice(0, hash);
  const absolute = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/]*/.exec(target);
  if (absolute) target = target.slice(absolute[0].length) || '/';
  return target;
}
