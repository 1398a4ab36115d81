// Generated request paths over an adversarial alphabet. A request *recipe* is plain data: aim at a
// path that exists in the generated tree (or at garbage), then apply transforms — percent-encoding
// (any byte, `/` included, either case), inserted `.`/`..`/empty components in every spelling
// (encoded, double-encoded, overlong UTF-8, look-alike dots), other separators (`\`, `%5c`, look-alike
// slashes), NUL, bidi and invisible code points, invalid and over-long UTF-8, very long and very
// deep paths. The raw result is the part of a request target after `/resources/files/`, as latin1.
import fc from 'fast-check';
import type { Bytes } from './model.js';

const utf8 = (s: string): Bytes => Buffer.from(s, 'utf8').toString('latin1');

export type Transform =
  | { t: 'pct'; seed: number; density: 'all' | 'some' | 'special'; upper: boolean; slashes: boolean }
  | { t: 'insert'; at: number; token: Bytes }
  | { t: 'prefix'; s: Bytes }
  | { t: 'suffix'; s: Bytes }
  | { t: 'sep'; s: Bytes; all: boolean; at: number }
  | { t: 'splice'; at: number; s: Bytes }
  | { t: 'deep'; n: number; front: boolean }
  | { t: 'long'; total: number; seg: number };

export interface RequestSpec {
  base: { node: number } | { garbage: Bytes };
  transforms: Transform[];
}

export const DOT_TOKENS: readonly Bytes[] = [
  '.',
  '..',
  '',
  '%2e',
  '%2E',
  '%2e%2e',
  '%2E%2E',
  '%2e%2E',
  '.%2e',
  '%2e.',
  '%252e%252e',
  '%252e',
  '%c0%ae%c0%ae',
  '%c0%ae',
  '%C0%AE.',
  '%e0%80%ae%e0%80%ae',
  '%e2%80%a4%e2%80%a4',
  '%ef%bc%8e%ef%bc%8e',
  utf8('\uff0e\uff0e'),
  '...',
  '..\\',
  '\\..',
  '%5c..',
  '..%5c',
  '%2e%2e%5c',
  '%00',
  '..%00',
  '%2e%2e%2f',
  '..%2f',
  '%2f..',
  '%u002e%u002e',
  '%%32%65',
  '%%2e',
  '.%252e',
  '%2e%2e%00',
  '..;',
  '%2e%2e;',
  '.%00.',
  '%ef%bb%bf..',
  '..%ef%bb%bf',
  '%e2%80%ae..',
  '%2e%2e%20',
  ' ..',
  '..%09',
];

const PREFIXES: readonly Bytes[] = [
  '/',
  '//',
  '%2f',
  '%2F',
  '\\',
  '%5c',
  './',
  '%2e/',
  '../',
  '%2e%2e/',
  '%2e%2e%2f',
  '%00',
  '%ef%bb%bf',
  '%e2%80%ae',
  utf8('\ufeff'),
  'C:',
  'C:\\',
  '~/',
  '%7e/',
  '%252e%252e%252f',
  '%c0%af',
  '%e0%80%af',
  utf8('\u2215'),
  '\0',
];

const SUFFIXES: readonly Bytes[] = [
  '/',
  '//',
  '/.',
  '/..',
  '%2f',
  '%2F',
  '%00',
  '%00.txt',
  '\0',
  '%20',
  '.',
  '%2e',
  '%ef%bb%bf',
  utf8('\ufeff'),
  '\\',
  '%5c',
  '?x',
  '#x',
  '/%2e%2e',
  ';x',
  '%3f',
  '%23',
  '::$DATA',
  '%',
  '%2',
  '%zz',
  '/%2e',
  '%2f%2e%2e',
  '/%00',
];

const SEPARATORS: readonly Bytes[] = [
  '\\',
  '%5c',
  '%5C',
  '%2f',
  '%2F',
  '%e2%88%95',
  '%ef%bc%8f',
  '//',
  '/./',
  '/%2e/',
  utf8('\u2215'),
  '%c0%af',
  '%e0%80%af',
  '%252f',
];

const SPLICES: readonly Bytes[] = [
  '\0',
  '%00',
  '\xff',
  '%ff',
  '%FF',
  '%c0%ae',
  '%ed%a0%80',
  '%f4%90%80%80',
  '%c3',
  '\xc3',
  '\xc0\xae',
  '%e2%80%ae',
  '%e2%80%8f',
  '%ef%bb%bf',
  utf8('\u202e'),
  '%e2%80%8b',
  '%cc%81',
  utf8('\u0301'),
  '%2f',
  '/',
  '%',
  '%%',
  '%2',
  '%g0',
  '%25',
  '%2e',
  '.',
  '\\',
];

const GARBAGE_UNITS: readonly Bytes[] = [
  '.',
  '.',
  '/',
  '/',
  '%',
  '%',
  '0',
  '2',
  '5',
  'c',
  'e',
  'E',
  'f',
  'F',
  'a',
  'A',
  '\0',
  '\\',
  'sub',
  'a',
  utf8('é'),
  '\xff',
  '\xc0',
  '\xae',
  '%c0%ae',
  utf8('\u202e'),
  ' ',
  '?',
  '#',
  ';',
  '%2e',
  '%2f',
  '%5c',
  '%00',
];

