// Generated export trees: a fast-check arbitrary for a tree *recipe* (plain data, so it shrinks),
// compiled into a list of operations that both the reference model (test/fuzz/model.ts) and the
// real filesystem apply, so the two always hold the same tree. Names are byte strings (latin1), so a
// tree can hold names that are not valid UTF-8; the filesystem side passes them as Buffer paths.
//
// The workdir every tree lives in is prepared once (prepareWorkdir): secrets beside the root and
// outside the workdir, a directory of secrets that escaping links and roots point at, and a public
// file that a tree may hard-link into the root. Each run replaces only the root.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, linkSync, lstatSync, mkdirSync, readdirSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import fc from 'fast-check';
import { newDir, type Bytes, type MDir, type MNode } from './model.js';
import { EDGE_SIZES } from './thresholds.js';

export const MAX_BYTES = 64;
export const ROOT_NAME = 'out';
export const REAL_ROOT = '.real-out';

// ── Names ────────────────────────────────────────────────────────────────────────────────────────

const utf8 = (s: string): Bytes => Buffer.from(s, 'utf8').toString('latin1');

/**
 * A small pool so that generated paths collide and links find their targets, weighted toward the
 * hostile: look-alikes of `.` and `/`, bidi and invisible code points, names that are literal
 * percent-encodings, names that are not UTF-8, and the longest name a filesystem allows.
 */
export const NAMES: readonly Bytes[] = Object.freeze([
  'a',
  'b',
  'c',
  'sub',
  'd',
  'f.txt',
  '.hidden',
  '..a',
  'a..',
  '...',
  'sub dir',
  '-',
  '%2e%2e',
  '%2e',
  '%2F',
  '%',
  'a%zz',
  '%41',
  'x?y',
  'x#y',
  'a\\b',
  '\\',
  '..\\',
  ' ',
  'a b',
  '\n',
  '*',
  ':',
  utf8('é'),
  utf8('e\u0301'),
  utf8('а'),
  utf8('\u202e'),
  utf8('\u200f'),
  utf8('\ufeffa'),
  utf8('\ufeff'),
  utf8('\u2024\u2024'),
  utf8('\uff0e\uff0e'),
  utf8('\u2215'),
  utf8('ﬁ'),
  utf8('\u{1f600}'),
  '\xff',
  '\xc0\xae',
  '\xc0\xae\xc0\xae',
  '\xed\xa0\x80',
  '\xf4\x90\x80\x80',
  '\xc3',
  '\xe0\x80\xaf',
  'a\x80b',
  'L'.repeat(255),
  utf8('é'.repeat(127)),
  'N'.repeat(200),
]);

export const nameArb: fc.Arbitrary<Bytes> = fc
  .oneof(
    { weight: 6, arbitrary: fc.constantFrom('a', 'b', 'c', 'sub', 'd', 'f.txt') },
    { weight: 4, arbitrary: fc.constantFrom(...NAMES) },
    { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom('a', '.', '%', '2', 'e', '\\', ' ', '\xff', '\xc3', '\xa9'), minLength: 1, maxLength: 6 }) },
  )
  .filter((n) => n !== '.' && n !== '..' && !n.includes('/') && !n.includes('\0') && n.length > 0 && n.length <= 255);

// ── Recipes ──────────────────────────────────────────────────────────────────────────────────────

export type RootKind = 'dir' | 'link' | 'missing' | 'file' | 'escape' | 'abs';

export type TargetSpec =
  | { t: 'to'; node: number; form: 'rel' | 'via-root' | 'reenter' | 'dots' | 'slash' | 'detour' | 'long-dots'; n: number }
  | { t: 'escape'; which: number; extra: number }
  | { t: 'abs'; which: number; node: number }
  | { t: 'dangling'; name: Bytes }
  | { t: 'raw'; text: Bytes };

