// Properties of the manifest loader. Generated and mutated YAML never crashes parseManifest: the
// answer is a manifest or a ManifestError with a catalogued code (E-MAN-003, E-CAP-001, E-CAP-008;
// E-CAP-007 needs a filesystem and belongs to the launch). For the scalar grammars SPEC section 2
// spells out (byte counts, durations) and the E-CAP-008 rule, a small model predicts the outcome
// exactly. Through the real CLI, a sample of refused manifests exits 2 from both `explain-scope` and
// `serve`, printing the diagnostic, and `serve` creates nothing: no workdir, no trace, no records.
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { ManifestError, parseManifest, type Manifest } from '../../src/manifest/model.js';
import { runCliAsync } from '../helpers/cli.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { fuzzIt, guard, guardSync } from './runner.js';

const CATALOGUED = ['E-MAN-003', 'E-CAP-001', 'E-CAP-008'];

/** parseManifest's answer, with anything but a catalogued ManifestError rethrown as a failure. */
function outcome(text: string): { ok: true; manifest: Manifest } | { ok: false; error: ManifestError } {
  try {
    return { ok: true, manifest: parseManifest(text) };
  } catch (error) {
    if (!(error instanceof ManifestError)) {
      throw new Error(`parseManifest crashed with ${String((error as Error)?.stack ?? error)}\non ${JSON.stringify(text.slice(0, 2000))}`);
    }
    if (!CATALOGUED.includes(error.code)) throw new Error(`uncatalogued code ${error.code}`);
    if (typeof error.message !== 'string' || !error.render().startsWith(`error[${error.code}]: `)) throw new Error('a diagnostic that does not render');
    return { ok: false, error };
  }
}

// ── The grammars (SPEC section 2), modelled ─────────────────────────────────────────────────────

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

function scaled(text: string, grammar: RegExp, unit: (suffix: string | undefined) => bigint): number | null {
  const m = grammar.exec(text.trim());
  if (!m) return null;
  const value = BigInt(m[1]!) * unit(m[2]);
  return value === 0n || value > MAX_SAFE ? null : Number(value);
}

/** Trimmed ASCII digits, optional case-sensitive Ki/Mi/Gi; > 0; no overflow (2^53 - 1). */
export function byteCount(text: string): number | null {
  return scaled(text, /^([0-9]+)(Ki|Mi|Gi)?$/, (s) => (s === undefined ? 1n : { Ki: 1024n, Mi: 1024n ** 2n, Gi: 1024n ** 3n }[s]!));
}

/** Trimmed digits, optional lowercase s/m/h/d (bare = seconds); > 0; no overflow. */
export function duration(text: string): number | null {
  return scaled(text, /^([0-9]+)([smhd])?$/, (s) => (s === undefined ? 1n : { s: 1n, m: 60n, h: 3600n, d: 86400n }[s]!));
}

const digits = fc.oneof(
  fc.constantFrom('0', '1', '10', '010', '00', '900', '901', '15', '9007199254740991', '9007199254740992', '99999999999999999999'),
  fc.integer({ min: 0, max: 100_000 }).map(String),
  fc.stringMatching(/^[0-9]{1,25}$/),
);
const space = fc.constantFrom('', '', '', ' ', '  ', '\t', '\u00a0', '\n');

function scalarArb(suffixes: string[]): fc.Arbitrary<string> {
  return fc.oneof(
    {
      weight: 6,
      arbitrary: fc
        .tuple(space, digits, fc.constantFrom('', '', ' '), fc.constantFrom(...suffixes), space)
        .map(([a, d, mid, s, b]) => `${a}${d}${s === '' ? '' : mid}${s}${b}`),
    },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '1e3',
        '0x10',
        '-1',
        '+10',
        '1.5',
        '1_000',
        '',
        ' ',
        '10Mi10',
        '\uff11\uff10',
        '\u0663',
        'Mi',
        '1 0',
        '1,000',
        'NaN',
        'Infinity',
        '0o10',
        '.5',
      ),
    },
  );
}

