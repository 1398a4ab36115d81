// Model-based properties of the operator plane over real HTTP: one served session per containment
// class × resolver, all over the same workdir, each generated tree built in place of the root (which
// is resolved on every request), and requests written byte for byte on a socket (test/helpers/http.ts:
// no URL parsing, no normalising). Every answer's status, code, bytes and etag must equal the
// reference model's; every listing's entries must equal the model's; no response carries a byte
// or a digest of a file outside the root.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import * as native from '../../src/addon/export.js';
import { filesManifest, openCapsule as launch, type Capsule as Launched } from '../helpers/capsule.js';
import { rawGet, type RawResponse, sha256Hex } from '../helpers/http.js';
import { tempDir } from '../helpers/tree.js';
import { describeTree, show } from './describe.js';
import * as model from './model.js';
import { requestArb, rawRequest, wireSafe, type RequestSpec } from './requests.js';
import { fuzzIt, guard } from './runner.js';
import { BIG_MAX_BYTES } from './thresholds.js';
import { compileTree, coverageTree, materialise, MAX_BYTES, prepareWorkdir, removeWorkdir, SECRET_MARK, treeArb, type Workdir } from './trees.js';
import { assertNoSecret } from '../helpers/secrets.js';

const CLASSES: model.Containment[] = ['sealed', 'advisory', 'scoped'];
const RESOLVERS: native.ResolverKind[] = native.openat2Available() ? ['openat2', 'walk'] : ['walk'];
const FILES = '/resources/files';

interface Served {
  containment: model.Containment;
  resolver: native.ResolverKind;
  maxBytes: number;
  launched: Launched;
}

let wd: Workdir;
const served: Served[] = [];

beforeAll(async () => {
  wd = prepareWorkdir(tempDir('rp-fuzz-http-'));
  const traceDir = join(wd.base, 'traces');
  mkdirSync(traceDir);
  for (const resolver of RESOLVERS) {
    for (const containment of CLASSES) {
      const launched = await launch({ workdir: wd.workdir, traceDir, yaml: filesManifest('out/', MAX_BYTES), containment, resolver });
      served.push({ containment, resolver, maxBytes: MAX_BYTES, launched });
    }
  }
  // One more with a ceiling above every read-path threshold: the budget, the pool and the cache see traffic.
  const big = await launch({ workdir: wd.workdir, traceDir, yaml: filesManifest('out/', BIG_MAX_BYTES), containment: 'sealed', resolver: RESOLVERS[0] });
  served.push({ containment: 'sealed', resolver: RESOLVERS[0]!, maxBytes: BIG_MAX_BYTES, launched: big });
});

afterAll(async () => {
  for (const s of served) await s.launched.close();
  removeWorkdir(wd);
}, 600_000);

/** How a generated relpath travels: the target bytes, and the variations of the request line. */
interface Wire {
  query: string | null;
  absoluteForm: boolean;
}

const wireArb: fc.Arbitrary<Wire> = fc.record({
  query: fc.option(fc.constantFrom('', 'x=1', '../../secret.txt', '%2e%2e', '#frag', '/resources/files/..'), { freq: 5 }),
  absoluteForm: fc.constantFrom(false, false, false, true),
});

function target(raw: model.Bytes, wire: Wire, port: number): model.Bytes {
  const path = `${FILES}/${wireSafe(raw)}${wire.query === null ? '' : `?${wire.query}`}`;
  return wire.absoluteForm ? `http://127.0.0.1:${port}${path}` : path;
}

/** The model's answer to a whole request target under one class. */
type Expected = { kind: 'read'; read: model.ModelRead } | { kind: 'list' } | { kind: 'too-long' };

// Node's parser refuses a header block (request line included) past 16 KiB: 431 bad_request. Near
// the edge the other headers decide; between these two lengths either answer is accepted.
const TOO_LONG = 16_500;
const MAYBE_TOO_LONG = 16_000;