export type LeafSpec =
  | { k: 'file'; size: number }
  | { k: 'link'; target: TargetSpec }
  | { k: 'hardlink'; to: number }
  | { k: 'hardlink-outside' }
  | { k: 'fifo' }
  | { k: 'socket' }
  | { k: 'chain'; length: number; target: TargetSpec };

export interface TreeSpec {
  rootKind: RootKind;
  /** Trailing spelling of the declared root in-process tests use (`out`, `out/`, `./out`, …). */
  rootSpelling: number;
  dirs: Array<{ parent: number; name: Bytes }>;
  leaves: Array<{ dir: number; name: Bytes; leaf: LeafSpec }>;
  deep: null | { depth: number; nameLength: number; linkUp: number };
}

const ESCAPES = 9;
const ABSOLUTES = 8;

const targetArb: fc.Arbitrary<TargetSpec> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      t: fc.constant('to' as const),
      node: fc.nat(),
      form: fc.constantFrom('rel', 'rel', 'rel', 'via-root', 'reenter', 'dots', 'slash', 'detour', 'long-dots') as fc.Arbitrary<'rel'>,
      n: fc.nat({ max: 2100 }),
    }),
  },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('escape' as const), which: fc.nat({ max: ESCAPES - 1 }), extra: fc.nat({ max: 12 }) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('abs' as const), which: fc.nat({ max: ABSOLUTES - 1 }), node: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('dangling' as const), name: nameArb }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('raw' as const),
      text: fc.array(fc.oneof(nameArb, fc.constantFrom('.', '..', '', '/', '//')), { minLength: 1, maxLength: 6 }).map((p) => p.join('/')),
    }),
  },
);

const leafArb: fc.Arbitrary<LeafSpec> = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.record({
      k: fc.constant('file' as const),
      size: fc.oneof(
        { weight: 1, arbitrary: fc.constant(0) },
        { weight: 5, arbitrary: fc.integer({ min: 1, max: 40 }) },
        { weight: 2, arbitrary: fc.integer({ min: MAX_BYTES - 1, max: MAX_BYTES + 1 }) },
        { weight: 1, arbitrary: fc.integer({ min: 65, max: 300 }) },
        { weight: 1, arbitrary: fc.constant(70_000) },
        // Both sides of every threshold of the read path (test/fuzz/thresholds.ts).
        { weight: 1, arbitrary: fc.constantFrom(...EDGE_SIZES) },
      ),
    }),
  },
  { weight: 8, arbitrary: fc.record({ k: fc.constant('link' as const), target: targetArb }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('hardlink' as const), to: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ k: 'hardlink-outside' as const }) },
  { weight: 1, arbitrary: fc.constant({ k: 'fifo' as const }) },
  { weight: 1, arbitrary: fc.constant({ k: 'socket' as const }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('chain' as const), length: fc.integer({ min: 36, max: 44 }), target: targetArb }) },
);

export const treeArb: fc.Arbitrary<TreeSpec> = fc.record({
  rootKind: fc.oneof(
    { weight: 12, arbitrary: fc.constant('dir' as const) },
    { weight: 3, arbitrary: fc.constant('link' as const) },
    { weight: 1, arbitrary: fc.constantFrom('missing', 'file', 'escape', 'abs') as fc.Arbitrary<RootKind> },
  ),
  rootSpelling: fc.nat({ max: 4 }),
  dirs: fc.array(fc.record({ parent: fc.nat(), name: nameArb }), { maxLength: 8 }),
  leaves: fc.array(fc.record({ dir: fc.nat(), name: nameArb, leaf: leafArb }), { minLength: 1, maxLength: 16 }),
  deep: fc.option(
    fc.record({
      depth: fc.oneof(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 250, max: 262 })),
      nameLength: fc.oneof(fc.constant(1), fc.constant(1), fc.integer({ min: 100, max: 255 })),
      linkUp: fc.nat({ max: 3 }),
    }),
    { freq: 6 },
  ),
});

export const ROOT_SPELLINGS = ['out', 'out/', './out', 'out//', 'out/.'];

