// `mirror` against a hostile server and a directory that already holds things (docs/cli.md,
// "Taking the whole export"). The server lists generated names: plain paths of one to three
// components drawn from a few names (so they collide with each other and with what the directory
// holds), and names that are no place inside it (`..`, absolute, empty components, NUL, a lone
// surrogate, a component over 255 bytes). Each listed file is served honestly, or by a file that
// changed after the listing (always, or only for the first GET), a body that is not its etag's,
// a body cut mid-way, or a 404; its listed digest may name other bytes or be malformed. The
// directory holds, before the run, files (some already the listed bytes, some of the listed size
// with a byte changed), directories, symlinks leading out of it (absolute and relative, to a
// directory and to a file), a symlink inside, and a temporary file a killed run left. `mirror()`
// runs in process, with or without --delete, 1 to 4 jobs. What must hold:
//   - nothing outside the directory changes (every name beside it, through every planted link);
//   - no temporary file of the run is left;
//   - every file in the directory after the run holds the listed bytes of its name, or is one it
//     held before, untouched; nothing is removed without --delete; with it, nothing the export
//     does not list is left but directories;
//   - a GET only for a listed name that is a place inside and whose digest is well-formed, never
//     for a file the directory already holds as listed, at most three for one name;
//   - a file served honestly (or changed once, then honest) whose name nothing else claims is in
//     place; one never served as listed fails and leaves what was there;
//   - the failures are the listing's, in its order, and no message holds a terminal control.
import { lstatSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { mirror, type MirrorSummary } from '../../src/cli/mirror.js';
import { removeTree, tempDir, type TreeNode, treeState } from '../helpers/tree.js';
import { bytesFrom, sha256Hex } from './hostile.js';
import { TERMINAL_CONTROL } from './peer-model.js';
import { fuzzIt, guard } from './runner.js';

/** docs/cli.md: a file whose etag is not the listed digest is asked for 3 times in all. */
const GETS_PER_FILE = 3;
const COMPONENTS = ['a', 'b', 'sub', 'ln', 'f.txt', 'é\u202e'];
const SIZES = [0, 1, 100, 5_000, 70_000];

type Behaviour = 'honest' | 'changed' | 'changed-once' | 'bad-body' | 'cut' | 'missing';
interface EntrySpec {
  path: string;
  size: number;
  seed: number;
  /** What the listing says its digest is: the served bytes', other bytes', or not a digest. */
  listed: 'true' | 'other' | 'malformed';
  behaviour: Behaviour;
}
type LocalKind = 'file-listed' | 'file-stale' | 'file-other' | 'dir' | 'link-out-dir' | 'link-out-file' | 'link-rel-out' | 'link-in' | 'part';
interface LocalSpec {
  path: string;
  kind: LocalKind;
}
interface Case {
  entries: EntrySpec[];
  local: LocalSpec[];
  delete: boolean;
  jobs: number;
}

const plainPath = fc.array(fc.constantFrom(...COMPONENTS), { minLength: 1, maxLength: 3 }).map((c) => c.join('/'));
/** Names that are no place inside the directory; `@` stands for the directory beside it (absolute). */
const OUTSIDE_NAMES = ['../escape', '/abs', '@/outside/abs', 'a/../../escape2', 'a/./b', 'a//b', '', 'a/', '.', '..', 'a\0b', 'a/\ud800', 'x'.repeat(256)];
const entryArb: fc.Arbitrary<EntrySpec> = fc.record({
  path: fc.oneof({ weight: 6, arbitrary: plainPath }, { weight: 1, arbitrary: fc.constantFrom(...OUTSIDE_NAMES) }),
  size: fc.constantFrom(...SIZES),
  seed: fc.nat(1000),
  listed: fc.oneof({ weight: 10, arbitrary: fc.constant('true' as const) }, { weight: 1, arbitrary: fc.constantFrom('other' as const, 'malformed' as const) }),
  behaviour: fc.oneof(
    { weight: 8, arbitrary: fc.constant('honest' as const) },
    { weight: 1, arbitrary: fc.constantFrom<Behaviour>('changed', 'changed-once', 'bad-body', 'cut', 'missing') },
  ),
});
const caseArb: fc.Arbitrary<Case> = fc.record({
  entries: fc.array(entryArb, { minLength: 0, maxLength: 7 }),
  local: fc.array(
    fc.record({
      path: plainPath,
      kind: fc.constantFrom<LocalKind>('file-listed', 'file-stale', 'file-other', 'dir', 'link-out-dir', 'link-out-file', 'link-rel-out', 'link-in', 'part'),
    }),
    { maxLength: 6 },
  ),
  delete: fc.boolean(),
  jobs: fc.integer({ min: 1, max: 4 }),
});

/** The model's own reading of docs/cli.md: a relative path of plain components, each within 255 bytes. */
function placeInside(path: string): string[] | null {
  if (path === '' || !path.isWellFormed() || path.includes('\0') || Buffer.byteLength(path) > 4096) return null;
  const parts = path.split('/');
  return parts.every((p) => p !== '' && p !== '.' && p !== '..' && Buffer.byteLength(p) <= 255) ? parts : null;
}

let base: string;
let server: Server;
let port: number;
/** What the server lists and serves for the case under way. */
let serving: { listing: Buffer; files: Map<string, { spec: EntrySpec; bytes: Buffer }>; gets: string[] } = {
  listing: Buffer.alloc(0),
  files: new Map(),
  gets: [],
};

beforeAll(async () => {
  base = tempDir('rp-fuzz-mirror-');
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = req.url ?? '';
    if (url === '/resources/files') {
      res.writeHead(200, { 'content-type': 'application/json', etag: `"sha256:${sha256Hex(serving.listing)}"`, 'content-length': serving.listing.length });
      res.end(serving.listing);
      return;
    }
    let path: string;
    try {
      path = decodeURIComponent(url.slice('/resources/files/'.length));
    } catch {
      path = `(undecodable) ${url}`;
    }
    serving.gets.push(path);
    const file = serving.files.get(path);
    const attempt = serving.gets.filter((g) => g === path).length;
    if (file === undefined || file.spec.behaviour === 'missing') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":"not_found","message":"no such file under the export root"}');
      return;
    }
    const { spec, bytes } = file;
    const changed = spec.behaviour === 'changed' || (spec.behaviour === 'changed-once' && attempt === 1);
    let body = changed ? Buffer.concat([bytes, Buffer.from('changed')]) : bytes;
    const etag = `"sha256:${sha256Hex(body)}"`;
    if (spec.behaviour === 'bad-body') body = bytes.length === 0 ? Buffer.from('x') : Buffer.from(bytes.map((b, i) => (i === bytes.length - 1 ? b ^ 1 : b)));
    res.writeHead(200, { 'content-type': 'application/octet-stream', etag, 'content-length': body.length });
    if (spec.behaviour === 'cut') {
      res.write(body.subarray(0, Math.floor(body.length / 2)), () => res.destroy());
      return;
    }
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as { port: number }).port;
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  removeTree(base);
});