const transformArb: fc.Arbitrary<Transform> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant('pct' as const),
      seed: fc.nat(),
      density: fc.constantFrom('all', 'some', 'special') as fc.Arbitrary<'all'>,
      upper: fc.boolean(),
      slashes: fc.boolean(),
    }),
  },
  { weight: 6, arbitrary: fc.record({ t: fc.constant('insert' as const), at: fc.nat(), token: fc.constantFrom(...DOT_TOKENS) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('prefix' as const), s: fc.constantFrom(...PREFIXES) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('suffix' as const), s: fc.constantFrom(...SUFFIXES) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('sep' as const), s: fc.constantFrom(...SEPARATORS), all: fc.boolean(), at: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('splice' as const), at: fc.nat(), s: fc.constantFrom(...SPLICES) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('deep' as const),
      n: fc.oneof(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 250, max: 262 })),
      front: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('long' as const), total: fc.integer({ min: 3900, max: 4300 }), seg: fc.integer({ min: 60, max: 300 }) }) },
);

export const requestArb: fc.Arbitrary<RequestSpec> = fc.record({
  base: fc.oneof(
    { weight: 7, arbitrary: fc.record({ node: fc.nat() }) },
    { weight: 1, arbitrary: fc.record({ garbage: fc.array(fc.constantFrom(...GARBAGE_UNITS), { maxLength: 24 }).map((a) => a.join('')) }) },
  ),
  transforms: fc.oneof(
    { weight: 4, arbitrary: fc.constant([] as Transform[]) },
    { weight: 5, arbitrary: fc.array(transformArb, { minLength: 1, maxLength: 3 }) },
  ),
});

const ORDER: Record<Transform['t'], number> = { insert: 0, deep: 1, long: 2, sep: 3, pct: 4, splice: 5, prefix: 6, suffix: 7 };

const SPECIAL = /[./%\\?#;\x00-\x20\x7f-\xff]/;

function pct(byte: number, upper: boolean): Bytes {
  const h = byte.toString(16).padStart(2, '0');
  return `%${upper ? h.toUpperCase() : h}`;
}

/** The raw relpath a recipe names in a tree whose existing paths are `paths` (index 0 is the root). */
export function rawRequest(spec: RequestSpec, paths: readonly Bytes[][]): Bytes {
  let components: Bytes[];
  if ('node' in spec.base) {
    const p = paths[spec.base.node % paths.length]!;
    components = p.length === 0 ? ['f.txt'] : [...p];
  } else {
    components = spec.base.garbage.split('/');
  }
  const ts = [...spec.transforms].sort((a, b) => ORDER[a.t] - ORDER[b.t]);
  let s: Bytes | null = null;
  for (const t of ts) {
    if (s === null && ORDER[t.t] >= ORDER.sep) s = components.join('/');
    switch (t.t) {
      case 'insert':
        components.splice(t.at % (components.length + 1), 0, t.token);
        break;
      case 'deep': {
        const pad = Array<Bytes>(t.n).fill('a');
        components = t.front ? [...pad, ...components] : [...components, ...pad];
        break;
      }
      case 'long': {
        let total = components.join('/').length;
        while (total < t.total) {
          const seg = 'x'.repeat(Math.min(t.seg, Math.max(1, t.total - total - 1)));
          components.push(seg);
          total += seg.length + 1;
        }
        break;
      }
      case 'sep': {
        const parts = s!.split('/');
        if (parts.length < 2) break;
        if (t.all) s = parts.join(t.s);
        else {
          const k = 1 + (t.at % (parts.length - 1));
          s = `${parts.slice(0, k).join('/')}${t.s}${parts.slice(k).join('/')}`;
        }
        break;
      }
      case 'pct': {
        let out = '';
        for (let i = 0; i < s!.length; i++) {
          const c = s![i]!;
          const code = c.charCodeAt(0);
          const chosen = t.density === 'all' || (t.density === 'some' ? ((t.seed >>> (i % 29)) & 1) === 1 : SPECIAL.test(c));
          if (chosen && (c !== '/' || t.slashes)) out += pct(code, t.upper);
          else out += c;
        }
        s = out;
        break;
      }
      case 'splice': {
        const k = t.at % (s!.length + 1);
        s = s!.slice(0, k) + t.s + s!.slice(k);
        break;
      }
      case 'prefix':
        s = t.s + s!;
        break;
      case 'suffix':
        s = s! + t.s;
        break;
    }
  }
  return s ?? components.join('/');
}

/**
 * A raw relpath as it can travel in a request line: every byte Node's HTTP parser refuses in a
 * target (controls, space, DEL and every byte above 0x7e) is percent-encoded, which the server's
 * single decode turns back into the same byte, so the model's answer is unchanged.
 */
export function wireSafe(raw: Bytes): Bytes {
  let out = '';
  for (const c of raw) {
    const code = c.charCodeAt(0);
    out += code <= 0x20 || code >= 0x7f ? pct(code, true) : c;
  }
  return out;
}