const byteSuffixes = ['', 'Ki', 'Mi', 'Gi', 'ki', 'KI', 'MB', 'K', 'i', 'KiB', 'mi', 'Ti'];
const durationSuffixes = ['', 's', 'm', 'h', 'd', 'S', 'M', 'ms', 'min', 'w', 'y', 'sec'];

/** A value as YAML: quoted (its text exactly), plain when that is still a plain scalar, or absent. */
type Field = { text: string; quoted: boolean } | null;

const fieldArb = (suffixes: string[]): fc.Arbitrary<Field> =>
  fc.option(
    fc.record({ text: scalarArb(suffixes), quoted: fc.boolean() }).map((f) => ({ ...f, quoted: f.quoted || !/^[0-9]+([KMG]i|[smhd])?$/.test(f.text) })),
    { freq: 5 },
  );

function emit(key: string, f: Field, indent: string): string {
  if (f === null) return '';
  return `${indent}${key}: ${f.quoted ? JSON.stringify(f.text) : f.text}\n`;
}

describe('the manifest loader', () => {
  fuzzIt({
    name: 'manifest-grammar',
    // Invariant: byte counts, durations and the E-CAP-008 rule give exactly the model's value or diagnostic.
    file: import.meta.filename,
    runs: 400,
    property: () =>
      fc.property(
        fieldArb(byteSuffixes),
        fc.boolean(),
        fieldArb(durationSuffixes),
        fieldArb(byteSuffixes),
        fc.constantFrom(null, 'exit', 'sleep'),
        guardSync((filesMax, peer, ttl, peerMax, after) => {
          const text = [
            'name: fuzz\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n',
            emit('max_bytes', filesMax, '    '),
            peer ? `  peer_files:\n    root: peer/\n${emit('max_ttl', ttl, '    ')}${emit('max_bytes', peerMax, '    ')}` : '',
            after === null ? '' : `lifecycle:\n  after_task: ${after}\n`,
          ].join('');
          const got = outcome(text);
          // The model, in the loader's document order.
          const fail = (field: string) => {
            expect(got.ok, text).toBe(false);
            if (!got.ok) {
              expect(got.error.code, text).toBe('E-MAN-003');
              expect(got.error.message.startsWith(`${field} `), `${text}\n${got.error.message}`).toBe(true);
            }
          };
          const filesBytes = filesMax === null ? 10 * 1024 * 1024 : byteCount(filesMax.text);
          if (filesBytes === null) return fail('exports.files.max_bytes');
          const ttlSecs = !peer || ttl === null ? null : duration(ttl.text);
          if (peer && ttl !== null && ttlSecs === null) return fail('exports.peer_files.max_ttl');
          const peerBytes = !peer ? null : peerMax === null ? 10 * 1024 * 1024 : byteCount(peerMax.text);
          if (peer && peerBytes === null) return fail('exports.peer_files.max_bytes');
          if (peer && after === 'sleep' && (ttlSecs === null || ttlSecs > 900)) {
            expect(got.ok ? 'ok' : got.error.code, text).toBe('E-CAP-008');
            return;
          }
          expect(got.ok, got.ok ? text : `${text}\n${got.error.render()}`).toBe(true);
          if (!got.ok) return;
          expect(got.manifest.files?.maxBytes).toBe(filesBytes);
          expect(got.manifest.peerFiles?.maxBytes ?? null).toBe(peerBytes);
          expect(got.manifest.peerFiles?.maxTtlSecs ?? null).toBe(ttlSecs);
          if (peer) expect(got.manifest.peerFiles!.effectiveMaxTtlSecs).toBe(ttlSecs ?? 3600);
        }),
      ),
  });

  fuzzIt({
    name: 'manifest-chaos',
    // Invariant: any YAML gives a manifest or a catalogued ManifestError that renders, never a crash.
    file: import.meta.filename,
    runs: 250,
    property: () =>
      fc.property(
        chaosArb,
        guardSync((text: string) => void outcome(text)),
      ),
  });
});