/**
 * A fixed tree with one of every kind of entry (file, empty file, FIFO, socket, directory, a symlink
 * to a file inside, one escaping, one absolute, one dangling, a hard link, a loop) and files on both
 * sides of `MAX_BYTES` and of every read-path threshold: the first case of every run, so no run
 * misses a kind or a size. `nodes` is how many request recipes it takes to aim at every entry.
 */
export function coverageTree(): { spec: TreeSpec; nodes: number } {
  const sizes = [...new Set([0, 1, MAX_BYTES - 1, MAX_BYTES, MAX_BYTES + 1, ...EDGE_SIZES])];
  const leaves: TreeSpec['leaves'] = sizes.map((size, i) => ({ dir: 0, name: `s${i}`, leaf: { k: 'file', size } }));
  const firstLeaf = 2; // node 0 is the root, node 1 the directory `sub`
  leaves.push(
    { dir: 1, name: 'in-sub', leaf: { k: 'file', size: 5 } },
    { dir: 0, name: 'fifo', leaf: { k: 'fifo' } },
    { dir: 0, name: 'sock', leaf: { k: 'socket' } },
    { dir: 0, name: 'link-in', leaf: { k: 'link', target: { t: 'to', node: firstLeaf + 2, form: 'rel', n: 0 } } },
    { dir: 1, name: 'link-up', leaf: { k: 'link', target: { t: 'to', node: firstLeaf + 3, form: 'rel', n: 0 } } },
    { dir: 0, name: 'link-dir', leaf: { k: 'link', target: { t: 'to', node: 1, form: 'rel', n: 0 } } },
    { dir: 0, name: 'link-out', leaf: { k: 'link', target: { t: 'escape', which: 0, extra: 0 } } },
    { dir: 0, name: 'link-abs', leaf: { k: 'link', target: { t: 'abs', which: 1, node: firstLeaf + 2 } } },
    { dir: 0, name: 'dangling', leaf: { k: 'link', target: { t: 'dangling', name: 'x' } } },
    { dir: 0, name: 'hard', leaf: { k: 'hardlink', to: 2 } },
    { dir: 0, name: 'loop', leaf: { k: 'link', target: { t: 'raw', text: 'loop' } } },
  );
  return { spec: { rootKind: 'dir', rootSpelling: 0, dirs: [{ parent: 0, name: 'sub' }], leaves, deep: null }, nodes: 2 + leaves.length };
}

// ── Compiling a recipe ───────────────────────────────────────────────────────────────────────────

export type Op =
  | { op: 'dir'; path: Bytes[] }
  | { op: 'file'; path: Bytes[]; content: Buffer }
  | { op: 'symlink'; path: Bytes[]; target: Bytes }
  | { op: 'hardlink'; path: Bytes[]; to: Bytes[] }
  | { op: 'hardlink-outside'; path: Bytes[] }
  | { op: 'fifo'; path: Bytes[] }
  | { op: 'socket'; path: Bytes[] };

/** The host paths a compiled tree refers to (absolute link targets name them). */
export interface Workdir {
  base: string;
  workdir: string;
  /** The directory the tree is built in: workdir/.real-out when `out` is a link to it, else workdir/out. */
  hostRoot(kind: RootKind): string;
  trash: string;
  secrets: Buffer[];
  publicContent: Buffer;
  fifoPool: string;
  socketPool: string;
}

export interface CompiledTree {
  spec: TreeSpec;
  /** Only the ops that apply (parent exists as a directory, name free, path creatable). */
  ops: Op[];
  /** The model root: null when the root names nothing (missing, a file); 'outside' when it escapes. */
  root: MDir | null | 'outside';
  /** Every node path that exists (relative to the root), for request recipes to aim at. */
  paths: Bytes[][];
}

