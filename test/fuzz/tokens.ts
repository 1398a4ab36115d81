// The handle side of the harness: a model of what an mh1 token verifies to (SPEC section 6, written
// from the spec, sharing no code with src/handle), and generators of payloads and of mutations of
// minted tokens: segments edited, padded, re-encoded in the other base64 alphabet or with non-zero
// trailing bits, tags and segment counts changed, payloads reshaped (types, key order, duplicates,
// huge and deeply nested values), audiences near-missed.
import { createHash } from 'node:crypto';
import fc from 'fast-check';

// ── The model ────────────────────────────────────────────────────────────────────────────────────

/** Strict base64url: the alphabet only, no padding, and the one canonical spelling of its bytes. */
export function strictB64url(s: string): Buffer | null {
  if (!/^[A-Za-z0-9_-]+$/.test(s)) return null;
  const bytes = Buffer.from(s, 'base64url');
  if (bytes.length === 0 || bytes.toString('base64url') !== s) return null;
  return bytes;
}

export interface Shape {
  payloadSegment: string;
  payload: Buffer;
}

/** `mh1.<b64url payload>.<b64url 32-byte MAC>`, or null (malformed_handle). */
export function shapeOf(token: string): Shape | null {
  const parts = token.split('.');
  if (parts.length !== 3 || parts[0] !== 'mh1') return null;
  const payload = strictB64url(parts[1]!);
  const mac = strictB64url(parts[2]!);
  if (payload === null || mac === null || mac.length !== 32) return null;
  return { payloadSegment: parts[1]!, payload };
}

/** A token this instance sealed, and the audience it sealed it for. */
export interface Sealed {
  token: string;
  audience: string;
}

export type Verdict = 'ok' | 'malformed' | 'not_valid' | 'expired';

export interface ModelPayload {
  p: string;
  iss: string;
  /** Unix ms, exact: the reference reads it as a u64, so it may exceed 2^53-1. */
  exp: bigint;
}

const U64_MAX = 2n ** 64n - 1n;

/**
 * The payload after the MAC verified, read as the reference's serde_json reads it into
 * `{ v: u8, iss, p, n: String, exp: u64 }`: strict UTF-8 JSON of an object whose `v` is the
 * literal 1, whose `iss`, `p` and `n` are strings, and whose `exp` is an integer literal (no sign,
 * fraction or exponent) in 0..2^64-1; else malformed. JSON.parse says whether it is JSON; the
 * members' raw texts say what the literals were, so an exp above 2^53-1 is read exactly.
 */
export function payloadOf(bytes: Buffer): ModelPayload | null {
  const text = bytes.toString('utf8');
  if (!Buffer.from(text, 'utf8').equals(bytes)) return null;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const raw = topLevelMembers(text);
  if (raw.repeated.some((name) => ['v', 'iss', 'p', 'exp', 'n'].includes(name))) return null;
  const o = value as Record<string, unknown>;
  if (raw.get('v') !== '1' || typeof o.iss !== 'string' || typeof o.p !== 'string' || typeof o.n !== 'string') return null;
  const exp = raw.get('exp');
  if (exp === undefined || !/^(0|[1-9][0-9]*)$/.test(exp) || BigInt(exp) > U64_MAX) return null;
  return { p: o.p, iss: o.iss, exp: BigInt(exp) };
}

/** The raw text of each member of a valid JSON object, and the names written more than once. */
function topLevelMembers(text: string): Map<string, string> & { repeated: string[] } {
  const members = Object.assign(new Map<string, string>(), { repeated: [] as string[] });
  let depth = 0;
  let name: string | null = null;
  let valueStart = -1;
  const close = (at: number) => {
    if (name === null) return;
    if (members.has(name)) members.repeated.push(name);
    members.set(name, text.slice(valueStart, at).trim());
    name = null;
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') {
      const end = stringEnd(text, i);
      if (depth === 1 && name === null) name = JSON.parse(text.slice(i, end + 1)) as string;
      i = end;
    } else if (c === ':' && depth === 1) valueStart = i + 1;
    else if (c === ',' && depth === 1) close(i);
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      if (depth === 1) close(i);
      depth--;
    }
  }
  return members;
}