// ── Chaotic YAML ─────────────────────────────────────────────────────────────────────────────────

const TEMPLATES = [
  'name: reporter\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 1Mi\n  peer_files:\n    root: out/\n    max_ttl: 10m\n    max_bytes: 1Ki\ncapabilities:\n  peer_fetch:\n    allow:\n      - http://localhost:8080\n      - peer.example:443\n  network:\n    allow:\n      - https://api.example.com\n      - localhost\nlifecycle:\n  after_task: sleep\n',
  'name: x\nversion: 1.0\n',
  'name: x\nversion: "1"\nexports: {files: {root: "out", mode: read-only}}\ncapabilities: {network: {allow: [localhost:1, "http://[::1]:80/"]}}\n',
  'name: &n x\nversion: *n\nexports:\n  files: &f\n    root: out/\n    mode: read-only\n  peer_files:\n    <<: *f\n    max_ttl: 1h\n',
];

const YAML_TOKENS = [
  ':',
  ': ',
  '-',
  '- ',
  '[',
  ']',
  '{',
  '}',
  ',',
  '&a ',
  '*a',
  '*b',
  '!',
  '!!str ',
  '!!int ',
  '!!binary ',
  '!!set ',
  '!!omap ',
  '!!timestamp ',
  '!foo ',
  '|',
  '>',
  '|-',
  '#',
  "'",
  '"',
  '%',
  '@',
  '`',
  '\t',
  '\n',
  '\n  ',
  '\n---\n',
  '\n...\n',
  '<<: ',
  '? ',
  '\0',
  '\ufeff',
  '\r',
  '\u2028',
  'null',
  '~',
  'true',
  'NaN',
  '.inf',
  '0x10',
  '1e999',
  '__proto__',
  'constructor',
  'max_bytes',
  'root',
  'allow',
  '..',
  '/',
  '\\',
  '\x85',
  'é',
  '\ud83d\ude00',
  '"\\u0000"',
  '"\\x00"',
  '%YAML 1.1\n',
  '%TAG ! tag:x,2000:\n',
  '\n  - ',
  '\n    ',
  ': |\n  ',
  'exports:',
  'files:',
];

type Edit = { at: number; del: number; insert: string };

const editArb: fc.Arbitrary<Edit> = fc.record({
  at: fc.nat(),
  del: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 8 })),
  insert: fc.oneof(fc.constantFrom(...YAML_TOKENS), fc.string({ maxLength: 4 })),
});

function applyEdits(text: string, edits: Edit[]): string {
  let t = text;
  for (const e of edits) {
    const at = e.at % (t.length + 1);
    t = t.slice(0, at) + e.insert + t.slice(at + e.del);
  }
  return t;
}

function billionLaughs(levels: number, width: number): string {
  const lines = ['name: x', 'version: "1"', 'a0: &a0 "lol"'];
  for (let i = 1; i <= levels; i++)
    lines.push(
      `a${i}: &a${i} [${Array(width)
        .fill(`*a${i - 1}`)
        .join(', ')}]`,
    );
  lines.push(`exports: {files: {root: *a${levels}, mode: read-only}}`);
  return `${lines.join('\n')}\n`;
}