/** Regular-file content: distinct per file, never containing a secret marker. */
function contentFor(index: number, size: number): Buffer {
  const head = Buffer.from(`f${index}:`);
  const out = Buffer.alloc(size);
  for (let i = 0; i < size; i++) out[i] = i < head.length ? head[i]! : 0x61 + ((i * 7 + index) % 26);
  return out;
}

function relTo(from: Bytes[], to: Bytes[]): Bytes {
  let c = 0;
  while (c < from.length && c < to.length && from[c] === to[c]) c++;
  const ups = Array<Bytes>(from.length - c).fill('..');
  const parts = [...ups, ...to.slice(c)];
  return parts.length === 0 ? '.' : parts.join('/');
}

/** The host path length a path may reach and still be created with one syscall. */
const HOST_PATH_LIMIT = 4000;

export function compileTree(spec: TreeSpec, wd: Workdir): CompiledTree {
  const dirPaths: Bytes[][] = [];
  for (let i = 0; i < spec.dirs.length; i++) {
    const d = spec.dirs[i]!;
    const p = d.parent % (i + 1);
    dirPaths.push([...(p === 0 ? [] : dirPaths[p - 1]!), d.name]);
  }
  const leafPaths = spec.leaves.map((l) => {
    const p = l.dir % (dirPaths.length + 1);
    return [...(p === 0 ? [] : dirPaths[p - 1]!), l.name];
  });
  const deepPaths: Bytes[][] = [];
  if (spec.deep) {
    const name = spec.deep.nameLength === 1 ? 'd' : 'D'.repeat(spec.deep.nameLength);
    for (let i = 1; i <= spec.deep.depth; i++) deepPaths.push(Array<Bytes>(i).fill(name));
  }
  const nodes: Bytes[][] = [[], ...dirPaths, ...leafPaths, ...deepPaths];
  const hostRootDir = wd.hostRoot(spec.rootKind);

  const target = (t: TargetSpec, from: Bytes[]): Bytes => {
    const depth = from.length;
    switch (t.t) {
      case 'to': {
        const to = nodes[t.node % nodes.length]!;
        switch (t.form) {
          case 'rel':
            return relTo(from, to);
          case 'via-root':
            return [...Array<Bytes>(depth).fill('..'), ...to].join('/') || '.';
          case 'reenter':
            return [...Array<Bytes>(depth + 1).fill('..'), ROOT_NAME, ...to].join('/');
          case 'dots':
            return relTo(from, to)
              .split('/')
              .flatMap((c) => ['.', c, ''])
              .join('/');
          case 'slash':
            return `${relTo(from, to)}/`;
          case 'detour': {
            const via = nodes[(t.node + t.n) % nodes.length]!;
            return [...relTo(from, via).split('/'), ...Array<Bytes>(via.length).fill('..'), ...to].join('/');
          }
          case 'long-dots':
            return `${'./'.repeat(Math.min(t.n, 2030))}${relTo(from, to)}`;
        }
        break;
      }
      case 'escape': {
        const up = (k: number) => Array<Bytes>(k).fill('..').join('/');
        return [
          `${up(depth + 1)}/secret.txt`,
          `${up(depth + 1)}/out-evil/secret.txt`,
          `${up(depth + 2)}/outside-secret.txt`,
          up(depth + 1),
          up(depth + 2),
          `${up(depth + 1)}/escape-dir`,
          `${up(depth + 1 + t.extra)}/etc/passwd`,
          `${up(depth + 2)}/outside-dir/secret.txt`,
          `${up(depth + 1 + t.extra)}/proc/self/root${wd.workdir}/secret.txt`,
        ][t.which % ESCAPES]!;
      }
      case 'abs': {
        const to = nodes[t.node % nodes.length]!;
        return [
          `/${to.join('/')}`,
          `${hostRootDir}/${to.join('/')}`,
          `${wd.workdir}/secret.txt`,
          '/etc/passwd',
          `/proc/self/root${wd.workdir}/secret.txt`,
          '/proc/self/cwd',
          hostRootDir,
          '/',
        ][t.which % ABSOLUTES]!;
      }
      case 'dangling':
        return `${t.name}-missing`;
      case 'raw':
        return t.text === '' ? '.' : t.text;
    }
    return '.';
  };

  const rootless = spec.rootKind === 'missing' || spec.rootKind === 'file' || spec.rootKind === 'escape';
  const model = newDir();
  const ops: Op[] = [];
  const paths: Bytes[][] = [];
  const files = new Map<number, Bytes[]>();
  const lookupDir = (path: Bytes[]): MDir | null => {
    let cur: MNode = model;
    for (const c of path) {
      if (cur.kind !== 'dir') return null;
      const next = cur.children.get(c);
      if (!next) return null;
      cur = next;
    }
    return cur.kind === 'dir' ? cur : null;
  };
  const fits = (path: Bytes[]) => {
    const host = Buffer.byteLength(hostRootDir) + 1 + path.join('/').length;
    if (host < HOST_PATH_LIMIT) return true;
    // Created from a working directory inside the tree: the prefix must be a string path.
    return creatableFromCwd(hostRootDir, path) !== null;
  };
  const add = (op: Op, node: MNode, aim = true): boolean => {
    if (rootless) return false;
    const parent = lookupDir(op.path.slice(0, -1));
    const name = op.path[op.path.length - 1]!;
    if (!parent || parent.children.has(name) || !fits(op.path)) return false;
    if (op.op === 'symlink' && (op.target.length === 0 || op.target.length >= 4096 || op.target.includes('\0'))) return false;
    parent.children.set(name, node);
    ops.push(op);
    // Request recipes aim at these; a deep chain's intermediate directories would crowd them out.
    if (aim) paths.push(op.path);
    return true;
  };

  for (const p of dirPaths) add({ op: 'dir', path: p }, newDir());
  if (spec.deep) {
    deepPaths.forEach((p, i) => add({ op: 'dir', path: p }, newDir(), i === 0 || i === deepPaths.length - 1));
    const bottom = deepPaths[deepPaths.length - 1]!;
    const content = contentFor(9999, 9);
    add({ op: 'file', path: [...bottom, 'f'], content }, { kind: 'file', content });
    const up = Array<Bytes>(bottom.length + spec.deep.linkUp - 1)
      .fill('..')
      .join('/');
    add(
      { op: 'symlink', path: [...bottom, 'up'], target: `${up}/${spec.deep.linkUp === 0 ? 'x' : 'f'}` },
      { kind: 'symlink', target: `${up}/${spec.deep.linkUp === 0 ? 'x' : 'f'}` },
    );
    // A link at the top that reaches the bottom file through the whole chain.
    const down = `${[...bottom, 'f'].join('/')}`;
    add({ op: 'symlink', path: ['deep-link'], target: down }, { kind: 'symlink', target: down });
  }
  spec.leaves.forEach((l, i) => {
    const path = leafPaths[i]!;
    const parentPath = path.slice(0, -1);
    const leaf = l.leaf;
    switch (leaf.k) {
      case 'file': {
        const content = contentFor(i, leaf.size);
        if (add({ op: 'file', path, content }, { kind: 'file', content })) files.set(i, path);
        break;
      }
      case 'link': {
        const t = target(leaf.target, parentPath);
        add({ op: 'symlink', path, target: t }, { kind: 'symlink', target: t });
        break;
      }
      case 'hardlink': {
        const keys = [...files.keys()];
        if (keys.length === 0) break;
        const to = files.get(keys[leaf.to % keys.length]!)!;
        const parent = lookupDir(to.slice(0, -1));
        const node = parent?.children.get(to[to.length - 1]!);
        const short = Buffer.byteLength(hostRootDir) + 1 + to.join('/').length < HOST_PATH_LIMIT;
        if (node && node.kind === 'file' && short) add({ op: 'hardlink', path, to }, node);
        break;
      }
      case 'hardlink-outside':
        add({ op: 'hardlink-outside', path }, { kind: 'file', content: wd.publicContent });
        break;
      case 'fifo':
        add({ op: 'fifo', path }, { kind: 'fifo' });
        break;
      case 'socket':
        add({ op: 'socket', path }, { kind: 'socket' });
        break;
      case 'chain': {
        // name~0 -> name~1 -> … -> name~(length-1) -> target: around the 40-link ceiling.
        const names = Array.from({ length: leaf.length }, (_, k) => `${l.name.slice(0, 200)}~${k}`);
        const last = target(leaf.target, parentPath);
        names.forEach((n, k) => {
          const t = k + 1 < names.length ? names[k + 1]! : last;
          add({ op: 'symlink', path: [...parentPath, n], target: t }, { kind: 'symlink', target: t });
        });
        break;
      }
    }
  });
  const root = spec.rootKind === 'missing' || spec.rootKind === 'file' ? null : spec.rootKind === 'escape' || spec.rootKind === 'abs' ? 'outside' : model;
  return { spec, ops, root, paths: [[], ...paths] };
}