function expectedFor(tree: ReturnType<typeof compileTree>, t: model.Bytes, containment: model.Containment, maxBytes: number): Expected {
  if (t.length > TOO_LONG) return { kind: 'too-long' };
  const path = model.targetPath(t);
  if (path === FILES || path === `${FILES}/`) return { kind: 'list' };
  return { kind: 'read', read: model.read(tree.root, path.slice(FILES.length + 1), containment, maxBytes) };
}

const noSecret = (res: RawResponse, label: string) => assertNoSecret(res.raw, label, { mark: SECRET_MARK, contents: wd.secrets });

function checkCommon(res: RawResponse, s: Served, label: string): void {
  expect(res.header('content-length'), label).toBe(String(res.body.length));
  expect(res.header('x-murmur-containment'), label).toBe(s.containment);
  expect(res.trailing.length, label).toBe(0);
  noSecret(res, label);
}

function checkRead(res: RawResponse, expected: model.ModelRead, s: Served, label: string): void {
  checkCommon(res, s, label);
  expect(res.status, label).toBe(model.STATUS[expected.code]);
  if (expected.code === 'ok') {
    expect(res.body.equals(expected.bytes), `${label}: bytes`).toBe(true);
    expect(res.header('etag'), label).toBe(`"sha256:${sha256Hex(res.body)}"`);
    expect(res.header('content-type'), label).toBe('application/octet-stream');
    expect(res.header('x-murmur-export-root'), label).toBe('out/');
  } else {
    expect(res.json().error, label).toBe(expected.code);
    expect(res.header('content-type'), label).toBe('application/json');
  }
}

function checkList(res: RawResponse, tree: ReturnType<typeof compileTree>, s: Served, label: string): void {
  checkCommon(res, s, label);
  const expected = model.list(tree.root, s.containment);
  if (!Array.isArray(expected)) {
    expect(res.status, label).toBe(model.STATUS[expected.code]);
    expect(res.json().error, label).toBe(expected.code);
    return;
  }
  expect(res.status, label).toBe(200);
  const body = res.json() as { root: string; containment_achieved: string; entries: Array<{ path: string; size_bytes: number; sha256: string }> };
  expect(body.root, label).toBe('out/');
  expect(body.containment_achieved, label).toBe(s.containment);
  expect(
    body.entries.map((e) => e.path),
    label,
  ).toEqual(expected.map((e) => e.path));
  body.entries.forEach((e, i) => {
    expect(e.size_bytes, `${label}: size of ${e.path}`).toBe(expected[i]!.content.length);
    expect(e.sha256, `${label}: sha256 of ${e.path}`).toBe(sha256Hex(expected[i]!.content));
  });
}

/** GET, once: an EAGAIN storm on the host no longer turns into io_error (regressions.test.ts). */
async function get(url: string, t: Buffer | string): Promise<RawResponse> {
  return rawGet(url, t);
}

/** The listing equals the model's; a secret fails at once. */
async function listMatches(fetch: () => Promise<RawResponse>, tree: ReturnType<typeof compileTree>, s: Served, label: string): Promise<void> {
  const res = await fetch();
  noSecret(res, label);
  checkList(res, tree, s, label);
}

