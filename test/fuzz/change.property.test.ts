// Change between requests. A served file is read and listed (so any digest cache has had its
// chance to remember it), then changed under the server by a mutation step (test/fuzz/mutate-files.ts:
// same-length write, truncate, rename-over, replace, a write through a shared mapping after a read
// fault), then read and listed again, several times over. Every read's body must be the file's
// current bytes and its etag their SHA-256; every listing entry's size and sha256 must be those of
// the current bytes (SPEC 4: "SHA-256 over exactly the buffer served"; the listing hashes the whole
// file; SPEC 10: the cache may stand in only for an unchanged file). Run on the repository's disk
// (ext4) and on /dev/shm (tmpfs, where a mapped write changes no timestamp), with files on both
// sides of every size threshold (each kind of change once on a file a listing takes from the digest
// cache), and files old enough for the digest cache to keep (its racy-entry
// rule stores nothing changed in the last 2 s, so a pool of files is created ahead and aged).
import { mkdirSync, mkdtempSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { rawGet, type RawResponse, sha256Hex } from '../helpers/http.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, type Served } from './capsules.js';
import { applyMutation, bytesFor, MapWriter, mutationArb, onDisk, type Mutation } from './mutate-files.js';
import { FUZZ_SCALE, fuzzIt, guard } from './runner.js';
import { BIG_MAX_BYTES, EDGE_SIZES, settledSince } from './thresholds.js';
import { LIMITS } from '../../src/addon/export.js';

interface Place {
  name: 'disk' | 'tmpfs';
  base: string;
  served: Served;
  /** What each file under out/ holds, as the test wrote it. */
  files: Map<string, Buffer>;
  /** Files not touched since they were created, with when that was. */
  untouched: Array<{ name: string; size: number; created: number }>;
  next: number;
}

const places: Place[] = [];
let maps: MapWriter;

/** Creates `n` files under out/ (of edge sizes in turn, or all of `size`), untouched until a case takes one. */
function grow(p: Place, n: number, size?: number): void {
  const created = Date.now();
  for (let i = 0; i < n; i++) {
    const k = p.next++;
    const length = size ?? EDGE_SIZES[k % EDGE_SIZES.length]!;
    const name = `f${k}`;
    const bytes = bytesFor(length, k);
    writeFileSync(join(p.served.workdir, 'out', name), bytes);
    p.files.set(name, bytes);
    p.untouched.push({ name, size: length, created });
  }
}

/**
 * An untouched file (of `size`, when given) old enough for the digest cache to store it (waits for
 * the pool to age).
 */
async function takeAged(p: Place, size?: number): Promise<string> {
  let i = p.untouched.findIndex((f) => size === undefined || f.size === size);
  if (i < 0) {
    grow(p, size === undefined ? EDGE_SIZES.length : 1, size);
    i = p.untouched.length - 1;
  }
  const [f] = p.untouched.splice(i, 1) as [Place['untouched'][number]];
  const ctime = statSync(join(p.served.workdir, 'out', f.name)).ctimeMs;
  await settledSince(Math.max(f.created, ctime));
  return f.name;
}

beforeAll(async () => {
  maps = MapWriter.start();
  const roots = [
    { name: 'disk' as const, base: tempDir('rp-fuzz-change-') },
    { name: 'tmpfs' as const, base: realpathSync(mkdtempSync('/dev/shm/rp-fuzz-change-')) },
  ];
  const yaml = `name: changes\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: ${BIG_MAX_BYTES}\n`;
  for (const r of roots) {
    const workdir = join(r.base, 'workdir');
    mkdirSync(join(workdir, 'out'), { recursive: true });
    const served = await serveCapsule({ workdir, yaml, traceDir: join(r.base, 'traces') });
    const p: Place = { name: r.name, base: r.base, served, files: new Map(), untouched: [], next: 0 };
    // Enough aged files for every case of the bounded run; a longer run grows the pool as it goes.
    grow(p, Math.ceil(RUNS * FUZZ_SCALE) + 2 * EDGE_SIZES.length);
    grow(p, COVERED.length, CACHED_SIZE);
    grow(p, 1, BIG_MAX_BYTES + 1);
    places.push(p);
  }
});

afterAll(async () => {
  maps?.stop();
  for (const p of places) {
    await p.served.close();
    removeTree(p.base);
  }
});

function checkRead(res: RawResponse, expected: Buffer, label: string): void {
  if (expected.length > BIG_MAX_BYTES) {
    expect(res.status, label).toBe(413);
    expect(res.json().error, label).toBe('too_large');
    return;
  }
  expect(res.status, label).toBe(200);
  expect(res.body.length, `${label}: body length`).toBe(expected.length);
  expect(res.body.equals(expected), `${label}: the body is the file's current bytes`).toBe(true);
  expect(res.header('etag'), `${label}: the etag is the SHA-256 of the body`).toBe(`"sha256:${sha256Hex(expected)}"`);
}

function checkList(res: RawResponse, files: Map<string, Buffer>, label: string): void {
  expect(res.status, label).toBe(200);
  const entries = (res.json() as { entries: Array<{ path: string; size_bytes: number; sha256: string }> }).entries;
  const names = [...files.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  expect(
    entries.map((e) => e.path),
    label,
  ).toEqual(names);
  for (const e of entries) {
    const bytes = files.get(e.path)!;
    expect(e.size_bytes, `${label}: size of ${e.path}`).toBe(bytes.length);
    expect(e.sha256, `${label}: the listed sha256 of ${e.path} is of its current bytes`).toBe(sha256Hex(bytes));
  }
}

type Step = { mu: Mutation; then: 'read' | 'list' | 'both' };
/** The steps of one case, on a file of `size` (undefined: the next file of the pool, any size). */
type Case = { steps: Step[]; size?: number };
const stepArb: fc.Arbitrary<Step> = fc.record({ mu: mutationArb, then: fc.constantFrom('read', 'list', 'both') as fc.Arbitrary<Step['then']> });

const RUNS = 12;

const COVERED = ['write', 'mmap-write', 'write-keep-mtime', 'rename-keep-mtime', 'truncate', 'rename-over', 'replace'] as const;
/** The smallest size a listing takes from the digest cache: a stale cached digest shows there. */
const CACHED_SIZE = LIMITS.listingCachedMinBytes;

/**
 * Every mutation kind, once each, on an aged file a listing has cached, and a file one byte over
 * max_bytes (refused) cut to max_bytes (served), in every run.
 */
const coverage = (): Array<[Case]> => [
  ...COVERED.map((m): [Case] => [
    {
      size: CACHED_SIZE,
      steps: [
        {
          mu:
            m === 'write' || m === 'mmap-write' || m === 'write-keep-mtime'
              ? { m, at: 7, len: 9, salt: 5 }
              : m === 'rename-keep-mtime'
                ? { m, salt: 3 }
                : m === 'truncate'
                  ? { m, size: 1 }
                  : { m, size: 4096, salt: 9 },
          then: 'both',
        } as Step,
      ],
    },
  ]),
  [{ size: BIG_MAX_BYTES + 1, steps: [{ mu: { m: 'truncate', size: BIG_MAX_BYTES }, then: 'both' }] }],
];

async function runCase(p: Place, { steps, size }: Case): Promise<void> {
  const name = await takeAged(p, size);
  const path = join(p.served.workdir, 'out', name);
  const scratch = join(p.served.workdir, `scratch-${name}`);
  const url = p.served.url;
  const read = async (label: string) => checkRead(await rawGet(url, `/resources/files/${name}`), p.files.get(name)!, label);
  const list = async (label: string) => checkList(await rawGet(url, '/resources/files'), p.files, label);
  // Read and listed unchanged first: whatever can remember this version has seen it.
  await read(`${p.name}: read ${name} before any change`);
  await list(`${p.name}: list before any change`);
  await read(`${p.name}: read ${name} again before any change`);
  const done: string[] = [];
  for (const step of steps) {
    const next = await applyMutation(step.mu, path, p.files.get(name)!, scratch, maps);
    p.files.set(name, next);
    done.push(JSON.stringify(step.mu));
    // The harness's own check: the model holds what is on disk.
    expect(onDisk(path).equals(next), 'harness: the mutation step wrote what it recorded').toBe(true);
    const label = `${p.name}: ${name} after ${done.join(', ')}`;
    if (step.then !== 'list') await read(`${label}, read`);
    if (step.then !== 'read') await list(`${label}, list`);
  }
  await read(`${p.name}: ${name} after ${done.join(', ')}, final read`);
  await list(`${p.name}: after ${done.join(', ')}, final list`);
}

describe('the etag, the listing and the body follow the bytes across changes', () => {
  for (const which of ['disk', 'tmpfs'] as const) {
    fuzzIt({
      name: `change-${which}`,
      file: import.meta.filename,
      runs: RUNS,
      timeoutMs: 120_000,
      examples: coverage,
      // Invariant: after any change, a read's body and etag and a listing's size and sha256 are those of the file's current bytes.
      property: () =>
        fc.asyncProperty(
          fc.record({ steps: fc.array(stepArb, { minLength: 1, maxLength: 4 }), size: fc.constantFrom(...EDGE_SIZES) }),
          guard(async (c) => {
            await runCase(places.find((p) => p.name === which)!, c);
          }),
        ),
    });
  }
});