// ── Materialising ────────────────────────────────────────────────────────────────────────────────

const buf = (s: string | Bytes, latin = false) => Buffer.from(s, latin ? 'latin1' : 'utf8');

function hostPath(hostRoot: string, path: Bytes[]): Buffer {
  return Buffer.concat([buf(hostRoot), buf('/'), buf(path.join('/'), true)]);
}

/**
 * For a path too long for one syscall: a working directory inside the tree (a prefix that is valid
 * UTF-8, since process.chdir takes a string) and the remainder relative to it. Null if none fits.
 */
function creatableFromCwd(hostRoot: string, path: Bytes[]): { cwd: string; rest: Buffer } | null {
  for (let k = path.length - 1; k >= 1; k--) {
    const prefix = path.slice(0, k).join('/');
    const cwdBytes = Buffer.byteLength(hostRoot) + 1 + prefix.length;
    const rest = path.slice(k).join('/');
    if (cwdBytes >= HOST_PATH_LIMIT || rest.length >= HOST_PATH_LIMIT) continue;
    const pb = buf(prefix, true);
    if (!Buffer.from(pb.toString('utf8'), 'utf8').equals(pb)) continue;
    return { cwd: `${hostRoot}/${pb.toString('utf8')}`, rest: buf(rest, true) };
  }
  return null;
}

