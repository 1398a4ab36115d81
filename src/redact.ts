// Keeping tokens out of records: the `handle_id` that stands in for a token wherever one would be
// recorded, and the scrubbing that replaces any token-shaped text with it. A leaf every boundary
// uses (the trace, logs, tool refusals, error bodies); it knows nothing about keys or MACs.
import { createHash } from 'node:crypto';

/** First segment of every token, and the only version minted or accepted. */
export const TOKEN_TAG = 'mh1';

/** The first 16 lowercase hex of SHA-256(token): what traces and error bodies carry instead. */
export function handleId(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex').slice(0, 16);
}

// Exactly three segments; '.' is outside the segment class, so a full stop ending a sentence is
// never swallowed. Deliberately looser than `checkShape`: anything token-like is redacted, even
// if it would not verify, because a record must not depend on the token being well-formed.
const TOKEN_AT = /mh1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/y;

/**
 * Replaces every `mh1.<seg>.<seg>` in `text` with `<handle:<handle_id>>`. Tokens are looked for at
 * every `mh1.`, not only where the previous match ended: in `mh1.x.mh1.P.M` a left-to-right
 * replace would consume `mh1.x.mh1` and leave `.P.M`, the working token minus its tag. Overlapping
 * tokens become one run of their handle ids.
 */
export function redactHandles(text: string): string {
  if (!text.includes(`${TOKEN_TAG}.`)) return text;
  const spans: Array<{ start: number; end: number; ids: string[] }> = [];
  for (let i = text.indexOf(`${TOKEN_TAG}.`); i >= 0; i = text.indexOf(`${TOKEN_TAG}.`, i + 1)) {
    TOKEN_AT.lastIndex = i;
    const m = TOKEN_AT.exec(text);
    if (!m) continue;
    const end = i + m[0].length;
    const id = handleId(m[0]);
    const last = spans.at(-1);
    if (last && i < last.end) {
      last.end = Math.max(last.end, end);
      last.ids.push(id);
    } else {
      spans.push({ start: i, end, ids: [id] });
    }
  }
  let out = '';
  let at = 0;
  for (const span of spans) {
    out += text.slice(at, span.start) + span.ids.map((id) => `<handle:${id}>`).join('');
    at = span.end;
  }
  return out + text.slice(at);
}

/**
 * `redactHandles` applied to every string in a JSON-like value, object keys included. Returns a
 * new value and leaves the input untouched; anything that is not a string, array or plain object
 * is returned as it is.
 */
export function redactHandlesDeep<T>(value: T): T {
  return redactValue(value) as T;
}

function redactValue(value: unknown): unknown {
  if (typeof value === 'string') return redactHandles(value);
  if (Array.isArray(value)) return value.map(redactValue);
  if (typeof value === 'object' && value !== null) {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return value;
    // fromEntries defines own properties, so a key such as "__proto__" stays a plain key.
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [redactHandles(k), redactValue(v)]));
  }
  return value;
}