let caseNo = 0;

async function runCase(c: Case): Promise<void> {
  const root = join(base, `c${caseNo++}`);
  const dst = join(root, 'dst');
  mkdirSync(join(root, 'outside', 'inner'), { recursive: true });
  writeFileSync(join(root, 'outside', 'target'), 'outside\n');
  writeFileSync(join(root, 'outside', 'inner', 'x'), 'inner\n');
  const bytesOf = (e: EntrySpec) => bytesFrom(e.seed, e.size);
  const entries = c.entries.map((e) => ({ ...e, path: e.path.replace('@', root) }));

  // The directory as it was left: each planted thing where its parents could be real directories.
  if (c.local.length > 0) mkdirSync(dst);
  for (const l of c.local) {
    const parts = l.path.split('/');
    let blocked = false;
    for (let i = 1; i < parts.length && !blocked; i++) {
      const p = join(dst, ...parts.slice(0, i));
      try {
        if (!lstatSync(p).isDirectory()) blocked = true;
      } catch {
        mkdirSync(p);
      }
    }
    // A temporary file a killed run left goes beside the name, in its directory.
    const p = l.kind === 'part' ? join(dst, ...parts.slice(0, -1), '.rp-mirror.0123456789ab.part') : join(dst, ...parts);
    let exists = true;
    try {
      lstatSync(p);
    } catch {
      exists = false;
    }
    if (blocked || exists) continue;
    const listed = entries.find((e) => e.path === l.path);
    const depth = parts.length;
    switch (l.kind) {
      case 'file-listed':
        writeFileSync(p, listed ? bytesOf(listed) : 'local\n');
        break;
      case 'file-stale': {
        // The listed size, one byte other (a file rewritten in place since the last mirror).
        const b = listed ? Buffer.from(bytesOf(listed)) : Buffer.from('local\n');
        if (b.length > 0) b[b.length - 1]! ^= 1;
        writeFileSync(p, b);
        break;
      }
      case 'file-other':
        writeFileSync(p, 'local, not listed bytes\n');
        break;
      case 'dir':
        mkdirSync(p);
        break;
      case 'link-out-dir':
        symlinkSync(join(root, 'outside'), p);
        break;
      case 'link-out-file':
        symlinkSync(join(root, 'outside', 'target'), p);
        break;
      case 'link-rel-out':
        symlinkSync(`${'../'.repeat(depth)}outside`, p);
        break;
      case 'link-in':
        symlinkSync('a', p);
        break;
      case 'part':
        writeFileSync(p, 'left by a killed run\n');
        break;
    }
  }

  // The listing, and the model's reading of it (mirror.ts's order: name, listed twice, digest).
  const digestOf = (e: EntrySpec) =>
    e.listed === 'true' ? sha256Hex(bytesOf(e)) : e.listed === 'other' ? sha256Hex(Buffer.concat([bytesOf(e), Buffer.from('other')])) : 'Z'.repeat(64);
  serving = {
    listing: Buffer.from(
      JSON.stringify({
        root: 'out/',
        mode: 'read-only',
        max_bytes: 10_485_760,
        generation: 0,
        containment_achieved: 'sealed',
        entries: entries.map((e) => ({ path: e.path, size_bytes: e.size, mtime_ms: 1, sha256: digestOf(e) })),
      }),
    ),
    files: new Map(),
    gets: [],
  };
  const kept = new Map<string, EntrySpec>();
  /** Per listing index: refused by the listing's checks (must fail, no GET). */
  const refused = entries.map((e) => {
    if (placeInside(e.path) === null || kept.has(e.path) || e.listed === 'malformed') return true;
    kept.set(e.path, e);
    return false;
  });
  for (const [path, spec] of kept) serving.files.set(path, { spec, bytes: bytesOf(spec) });

  const outsideBefore = treeState(root, 'dst');
  const before = c.local.length > 0 ? treeState(dst) : new Map<string, TreeNode>();
  const isPrefix = (a: string, b: string) => b.startsWith(`${a}/`);
  const verdict = new Map<string, 'placed' | 'failed' | 'either'>();
  const upToDate = new Set<string>();
  /** Names another kept name passes through (or this one through it): one of the two cannot be a file. */
  const claimed = new Set<string>();
  for (const [path, e] of kept) {
    const parts = path.split('/');
    const prefixes = parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join('/'));
    const realDirs = prefixes.every((p) => before.get(p)?.type === 'dir');
    const was = before.get(path);
    if (realDirs && was?.type === 'file' && e.listed === 'true' && was.sha === sha256Hex(bytesOf(e))) {
      upToDate.add(path);
      verdict.set(path, 'placed');
      continue;
    }
    if ([...kept.keys()].some((q) => q !== path && (isPrefix(q, path) || isPrefix(path, q)))) claimed.add(path);
    const inTheWay = prefixes.some((p) => before.has(p) && before.get(p)!.type !== 'dir') || was?.type === 'dir';
    const servedAsListed = e.listed === 'true' && (e.behaviour === 'honest' || e.behaviour === 'changed-once');
    // An empty body cut after its headers may have been whole already.
    const emptyCut = e.listed === 'true' && e.behaviour === 'cut' && e.size === 0;
    verdict.set(path, emptyCut ? 'either' : !servedAsListed ? 'failed' : claimed.has(path) || inTheWay ? 'either' : 'placed');
  }

  let summary: MirrorSummary;
  try {
    summary = await mirror(`http://127.0.0.1:${port}`, dst, { delete: c.delete, jobs: c.jobs });
  } catch (error) {
    throw new Error(`mirror rejected: ${(error as Error).message}`);
  }
  const after = treeState(dst);
  const label = (what: string) =>
    `${what}\nlisting: ${JSON.stringify(entries)}\nbefore: ${JSON.stringify([...before])}\nafter: ${JSON.stringify([...after])}\nfailures: ${JSON.stringify(summary.failures)}\nGETs: ${JSON.stringify(serving.gets)}`;

  // Nothing beside the directory changed, whatever the names and the planted links.
  expect([...treeState(root, 'dst')], label('outside the directory')).toEqual([...outsideBefore]);
  // GETs: only for names kept, never for a file already right, at most three each.
  for (const g of new Set(serving.gets)) {
    expect(kept.has(g), label(`a GET for '${g}', which the listing names no kept file by`)).toBe(true);
    expect(upToDate.has(g), label(`a GET for '${g}', which the directory already held as listed`)).toBe(false);
    expect(serving.gets.filter((x) => x === g).length, label(`GETs for '${g}'`)).toBeLessThanOrEqual(GETS_PER_FILE);
  }
  // Every file is the listed bytes of its name, or one held before, untouched.
  for (const [path, node] of after) {
    const was = before.get(path);
    const e = kept.get(path);
    if (node.type === 'file') {
      if (e !== undefined && e.listed === 'true' && node.sha === sha256Hex(bytesOf(e))) continue;
      expect(was, label(`'${path}' is a file that is neither the listed bytes nor one held before`)).toEqual(node);
      if (c.delete) expect(e, label(`'${path}' is not listed, and --delete left it`)).toBeDefined();
    } else if (node.type === 'link') {
      expect(was, label(`'${path}' is a link it did not hold before`)).toEqual(node);
      if (c.delete) expect(e, label(`'${path}' (a link) is not listed, and --delete left it`)).toBeDefined();
    }
  }
  // Nothing removed without --delete: each file and link held before is there, or replaced by its listed bytes.
  if (!c.delete)
    for (const [path, was] of before) {
      if (was.type !== 'file' && was.type !== 'link') continue;
      const now = after.get(path);
      const e = kept.get(path);
      const replaced = now?.type === 'file' && e !== undefined && e.listed === 'true' && now.sha === sha256Hex(bytesOf(e));
      expect(replaced || JSON.stringify(now) === JSON.stringify(was), label(`'${path}' was removed or changed without --delete`)).toBe(true);
    }
  // What the model is sure of: placed, or failed and left as it was. A name's failures: one per
  // refused listing entry of that name, and one if its file was not placed.
  const failuresOf = (path: string) => summary.failures.filter((f) => f.path === path).length;
  const refusedOf = (path: string) => entries.filter((e, i) => refused[i] && e.path === path).length;
  for (const [path, v] of verdict) {
    const now = after.get(path);
    const e = kept.get(path)!;
    if (v === 'placed') {
      expect(now?.type === 'file' && now.sha === sha256Hex(bytesOf(e)), label(`'${path}' (${e.behaviour}) is not in place`)).toBe(true);
      expect(failuresOf(path), label(`'${path}' was placed but reported failed`)).toBe(refusedOf(path));
    } else if (v === 'failed') {
      expect(failuresOf(path), label(`'${path}' (${e.behaviour}, listed ${e.listed}) is not reported failed`)).toBe(refusedOf(path) + 1);
      const was = before.get(path);
      if (was?.type !== 'dir' && !claimed.has(path))
        expect(JSON.stringify(now), label(`'${path}' failed but what was there changed`)).toBe(JSON.stringify(was));
    } else {
      expect(failuresOf(path) - refusedOf(path), label(`'${path}': failures`)).toBeOneOf([0, 1]);
    }
  }
  // The failures: every refused listing entry, in listing order, none of them a terminal control.
  let at = 0;
  for (const f of summary.failures) {
    while (at < entries.length && entries[at]!.path !== f.path) at++;
    expect(at < entries.length, label(`failure '${f.path}' out of listing order or not listed`)).toBe(true);
    at++;
    expect(TERMINAL_CONTROL.test(f.message), label(`a failure message holds a terminal control: ${JSON.stringify(f.message)}`)).toBe(false);
  }
  for (const path of new Set(entries.filter((_, i) => refused[i]).map((e) => e.path)))
    if (!kept.has(path)) expect(failuresOf(path), label(`'${path}': one failure per refused entry`)).toBe(refusedOf(path));
  expect(summary.listed).toBe(entries.length);
  removeTree(root);
}