function at(hostRoot: string, path: Bytes[], fn: (p: Buffer) => void): void {
  const full = hostPath(hostRoot, path);
  if (full.length < HOST_PATH_LIMIT) return fn(full);
  const split = creatableFromCwd(hostRoot, path);
  if (!split) throw new Error('compileTree admitted a path it cannot create');
  const before = process.cwd();
  process.chdir(split.cwd);
  try {
    fn(split.rest);
  } finally {
    process.chdir(before);
  }
}

let poolCounter = 0;

function takeFromPool(pool: string, make: (paths: string[]) => void): string {
  let names = readdirSync(pool);
  if (names.length === 0) {
    const fresh = Array.from({ length: 64 }, () => join(pool, `p${poolCounter++}`));
    make(fresh);
    names = readdirSync(pool);
  }
  return join(pool, names[0]!);
}

function makeFifos(paths: string[]): void {
  execFileSync('mkfifo', paths);
}

function makeSockets(paths: string[]): void {
  // A bound-but-unused UNIX socket leaves its inode behind.
  execFileSync('python3', ['-c', 'import socket,sys\nfor p in sys.argv[1:]:\n  socket.socket(socket.AF_UNIX).bind(p)', ...paths]);
}

let trashCounter = 0;
let materialised = 0;

/** Moves the previous root away (cleaned up at the end) and builds this tree in its place. */
export function materialise(tree: CompiledTree, wd: Workdir): void {
  for (const name of [ROOT_NAME, REAL_ROOT]) {
    const p = join(wd.workdir, name);
    let present = false;
    try {
      lstatSync(p);
      present = true;
    } catch {
      present = false;
    }
    if (present) renameSync(p, join(wd.trash, `${trashCounter++}`));
  }
  // Old roots are kept until a batch is worth one rm (rm copes with paths past PATH_MAX): a long
  // run then never leaves a cleanup so big that the suite's afterAll times out.
  if (++materialised % 32 === 0) {
    execFileSync('rm', ['-rf', '--', wd.trash]);
    mkdirSync(wd.trash);
  }
  const outPath = join(wd.workdir, ROOT_NAME);
  const realPath = join(wd.workdir, REAL_ROOT);
  switch (tree.spec.rootKind) {
    case 'missing':
      return;
    case 'file':
      writeFileSync(outPath, 'the root is a file');
      return;
    case 'escape':
      symlinkSync('../outside-dir', outPath);
      return;
    case 'abs':
      mkdirSync(realPath);
      symlinkSync(realPath, outPath);
      break;
    case 'link':
      mkdirSync(realPath);
      symlinkSync(REAL_ROOT, outPath);
      break;
    case 'dir':
      mkdirSync(outPath);
      break;
  }
  const hostRoot = wd.hostRoot(tree.spec.rootKind);
  for (const op of tree.ops) {
    at(hostRoot, op.path, (p) => {
      switch (op.op) {
        case 'dir':
          mkdirSync(p);
          break;
        case 'file':
          writeFileSync(p, op.content);
          break;
        case 'symlink':
          symlinkSync(buf(op.target, true), p);
          break;
        case 'hardlink':
          linkSync(hostPath(hostRoot, op.to), p);
          break;
        case 'hardlink-outside':
          linkSync(join(wd.workdir, 'public.txt'), p);
          break;
        case 'fifo':
          renameSync(takeFromPool(wd.fifoPool, makeFifos), p);
          break;
        case 'socket':
          renameSync(takeFromPool(wd.socketPool, makeSockets), p);
          break;
      }
    });
  }
}