function stringEnd(text: string, open: number): number {
  let i = open + 1;
  while (text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
  return i;
}

/**
 * Shape, then the MAC (which verifies exactly for a token this instance sealed for this audience:
 * the model knows what was sealed, it does not recompute a MAC), then the payload, the issuer, the
 * expiry.
 */
export function modelVerify(
  token: string,
  audience: string,
  sealed: readonly Sealed[],
  sessionId: string,
  nowMs: number,
): { verdict: Verdict; payload?: ModelPayload } {
  const shape = shapeOf(token);
  if (shape === null) return { verdict: 'malformed' };
  if (!sealed.some((s) => s.token === token && s.audience === audience)) return { verdict: 'not_valid' };
  const payload = payloadOf(shape.payload);
  if (payload === null) return { verdict: 'malformed' };
  if (payload.iss !== sessionId) return { verdict: 'not_valid' };
  if (!(payload.exp > BigInt(nowMs))) return { verdict: 'expired', payload };
  return { verdict: 'ok', payload };
}

export function modelHandleId(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex').slice(0, 16);
}

// ── Payloads ─────────────────────────────────────────────────────────────────────────────────────

const deepJson = (depth: number, open: string, close: string, inner: string) => `${open.repeat(depth)}${inner}${close.repeat(depth)}`;

/** Payload JSON texts, most of them almost right. `iss`/`exp` placeholders are filled per session. */
export interface PayloadRecipe {
  fields: Array<[string, unknown]>;
  raw: string | null;
  spaced: boolean;
}

export const EXP_FUTURE = Symbol('future');
export const EXP_PAST = Symbol('past');
export const ISS_SELF = Symbol('self');
/** A number written as this exact JSON text (a fraction or exponent JSON.stringify would not write). */
export class Literal {
  constructor(readonly text: string) {}
}

const valueVariants = {
  v: [1, 1, 1, '1', 2, 0, true, null, 1.5, -1, [1], new Literal('1.0'), new Literal('1e0')],
  iss: [ISS_SELF, ISS_SELF, ISS_SELF, 'ses_other', '', 1, null, { x: 1 }],
  exp: [
    EXP_FUTURE,
    EXP_FUTURE,
    EXP_PAST,
    -1,
    1.5,
    '9999999999999',
    2 ** 53,
    2n ** 64n - 1n,
    2n ** 64n,
    new Literal('1e20'),
    new Literal('99999999999999999999.0'),
    1e300,
    null,
    0,
  ],
  n: ['0123456789abcdef0123456789abcdef', '', 1, null],
};

export const payloadRecipeArb = (paths: readonly string[]): fc.Arbitrary<PayloadRecipe> =>
  fc.record({
    fields: fc
      .record({
        v: fc.option(fc.constantFrom(...valueVariants.v), { freq: 12 }),
        iss: fc.option(fc.constantFrom(...valueVariants.iss), { freq: 12 }),
        p: fc.option(fc.oneof(fc.constantFrom(...paths), fc.string({ maxLength: 8 }), fc.constant('x'.repeat(100_000)), fc.constant(7)), { freq: 12 }),
        exp: fc.option(fc.constantFrom(...valueVariants.exp), { freq: 12 }),
        n: fc.option(fc.constantFrom(...valueVariants.n), { freq: 12 }),
        repeat: fc.option(fc.constantFrom('v', 'iss', 'p', 'exp', 'n'), { freq: 8 }),
        extra: fc.option(
          fc.oneof(
            fc.jsonValue({ maxDepth: 3 }),
            fc.integer({ min: 1, max: 3000 }).map((d) => ({ __deep: d })),
          ),
          { freq: 4 },
        ),
      })
      .chain((f) => {
        const entries: Array<[string, unknown]> = [];
        for (const key of ['v', 'iss', 'p', 'exp', 'n'] as const) if (f[key] !== null) entries.push([key, f[key]]);
        if (f.extra !== null) entries.push(['x', f.extra]);
        // A field written twice: serde_json refuses a duplicate field, so the reference calls it malformed.
        if (f.repeat !== null) entries.push(...entries.filter(([k]) => k === f.repeat));
        return fc.shuffledSubarray(entries, { minLength: entries.length, maxLength: entries.length }).map((e) => e);
      }),
    raw: fc.option(
      fc.oneof(
        fc.constantFrom('', '[]', 'null', '1', '"x"', '{}', '{"v":1}', '{"v":1,"v":2}', '\xff', '{"v":1,"iss":"a"', 'true'),
        fc.integer({ min: 1, max: 20_000 }).map((d) => deepJson(d, '[', ']', '1')),
        fc.integer({ min: 1, max: 20_000 }).map((d) => `{"v":1,"x":${deepJson(d, '{"a":', '}', '1')}}`),
      ),
      { freq: 6 },
    ),
    spaced: fc.boolean(),
  });

/** The payload bytes a recipe names for a session, minted at `nowMs`. */
export function payloadBytes(r: PayloadRecipe, sessionId: string, nowMs: number): Buffer {
  if (r.raw !== null) return Buffer.from(r.raw, r.raw === '\xff' ? 'latin1' : 'utf8');
  const fill = (v: unknown): unknown => {
    if (v === EXP_FUTURE) return nowMs + 600_000;
    if (v === EXP_PAST) return nowMs - 1_000;
    if (v === ISS_SELF) return sessionId;
    if (typeof v === 'object' && v !== null && '__deep' in v) {
      let o: unknown = 1;
      for (let i = 0; i < (v as { __deep: number }).__deep; i++) o = [o];
      return o;
    }
    return v;
  };
  const parts = r.fields.map(([k, v]) => `${JSON.stringify(k)}:${r.spaced ? ' ' : ''}${json(fill(v))}`);
  return Buffer.from(`{${parts.join(r.spaced ? ', ' : ',')}}`, 'utf8');
}

const json = (v: unknown): string => (v instanceof Literal ? v.text : typeof v === 'bigint' ? String(v) : JSON.stringify(v));

// ── Mutations ────────────────────────────────────────────────────────────────────────────────────

export type Mutation =
  | { m: 'char'; seg: number; at: number; to: string }
  | { m: 'insert'; seg: number; at: number; s: string }
  | { m: 'delete'; seg: number; at: number; n: number }
  | { m: 'pad'; seg: number; s: string }
  | { m: 'std-alphabet'; seg: number }
  | { m: 'trailing-bits'; seg: number; delta: number }
  | { m: 'tag'; tag: string }
  | { m: 'segments'; how: 'drop' | 'dup' | 'swap' | 'extra' | 'empty' }
  | { m: 'reencode'; how: 'spaces' | 'order' }
  | { m: 'huge'; seg: number; n: number }
  | { m: 'case'; seg: number };

const FOREIGN = ['+', '/', '=', ' ', '.', '%', '\0', 'é', '\u202e', '-', '_', 'A', 'a', '0', '\t', '~', '%2e', '\ufeff'];

export const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ m: fc.constant('char' as const), seg: fc.nat({ max: 2 }), at: fc.nat(), to: fc.constantFrom(...FOREIGN) }) },
  {
    weight: 2,
    arbitrary: fc.record({ m: fc.constant('insert' as const), seg: fc.nat({ max: 2 }), at: fc.nat(), s: fc.constantFrom(...FOREIGN, 'AA', 'AAAA') }),
  },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('delete' as const), seg: fc.nat({ max: 2 }), at: fc.nat(), n: fc.integer({ min: 1, max: 4 }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      m: fc.constant('pad' as const),
      seg: fc.integer({ min: 1, max: 2 }),
      s: fc.constantFrom('=', '==', '===', 'A', 'AA', 'AAA', '%3D'),
    }),
  },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('std-alphabet' as const), seg: fc.integer({ min: 1, max: 2 }) }) },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('trailing-bits' as const), seg: fc.integer({ min: 1, max: 2 }), delta: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ m: fc.constant('tag' as const), tag: fc.constantFrom('MH1', 'mh2', 'mh', '', 'mh1 ', ' mh1', 'mh0', 'mh1.mh1') }) },
  {
    weight: 1,
    arbitrary: fc.record({ m: fc.constant('segments' as const), how: fc.constantFrom('drop', 'dup', 'swap', 'extra', 'empty') as fc.Arbitrary<'drop'> }),
  },
  { weight: 1, arbitrary: fc.record({ m: fc.constant('reencode' as const), how: fc.constantFrom('spaces', 'order') as fc.Arbitrary<'spaces'> }) },
  { weight: 1, arbitrary: fc.record({ m: fc.constant('huge' as const), seg: fc.integer({ min: 1, max: 2 }), n: fc.constantFrom(4, 1000, 60_000) }) },
  { weight: 1, arbitrary: fc.record({ m: fc.constant('case' as const), seg: fc.nat({ max: 2 }) }) },
);

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