const chaosArb: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: fc.tuple(fc.constantFrom(...TEMPLATES), fc.array(editArb, { minLength: 1, maxLength: 6 })).map(([t, e]) => applyEdits(t, e)) },
  {
    weight: 3,
    // Every manifest key given an arbitrary JSON value (JSON is YAML).
    arbitrary: fc
      .record(
        {
          name: fc.jsonValue({ maxDepth: 2 }),
          version: fc.jsonValue({ maxDepth: 1 }),
          exports: fc.oneof(
            fc.jsonValue({ maxDepth: 3 }),
            fc.record({
              files: fc.record({ root: fc.jsonValue({ maxDepth: 1 }), mode: fc.constantFrom('read-only', 'rw', 1), max_bytes: fc.jsonValue({ maxDepth: 1 }) }),
              peer_files: fc.jsonValue({ maxDepth: 2 }),
            }),
          ),
          capabilities: fc.oneof(
            fc.jsonValue({ maxDepth: 3 }),
            fc.record({
              network: fc.record({ allow: fc.array(fc.oneof(fc.string(), fc.webUrl(), fc.domain())) }),
              peer_fetch: fc.record({ allow: fc.jsonValue({ maxDepth: 2 }) }),
            }),
          ),
          lifecycle: fc.jsonValue({ maxDepth: 2 }),
        },
        { requiredKeys: [] },
      )
      .map((o) => JSON.stringify(o)),
  },
  { weight: 1, arbitrary: fc.tuple(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 12 })).map(([l, w]) => billionLaughs(l, w)) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 5_000 }).map((d) => `name: x\nversion: "1"\nexports: ${'['.repeat(d)}${']'.repeat(d)}\n`) },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 1, max: 1_000 })
      .map((d) => `name: x\nversion: "1"\nlifecycle:\n${Array.from({ length: d }, (_, i) => `${' '.repeat(i + 1)}k${i}:`).join('\n')} v\n`),
  },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b).toString('utf8')) },
  { weight: 1, arbitrary: fc.constantFrom(`name: x\nversion: "1"\nnote: ${'x'.repeat(1 << 20)}\n`, `${'# c\n'.repeat(20_000)}name: x\nversion: "1"\n`) },
);

export { chaosArb };

// ── Through the real CLI ─────────────────────────────────────────────────────────────────────────

describe('refused manifests through the real CLI', () => {
  let base: string;
  beforeAll(() => {
    base = tempDir('rp-fuzz-cli-');
  });
  afterAll(() => removeTree(base));
  let n = 0;

  fuzzIt({
    name: 'manifest-cli',
    // Invariant: a refused manifest exits 2 from explain-scope and serve with its diagnostic, and serve creates nothing.
    file: import.meta.filename,
    runs: 3,
    timeoutMs: 120_000,
    property: () =>
      fc.asyncProperty(
        chaosArb.filter((t) => !outcome(t).ok && t.length < 200_000 && !t.includes('\0')),
        guard(async (text) => {
          const expected = outcome(text);
          if (expected.ok) return;
          const dir = join(base, `case-${n++}`);
          mkdirSync(dir);
          const manifest = join(dir, 'manifest.yaml');
          writeFileSync(manifest, text);
          const records = join(dir, 'records');
          mkdirSync(records);
          const env = { RESOURCE_PLANE_RECORDS_DIR: records };
          const diagnostic = `error[${expected.error.code}]: `;

          const explain = await runCliAsync(['explain-scope', '--manifest', manifest], env);
          expect(explain.status, explain.stderr).toBe(2);
          expect(explain.stderr.startsWith(diagnostic), explain.stderr).toBe(true);

          const workdir = join(dir, 'never-created');
          const trace = join(dir, 'trace.jsonl');
          const serve = await runCliAsync(['serve', '--workdir', workdir, '--manifest', manifest, '--trace', trace], env);
          expect(serve.status, serve.stderr).toBe(2);
          expect(serve.stderr.startsWith(diagnostic), serve.stderr).toBe(true);
          expect(existsSync(workdir)).toBe(false);
          expect(existsSync(trace)).toBe(false);
          expect(readdirSync(records)).toEqual([]);

          // The default manifest inside an existing workdir: refused the same way, nothing added.
          const existing = join(dir, 'workdir');
          mkdirSync(existing);
          writeFileSync(join(existing, 'murmur.yaml'), text);
          const inside = await runCliAsync(['serve', '--workdir', existing], env);
          expect(inside.status, inside.stderr).toBe(2);
          expect(inside.stderr.startsWith(diagnostic), inside.stderr).toBe(true);
          expect(readdirSync(existing)).toEqual(['murmur.yaml']);
          expect(readdirSync(records)).toEqual([]);
        }),
      ),
  });
});