describe('mirror against a hostile server and a directory that holds things', () => {
  fuzzIt({
    name: 'mirror-hostile',
    file: import.meta.filename,
    runs: 40,
    timeoutMs: 60_000,
    // Every name that is no place inside, every way a file is served, every planted thing in the way.
    examples: () => {
      const e = (path: string, behaviour: Behaviour = 'honest', listed: EntrySpec['listed'] = 'true'): EntrySpec => ({
        path,
        size: 100,
        seed: 7,
        listed,
        behaviour,
      });
      return [
        [{ entries: OUTSIDE_NAMES.map((n) => e(n)).concat(e('ok')), local: [], delete: false, jobs: 2 }],
        [
          {
            entries: [e('sub/new'), e('ln/x'), e('rel/x'), e('f.txt'), e('a'), e('b/c')],
            local: [
              { path: 'sub', kind: 'link-out-dir' },
              { path: 'ln', kind: 'link-rel-out' },
              { path: 'f.txt', kind: 'link-out-file' },
              { path: 'a', kind: 'link-in' },
              { path: 'b/c', kind: 'file-listed' },
              { path: 'b/c', kind: 'part' },
            ],
            delete: false,
            jobs: 1,
          },
        ],
        ...[false, true].map((del): [Case] => [
          {
            entries: [
              e('a', 'changed'),
              e('b', 'changed-once'),
              e('sub/c', 'bad-body'),
              e('sub/d', 'cut'),
              e('f.txt', 'missing'),
              e('ln', 'honest', 'other'),
              e('é\u202e', 'honest', 'malformed'),
              e('b'),
            ],
            local: [
              { path: 'a', kind: 'file-other' },
              { path: 'b', kind: 'file-stale' },
              { path: 'sub/c', kind: 'file-other' },
              { path: 'sub/x', kind: 'file-other' },
              { path: 'ln', kind: 'link-out-dir' },
              { path: 'f.txt/b', kind: 'part' },
              { path: 'x', kind: 'link-out-file' },
            ],
            delete: del,
            jobs: 4,
          },
        ]),
      ];
    },
    // Invariant: nothing outside the directory changes; no temporary file is left; every file is its listed bytes or untouched; nothing removed without --delete; GETs only for kept names not already right; honest files placed, lying ones failed and left as they were.
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