export function mutate(token: string, ms: readonly Mutation[]): string {
  let parts = token.split('.');
  const seg = (i: number) => Math.min(i, parts.length - 1);
  for (const m of ms) {
    if (parts.length === 0) parts = [''];
    switch (m.m) {
      case 'char': {
        const i = seg(m.seg);
        const s = parts[i]!;
        if (s.length === 0) break;
        const at = m.at % s.length;
        parts[i] = s.slice(0, at) + m.to + s.slice(at + 1);
        break;
      }
      case 'insert': {
        const i = seg(m.seg);
        const s = parts[i]!;
        const at = m.at % (s.length + 1);
        parts[i] = s.slice(0, at) + m.s + s.slice(at);
        break;
      }
      case 'delete': {
        const i = seg(m.seg);
        const s = parts[i]!;
        const at = m.at % (s.length + 1);
        parts[i] = s.slice(0, at) + s.slice(at + m.n);
        break;
      }
      case 'pad':
        parts[seg(m.seg)] += m.s;
        break;
      case 'std-alphabet': {
        const i = seg(m.seg);
        parts[i] = Buffer.from(parts[i]!, 'base64url').toString('base64');
        break;
      }
      case 'trailing-bits': {
        // Same decoded bytes, different spelling: bump the last character within its unused bits.
        const i = seg(m.seg);
        const s = parts[i]!;
        if (s.length === 0) break;
        const last = B64.indexOf(s[s.length - 1]!);
        if (last < 0) break;
        parts[i] = s.slice(0, -1) + B64[(last + m.delta) % 64];
        break;
      }
      case 'tag':
        parts[0] = m.tag;
        break;
      case 'segments':
        if (m.how === 'drop') parts = parts.slice(0, -1);
        else if (m.how === 'dup') parts = [...parts, parts[parts.length - 1]!];
        else if (m.how === 'swap' && parts.length >= 3) parts = [parts[0]!, parts[2]!, parts[1]!];
        else if (m.how === 'extra') parts = [...parts, ''];
        else if (m.how === 'empty') parts[seg(1)] = '';
        break;
      case 'reencode': {
        // The same JSON meaning in other bytes: the MAC covers the spelling, so this never verifies.
        const i = seg(1);
        const bytes = Buffer.from(parts[i]!, 'base64url');
        let text = bytes.toString('utf8');
        try {
          const value = JSON.parse(text) as unknown;
          if (m.how === 'spaces') text = JSON.stringify(value, null, 1);
          else if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
            text = JSON.stringify(Object.fromEntries(Object.entries(value).reverse()));
          }
        } catch {
          text = ` ${text}`;
        }
        parts[i] = Buffer.from(text, 'utf8').toString('base64url');
        break;
      }
      case 'huge':
        parts[seg(m.seg)] += 'A'.repeat(m.n);
        break;
      case 'case': {
        const i = seg(m.seg);
        const s = parts[i]!;
        parts[i] = s === s.toUpperCase() ? s.toLowerCase() : s.toUpperCase();
        break;
      }
    }
  }
  return parts.join('.');
}

