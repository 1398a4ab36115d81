// Round three: HTTP semantics and the trace, predicted whole. A served capsule's operator plane gets
// generated requests (every method Node parses a few of, the listing, files of every read path, a
// missing file, a directory, an escape, a file over max_bytes), with If-None-Match in every form
// RFC 9110 13.1.2 gives (the current strong etag, the same tag weak, `*`, lists with the tag at any
// place among others, another file's etag, an older version's, unquoted and malformed tags), a
// Range header, sent one at a time or pipelined on one keep-alive connection, while the generation
// advances and files are replaced between requests. The model predicts each answer's status, its
// header names in order (SPEC 4's order; none of content-length on a 304, allow on a 405), the
// values of the validator, containment, generation and export-root headers, its body, and
// the one trace line it must leave with every field (SPEC 8's order). The trace is compared line
// for line: nothing missing, nothing extra.
import { createHash } from 'node:crypto';
import { mkdirSync, renameSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import type { RawResponse } from '../helpers/http.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, type Served } from './capsules.js';
import { fuzzIt, guard } from './runner.js';
import { LIMITS } from '../../src/native.js';
import { exchangeAll, fieldsOf, TraceTail, type WireRequest } from './wire.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const MAX_BYTES = 1024 * 1024;
const ROOT = 'out/';
const CONTAINMENT = 'sealed';

/** The served files: one per read path (empty, the synchronous read, a copied body, a streamed one). */
const FILES = ['empty', 'a.txt', 'b.bin', 'c.bin', 'big.bin'] as const;
const SIZES: Record<string, number> = { empty: 0, 'a.txt': 10, 'b.bin': LIMITS.syncReadMaxBytes + 1, 'c.bin': LIMITS.copiedReadMaxBytes + 1, 'big.bin': LIMITS.streamThresholdBytes + 4097 };
const TOO_BIG = 'huge.bin';

/** README, Errors: the operator plane's messages, word for word. */
const MESSAGE: Record<string, string> = {
  not_found: 'no such file under the export root',
  outside_root: 'the requested path resolves outside the export root',
  not_a_regular_file: 'the requested path is not a regular file',
  too_large: `file exceeds the declared exports.files.max_bytes of ${MAX_BYTES} bytes`,
  method_not_allowed: 'the resource plane serves GET only; it has no write path',
};
const STATUS: Record<string, number> = { ok: 200, not_modified: 304, not_found: 404, outside_root: 403, not_a_regular_file: 403, too_large: 413, method_not_allowed: 405 };

let base: string;
let served: Served;
let tail: TraceTail;
let sessionStartId: string;
/** The current bytes of each file, and every etag each file has had. */
const current = new Map<string, Buffer>();
const history = new Map<string, string[]>();

function content(name: string, size: number, salt: number): Buffer {
  const out = Buffer.alloc(size);
  for (let i = 0; i < size; i++) out[i] = (i * 31 + salt * 101 + name.length * 7 + (i >>> 9)) & 0xff;
  return out;
}

function place(name: string, bytes: Buffer): void {
  const path = join(served.workdir, 'out', name);
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, bytes);
  renameSync(tmp, path);
  current.set(name, bytes);
  history.set(name, [...(history.get(name) ?? []), `"sha256:${sha(bytes)}"`]);
}

beforeAll(async () => {
  base = tempDir('rp-fuzz-sem-');
  const workdir = join(base, 'workdir');
  mkdirSync(join(workdir, 'out', 'sub'), { recursive: true });
  writeFileSync(join(workdir, 'out', 'sub', 'inner.txt'), 'inner');
  const yaml = `name: semantics\nversion: "1"\nexports:\n  files:\n    root: ${ROOT}\n    mode: read-only\n    max_bytes: ${MAX_BYTES}\n`;
  served = await serveCapsule({ workdir, yaml, traceDir: join(base, 'traces'), containment: CONTAINMENT });
  for (const name of FILES) place(name, content(name, SIZES[name]!, 0));
  writeFileSync(join(workdir, 'out', TOO_BIG), '');
  truncateSync(join(workdir, 'out', TOO_BIG), MAX_BYTES + 1);
  current.set(TOO_BIG, Buffer.alloc(MAX_BYTES + 1));
  current.set('sub/inner.txt', Buffer.from('inner'));
  tail = new TraceTail(served.tracePath);
  const first = tail.next();
  expect(first[0]?.event_type).toBe('session_start');
  sessionStartId = first[0]!.event_id as string;
});