describe('operator plane over real HTTP, against the reference model', () => {
  fuzzIt({
    name: 'http-read-list',
    file: import.meta.filename,
    runs: 12,
    // Every kind of entry and every size threshold, in every run.
    examples: () => {
      const { spec, nodes } = coverageTree();
      return [
        [
          spec,
          Array.from(
            { length: nodes },
            (_, node) =>
              [
                { base: { node }, transforms: [] },
                { query: null, absoluteForm: false },
              ] as [RequestSpec, Wire],
          ),
          FILES,
        ],
      ];
    },
    // Invariant: every answer's status, code, bytes and etag, and every listing, equal the model's; nothing outside the root is served.
    property: () =>
      fc.asyncProperty(
        treeArb,
        fc.array(fc.tuple(requestArb, wireArb), { minLength: 1, maxLength: 10 }),
        fc.constantFrom(FILES, `${FILES}/`, `${FILES}?x=1`, `${FILES}/?`),
        guard(async (spec, generated, listTarget) => {
          const tree = compileTree(spec, wd);
          materialise(tree, wd);
          // A few entries of the tree asked for plainly as well: a share of requests that pass lowering.
          const step = Math.max(1, Math.ceil(tree.paths.length / 6));
          const plain = tree.paths.flatMap((_, node) =>
            node % step === 0
              ? [
                  [
                    { base: { node }, transforms: [] },
                    { query: null, absoluteForm: false },
                  ] as [RequestSpec, Wire],
                ]
              : [],
          );
          const requests = [...generated, ...plain];
          const treeText = describeTree(tree); // once per tree: a deep tree renders slowly
          for (const s of served) {
            const port = Number(new URL(s.launched.url).port);
            for (const [recipe, wire] of requests) {
              const raw = rawRequest(recipe, tree.paths);
              const t = target(raw, wire, port);
              const label = `GET ${show(t)} under ${s.containment}/${s.resolver}\ntree:\n${treeText}`;
              const fetch = async () => {
                const t0 = Date.now();
                const res = await get(s.launched.url, Buffer.from(t, 'latin1'));
                if (process.env.FUZZ_DEBUG) console.error(`${Date.now() - t0} ms ${res.status} ${show(t).slice(0, 100)} ${s.containment}/${s.resolver}`);
                return res;
              };
              const expected = expectedFor(tree, t, s.containment, s.maxBytes);
              // An absolute-form target may not carry a fragment (RFC 9112's absolute-URI has
              // none): since the one Fastify pipeline (500c181) it is refused as unparseable,
              // where an origin-form one still has its fragment dropped. Either is accepted.
              const fragmentRefusable = wire.absoluteForm && t.includes('#') && expected.kind !== 'too-long';
              if (expected.kind === 'list' && !fragmentRefusable) {
                await listMatches(fetch, tree, s, label);
                continue;
              }
              const res = await fetch();
              noSecret(res, label);
              if (fragmentRefusable && res.status === 400) {
                expect(res.json().error, label).toBe('bad_request');
              } else if (expected.kind === 'list') {
                checkList(res, tree, s, label);
              } else if (expected.kind === 'too-long') {
                expect(res.status, label).toBe(431);
                expect(res.json().error, label).toBe('bad_request');
              } else if (!(t.length > MAYBE_TOO_LONG && res.status === 431)) {
                checkRead(res, expected.read, s, label);
              }
            }
            await listMatches(() => get(s.launched.url, listTarget), tree, s, `GET ${listTarget} under ${s.containment}/${s.resolver}\ntree:\n${treeText}`);
          }
        }),
      ),
    timeoutMs: 120_000,
  });

  fuzzIt({
    name: 'http-raw-bytes',
    // Invariant: a target with a byte the parser refuses is a catalogued 400 bad_request, never a read.
    file: import.meta.filename,
    runs: 60,
    // Bytes Node's parser refuses in a request target (controls, space, DEL, anything above 0x7e)
    // sent raw: a catalogued 400 bad_request, never a read, never a crash.
    property: () =>
      fc.asyncProperty(
        requestArb,
        fc.nat(),
        fc.integer({ min: 0, max: 255 }),
        guard(async (recipe, at, byte) => {
          fc.pre(byte <= 0x20 || byte >= 0x7f);
          const raw = rawRequest(recipe, [['a'], ['sub'], ['sub', 'a']]);
          const k = at % (raw.length + 1);
          // A space last only widens the gap before the version, which the parser allows.
          fc.pre(!(byte === 0x20 && k === raw.length));
          const t = `${FILES}/${raw.slice(0, k)}${String.fromCharCode(byte)}${raw.slice(k)}`;
          const s = served[at % served.length]!;
          const res = await rawGet(s.launched.url, Buffer.from(t, 'latin1'));
          const label = `GET ${show(t)} under ${s.containment}/${s.resolver}`;
          expect(res.status, label).toBe(400);
          expect(res.json().error, label).toBe('bad_request');
          noSecret(res, label);
        }),
      ),
  });
});