export const SECRET_MARK = 'SECRET-';

/** The fixed surroundings every generated root sits in. */
export function prepareWorkdir(base: string): Workdir {
  const workdir = join(base, 'workdir');
  const tag = randomBytes(6).toString('hex');
  const secrets: Buffer[] = [];
  const secret = (path: string, label: string) => {
    mkdirSync(dirname(path), { recursive: true });
    const content = Buffer.from(`${SECRET_MARK}${label}-${tag}`);
    writeFileSync(path, content);
    secrets.push(content);
  };
  mkdirSync(workdir, { recursive: true });
  secret(join(workdir, 'secret.txt'), 'workdir');
  secret(join(workdir, 'out-evil/secret.txt'), 'sibling');
  secret(join(workdir, 'escape-dir/secret.txt'), 'escape-dir');
  secret(join(workdir, 'escape-dir/inner/deeper.txt'), 'escape-dir-inner');
  secret(join(base, 'outside-secret.txt'), 'outside');
  secret(join(base, 'outside-dir/secret.txt'), 'outside-dir');
  const publicContent = Buffer.from(`public-${tag}`);
  writeFileSync(join(workdir, 'public.txt'), publicContent);
  const trash = join(base, 'trash');
  const fifoPool = join(base, 'fifo-pool');
  const socketPool = join(base, 'socket-pool');
  for (const d of [trash, fifoPool, socketPool]) mkdirSync(d);
  return {
    base,
    workdir,
    hostRoot: (kind) => join(workdir, kind === 'link' || kind === 'abs' ? REAL_ROOT : ROOT_NAME),
    trash,
    secrets,
    publicContent,
    fifoPool,
    socketPool,
  };
}

/** Removes everything, deep trees included (rm copes with paths longer than PATH_MAX). */
export function removeWorkdir(wd: Workdir): void {
  if (existsSync(wd.base)) execFileSync('rm', ['-rf', '--', wd.base]);
}