afterAll(async () => {
  await served?.close();
  removeTree(base);
});

type Target = { t: 'list'; slash: boolean } | { t: 'file'; name: string } | { t: 'missing' } | { t: 'dir' } | { t: 'outside' } | { t: 'too-big' };
type Inm =
  | { k: 'own' }
  | { k: 'weak-own' }
  | { k: 'star' }
  | { k: 'list'; at: number; others: Array<'weak-own' | 'other-file' | 'old' | 'garbage'> }
  | { k: 'other-file'; name: string }
  | { k: 'old' }
  | { k: 'unquoted-own' }
  | { k: 'garbage'; s: string };
interface Req {
  method: string;
  target: Target;
  inm: Inm | null;
  range: boolean;
}
type Step = { s: 'req'; req: Req } | { s: 'advance' } | { s: 'replace'; name: string; salt: number };

const targetArb: fc.Arbitrary<Target> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ t: fc.constant('list' as const), slash: fc.boolean() }) },
  { weight: 8, arbitrary: fc.record({ t: fc.constant('file' as const), name: fc.constantFrom(...FILES) }) },
  { weight: 1, arbitrary: fc.constantFrom<Target>({ t: 'missing' }, { t: 'dir' }, { t: 'outside' }, { t: 'too-big' }) },
);
const inmArb: fc.Arbitrary<Inm> = fc.oneof(
  fc.constant<Inm>({ k: 'own' }),
  fc.constant<Inm>({ k: 'weak-own' }),
  fc.constant<Inm>({ k: 'star' }),
  fc.record({ k: fc.constant('list' as const), at: fc.nat({ max: 3 }), others: fc.array(fc.constantFrom('weak-own', 'other-file', 'old', 'garbage') as fc.Arbitrary<'old'>, { minLength: 1, maxLength: 3 }) }),
  fc.record({ k: fc.constant('other-file' as const), name: fc.constantFrom(...FILES) }),
  fc.constant<Inm>({ k: 'old' }),
  fc.constant<Inm>({ k: 'unquoted-own' }),
  fc.record({ k: fc.constant('garbage' as const), s: fc.constantFrom('"sha256:"', '""', 'W/""', '"*"', '**', 'sha256:', ',', '"sha256:zz"') }),
);
const reqArb: fc.Arbitrary<Req> = fc.record({
  method: fc.oneof({ weight: 8, arbitrary: fc.constant('GET') }, { weight: 3, arbitrary: fc.constantFrom('HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'PROPFIND') }),
  target: targetArb,
  inm: fc.option(inmArb, { freq: 2, nil: null }),
  range: fc.boolean(),
});
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 8, arbitrary: reqArb.map((req) => ({ s: 'req' as const, req })) },
  { weight: 1, arbitrary: fc.constant<Step>({ s: 'advance' }) },
  { weight: 1, arbitrary: fc.record({ s: fc.constant('replace' as const), name: fc.constantFrom(...FILES), salt: fc.integer({ min: 1, max: 1000 }) }) },
);

const etagOf = (name: string) => `"sha256:${sha(current.get(name)!)}"`;

/** The If-None-Match value a generated spec names for a read of `name` (null: the target is no file). */
function inmValue(inm: Inm, name: string | null): string {
  const own = name && current.has(name) ? etagOf(name) : '"sha256:' + '0'.repeat(64) + '"';
  const old = () => {
    const h = name ? history.get(name) ?? [] : [];
    const prior = h.filter((e) => e !== own);
    return prior.length > 0 ? prior[prior.length - 1]! : `"sha256:${'f'.repeat(64)}"`;
  };
  const other = (n: string) => (n === name ? etagOf(FILES[(FILES.indexOf(n as (typeof FILES)[number]) + 1) % FILES.length]!) : etagOf(n));
  switch (inm.k) {
    case 'own': return own;
    case 'weak-own': return `W/${own}`;
    case 'star': return '*';
    case 'other-file': return other(inm.name);
    case 'old': return old();
    case 'unquoted-own': return own.slice(1, -1);
    case 'garbage': return inm.s;
    case 'list': {
      const members = inm.others.map((o) => (o === 'weak-own' ? `W/${own}` : o === 'other-file' ? other('a.txt') : o === 'old' ? old() : '"x"'));
      members.splice(inm.at % (members.length + 1), 0, own);
      return members.join(inm.at % 2 === 0 ? ', ' : ',');
    }
  }
}

/** Whether the value names the current strong etag (or is `*`): the model's RFC 9110 13.1.2, strong comparison. */
function matches(value: string, own: string): boolean {
  if (value.trim() === '*') return true;
  return value.split(',').map((m) => m.trim()).some((m) => m === own);
}

interface Expected {
  status: number;
  /** Header names in order, without date, connection and keep-alive (Node's own). */
  names: string[];
  values: Record<string, string>;
  body: Buffer | 'listing' | null;
  /** The trace line's fields, event_type first, in the spec's order. */
  trace: Record<string, unknown>;
}

function listingFiles(): string[] {
  return [...current.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

function predict(req: Req, generation: number): { expected: Expected; wire: WireRequest } {
  const headers: Array<[string, string]> = [];
  const path = req.target.t === 'list' ? (req.target.slash ? '/resources/files/' : '/resources/files')
    : `/resources/files/${req.target.t === 'file' ? req.target.name : req.target.t === 'missing' ? 'nothing-here' : req.target.t === 'dir' ? 'sub' : req.target.t === 'outside' ? '..%2fsecret' : TOO_BIG}`;
  const name = req.target.t === 'file' ? req.target.name : null;
  let inm: string | null = null;
  if (req.inm) headers.push(['If-None-Match', (inm = inmValue(req.inm, name))]);
  if (req.range) headers.push(['Range', 'bytes=0-0']);
  const wire = { method: req.method, target: path, headers };
  const gen = String(generation);
  const refusal = (code: string): Expected => {
    // SPEC 3: the class header on every response (a refusal's, last: the admission's onSend adds it).
    const names = ['content-type', 'x-murmur-generation', ...(code === 'method_not_allowed' ? ['allow'] : []), 'content-length', 'x-murmur-containment'];
    const values: Record<string, string> = { 'content-type': 'application/json', 'x-murmur-generation': gen, 'x-murmur-containment': CONTAINMENT, ...(code === 'method_not_allowed' ? { allow: 'GET' } : {}) };
    const body = Buffer.from(JSON.stringify({ error: code, message: MESSAGE[code] }));
    values['content-length'] = String(body.length);
    const trace = req.target.t === 'list'
      ? { event_type: 'resource_list', root: ROOT, entry_count: null, total_bytes: null, generation, containment_achieved: CONTAINMENT, outcome: code, reason: MESSAGE[code] }
      : { event_type: 'resource_read', path: decodeURIComponent(path.slice('/resources/files/'.length)), outcome: code, bytes: null, sha256: null, generation, containment_achieved: CONTAINMENT, reason: MESSAGE[code] };
    return { status: STATUS[code]!, names, values, body: req.method === 'HEAD' ? null : body, trace };
  };
  if (req.method !== 'GET') return { expected: refusal('method_not_allowed'), wire };
  if (req.target.t === 'list') {
    const files = listingFiles();
    return {
      wire,
      expected: {
        status: 200,
        names: ['content-type', 'x-murmur-generation', 'x-murmur-containment', 'x-murmur-export-root', 'content-length'],
        values: { 'content-type': 'application/json', 'x-murmur-generation': gen, 'x-murmur-containment': CONTAINMENT, 'x-murmur-export-root': ROOT },
        body: 'listing',
        trace: { event_type: 'resource_list', root: ROOT, entry_count: files.length, total_bytes: files.reduce((n, f) => n + current.get(f)!.length, 0), generation, containment_achieved: CONTAINMENT, outcome: 'ok', reason: null },
      },
    };
  }
  if (req.target.t === 'missing') return { expected: refusal('not_found'), wire };
  if (req.target.t === 'dir') return { expected: refusal('not_a_regular_file'), wire };
  if (req.target.t === 'outside') return { expected: refusal('outside_root'), wire };
  if (req.target.t === 'too-big') return { expected: refusal('too_large'), wire };
  const bytes = current.get(name!)!;
  const own = etagOf(name!);
  const mtime = String(Math.trunc(statSync(join(served.workdir, 'out', name!)).mtimeMs));
  const values: Record<string, string> = {
    'content-type': 'application/octet-stream', etag: own, 'x-murmur-mtime-ms': mtime, 'x-murmur-generation': gen, 'x-murmur-containment': CONTAINMENT, 'x-murmur-export-root': ROOT,
  };
  const names = ['content-type', 'etag', 'x-murmur-mtime-ms', 'x-murmur-generation', 'x-murmur-containment', 'x-murmur-export-root'];
  const readTrace = (outcome: string, sent: number) => ({ event_type: 'resource_read', path: name, outcome, bytes: sent, sha256: sha(bytes), generation, containment_achieved: CONTAINMENT, reason: null });
  if (inm !== null && matches(inm, own)) {
    // SPEC 10: a 304 has no content-length, no body, the same etag and validator headers.
    return { wire, expected: { status: 304, names, values, body: null, trace: readTrace('not_modified', 0) } };
  }
  values['content-length'] = String(bytes.length);
  return { wire, expected: { status: 200, names: [...names, 'content-length'], values, body: bytes, trace: readTrace('ok', bytes.length) } };
}

const NODE_OWN = new Set(['date', 'connection', 'keep-alive']);

function check(res: RawResponse, e: Expected, last: boolean, pipelined: boolean, label: string): void {
  expect(res.status, `${label}: status`).toBe(e.status);
  const names = res.headerNames.filter((n) => !NODE_OWN.has(n)).join(' ');
  if (names !== e.names.join(' ')) throw new Error(`${label}: header names in order: got [${names}], the model says [${e.names.join(' ')}]`);
  for (const [n, v] of Object.entries(e.values)) expect(res.header(n), `${label}: ${n}`).toBe(v);
  expect(res.headerAll('accept-ranges'), `${label}: Range is not supported`).toEqual([]);
  // Connection handling: the last request asked to close; the others keep the connection.
  expect(res.header('connection'), `${label}: connection`).toBe(last ? 'close' : 'keep-alive');
  if (e.body === 'listing') {
    const body = res.json() as { root: string; mode: string; max_bytes: number; entries: Array<{ path: string; size_bytes: number; sha256: string; mtime_ms: number }> };
    expect(Object.keys(body), `${label}: listing keys`).toEqual(['root', 'mode', 'max_bytes', 'generation', 'containment_achieved', 'entries']);
    expect(body.root, label).toBe(ROOT);
    expect(body.max_bytes, label).toBe(MAX_BYTES);
    expect(body, label).toMatchObject({ generation: Number(e.values['x-murmur-generation']), containment_achieved: CONTAINMENT });
    expect(body.entries.map((x) => x.path), `${label}: entries`).toEqual(listingFiles());
    for (const x of body.entries) {
      expect(x.size_bytes, `${label}: size of ${x.path}`).toBe(current.get(x.path)!.length);
      expect(x.sha256, `${label}: sha256 of ${x.path}`).toBe(sha(current.get(x.path)!));
    }
    expect(res.header('content-length'), `${label}: content-length`).toBe(String(res.body.length));
  } else if (e.body === null) {
    expect(res.body.length, `${label}: no body`).toBe(0);
  } else {
    expect(res.body.equals(e.body), `${label}: body`).toBe(true);
  }
  if (!pipelined || last) expect(res.trailing.length, `${label}: nothing after the body`).toBe(0);
}

function checkTrace(lines: Array<Record<string, unknown>>, expected: Array<Record<string, unknown>>, label: string): void {
  expect(lines.map(fieldsOf), `${label}: the trace lines the requests must leave, field for field`).toEqual(expected);
  for (const l of lines) {
    expect(Object.keys(l).slice(0, 5), `${label}: common fields first`).toEqual(['event_type', 'event_id', 'parent_id', 'session_id', 'timestamp']);
    expect(l.parent_id, label).toBe(sessionStartId);
    expect(l.event_id, label).toMatch(/^evt_[0-9a-f]{32}$/);
  }
  // The fields of each line in the spec's order (SPEC 8): what toEqual does not compare.
  lines.forEach((l, i) => expect(Object.keys(fieldsOf(l)), `${label}: field order of line ${i}`).toEqual(Object.keys(expected[i]!)));
}

async function runCase(steps: Step[], pipelined: boolean): Promise<void> {
  tail.next();
  // A batch: the requests between two changes, sent together (pipelined or one by one).
  let batch: Req[] = [];
  const log: string[] = [];
  const flush = async () => {
    if (batch.length === 0) return;
    const generation = served.launched.session.generation;
    const predicted = batch.map((r) => predict(r, generation));
    const answers = await exchangeAll(served.port, predicted.map((p) => p.wire), pipelined);
    const label = `${pipelined ? 'pipelined' : 'one at a time'} (${log.length} steps, the last: ${log.slice(-3).join(' ; ')})`;
    expect(answers.length, `${label}: one answer per request`).toBe(batch.length);
    answers.forEach((res, i) => check(res, predicted[i]!.expected, i === answers.length - 1, pipelined, `${label}\nanswer ${i} to ${predicted[i]!.wire.method} ${predicted[i]!.wire.target} ${JSON.stringify(predicted[i]!.wire.headers)}`));
    checkTrace(await tail.wait(batch.length), predicted.map((p) => p.expected.trace), label);
    batch = [];
  };
  for (const step of steps) {
    if (step.s === 'req') {
      batch.push(step.req);
      log.push(`${step.req.method} ${JSON.stringify(step.req.target)} inm=${JSON.stringify(step.req.inm)}${step.req.range ? ' range' : ''}`);
      continue;
    }
    await flush();
    if (step.s === 'advance') {
      served.launched.session.advanceGeneration();
      log.push('advance');
    } else {
      place(step.name, content(step.name, SIZES[step.name]!, step.salt));
      log.push(`replace ${step.name}`);
    }
  }
  await flush();
}

describe('HTTP semantics and the trace, predicted whole', () => {
  fuzzIt({
    name: 'http-semantics',
    file: import.meta.filename,
    runs: 40,
    timeoutMs: 120_000,
    // Every method, every conditional form on every read path, every refusal, in every run.
    examples: () => {
      const reqs: Req[] = [];
      for (const name of FILES) {
        for (const inm of [null, { k: 'own' }, { k: 'weak-own' }, { k: 'star' }, { k: 'list', at: 2, others: ['weak-own', 'other-file'] }, { k: 'old' }, { k: 'other-file', name }, { k: 'unquoted-own' }] as Array<Inm | null>) {
          reqs.push({ method: 'GET', target: { t: 'file', name }, inm, range: inm === null });
        }
      }
      for (const method of ['HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'PROPFIND']) {
        reqs.push({ method, target: { t: 'file', name: 'a.txt' }, inm: null, range: false }, { method, target: { t: 'list', slash: false }, inm: null, range: false });
      }
      for (const t of [{ t: 'missing' }, { t: 'dir' }, { t: 'outside' }, { t: 'too-big' }, { t: 'list', slash: true }, { t: 'list', slash: false }] as Target[]) {
        reqs.push({ method: 'GET', target: t, inm: { k: 'star' }, range: false });
      }
      const steps: Step[] = [...reqs.map((req) => ({ s: 'req' as const, req })), { s: 'replace', name: 'big.bin', salt: 7 }, { s: 'advance' },
        ...FILES.map((name) => ({ s: 'req' as const, req: { method: 'GET', target: { t: 'file' as const, name }, inm: { k: 'old' as const }, range: false } }))];
      return [[steps, false], [steps, true]];
    },
    // Invariant: every answer's status, header names in order, validator/generation/containment values and body, and its one trace line field for field, equal the model's.
    property: () => fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 12 }), fc.boolean(), guard(runCase)),
  });
});