export type AudienceMutation =
  | 'same'
  | 'upper'
  | 'space-after'
  | 'space-before'
  | 'no-port'
  | 'other-port'
  | 'other-name'
  | 'empty'
  | 'suffix'
  | 'lookalike'
  | 'nul';

export const audienceMutationArb: fc.Arbitrary<AudienceMutation> = fc.constantFrom(
  'same',
  'upper',
  'space-after',
  'space-before',
  'no-port',
  'other-port',
  'other-name',
  'empty',
  'suffix',
  'lookalike',
  'nul',
);

export function mutateAudience(a: string, m: AudienceMutation): string {
  switch (m) {
    case 'same':
      return a;
    case 'upper':
      return a.toUpperCase();
    case 'space-after':
      return `${a} `;
    case 'space-before':
      return ` ${a}`;
    case 'no-port':
      return a.replace(/:\d+$/, '');
    case 'other-port':
      return a.replace(/:(\d+)$/, (_m, p: string) => `:${Number(p) + 1}`);
    case 'other-name':
      return `x${a}`;
    case 'empty':
      return '';
    case 'suffix':
      return `${a}/`;
    case 'lookalike':
      return a.replace('e', '\u0435');
    case 'nul':
      return `${a}\0`;
  }
}

/** An audience that is certainly not `a` (the audience-ignoring verifier must be caught every run). */
export function differentAudience(a: string, m: AudienceMutation): string {
  const b = mutateAudience(a, m);
  return b === a ? `${a}x` : b;
}
