// The reference model of the operator plane's contract, written from SPEC sections 3 and 4 and
// sharing no code with src/ or native/: lowering a request target, resolving it in an in-memory
// tree under a containment class, and what a listing contains. The property tests build the same
// tree on disk and require the server's answers to equal the model's.
//
// Names and paths are byte strings held in latin1 JS strings (one char per byte, 0..255), so a name
// that is not valid UTF-8 is an ordinary value here and byte order is string order.
//
// Beyond the spec, the model adopts the bounds the implementation documents for a request
// (native/resolve.h): a relpath of PATH_MAX (4096) bytes or more, or of more than 256 components,
// names nothing (not_found); a listing lists exactly what a read could address (every component
// valid UTF-8, under those bounds). Symlinks followed in one resolution are capped at 40, the
// kernel's own limit; a resolution past it names nothing (a loop is not_found).

export type Bytes = string;

export type MNode =
  | { kind: 'dir'; children: Map<Bytes, MNode> }
  | { kind: 'file'; content: Buffer }
  | { kind: 'symlink'; target: Bytes }
  | { kind: 'fifo' }
  | { kind: 'socket' };

export type MDir = Extract<MNode, { kind: 'dir' }>;

export type Containment = 'sealed' | 'advisory' | 'scoped';

export type WireCode = 'not_found' | 'outside_root' | 'symlink_refused' | 'not_a_regular_file' | 'too_large';

export type ModelRead = { code: 'ok'; bytes: Buffer } | { code: WireCode };

/** SPEC section 4's table: the status of each code the operator plane can answer a read with. */
export const STATUS: Readonly<Record<string, number>> = Object.freeze({
  ok: 200,
  not_found: 404,
  outside_root: 403,
  symlink_refused: 403,
  not_a_regular_file: 403,
  too_large: 413,
  no_resource_plane: 404,
  method_not_allowed: 405,
  io_error: 500,
  bad_request: 400,
});

export const PATH_MAX = 4096;
export const MAX_COMPONENTS = 256;
export const MAX_LINKS = 40;

export function newDir(): MDir {
  return { kind: 'dir', children: new Map() };
}

export function bytesOf(s: Bytes): Buffer {
  return Buffer.from(s, 'latin1');
}

/** Valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF): it survives a round trip. */
export function isUtf8(s: Bytes): boolean {
  const b = bytesOf(s);
  return Buffer.from(b.toString('utf8'), 'utf8').equals(b);
}

/** A byte string as the text a JSON listing carries it as (only meaningful when isUtf8). */
export function textOf(s: Bytes): string {
  return bytesOf(s).toString('utf8');
}

const HEXDIGIT = /^[0-9A-Fa-f]$/;

/** Percent-decodes once: `%XY` with two hex digits is one byte, any other `%` stays literal. */
export function percentDecode(raw: Bytes): Bytes {
  let out = '';
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i]!;
    if (c === '%' && HEXDIGIT.test(raw[i + 1] ?? '') && HEXDIGIT.test(raw[i + 2] ?? '')) {
      out += String.fromCharCode(parseInt(raw.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

/**
 * SPEC 4, "Lowering a relpath": decode once; refuse empty, NUL, not UTF-8, absolute; drop one
 * trailing `/`; split; refuse an empty, `.` or `..` component. Null means outside_root.
 */
export function lower(raw: Bytes): Bytes[] | null {
  let text = percentDecode(raw);
  if (text === '' || text.includes('\0') || !isUtf8(text) || text.startsWith('/')) return null;
  if (text.endsWith('/')) text = text.slice(0, -1);
  const components = text.split('/');
  if (components.some((c) => c === '' || c === '.' || c === '..')) return null;
  return components;
}

/**
 * What the router sees of a request target: the query (from the first `?`) is stripped, and so is a
 * fragment (from the first `#`, RFC 3986: never part of the path); an absolute-form target loses its
 * scheme and authority.
 */
export function targetPath(target: Bytes): Bytes {
  let t = target;
  const q = t.indexOf('?');
  if (q >= 0) t = t.slice(0, q);
  const h = t.indexOf('#');
  if (h >= 0) t = t.slice(0, h);
  const abs = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/]*/.exec(t);
  if (abs) t = t.slice(abs[0].length) || '/';
  return t;
}

type Resolved = { node: MNode } | { code: WireCode };

/**
 * Resolves components beneath `root` (SPEC 3). `follow` is sealed/advisory: symlinks are followed
 * while every step stays beneath the root, physically (`..` leaves the directory actually entered);
 * a `..` above the root or an absolute target is outside_root. Not following (scoped), the first
 * symlink met anywhere is symlink_refused. A name that is missing, or a non-directory used as one,
 * is not_found; so is a resolution that follows more than MAX_LINKS links.
 */
export function resolve(root: MDir, components: Bytes[], follow: boolean): Resolved {
  const stack: MDir[] = [root];
  const pending = [...components];
  let links = 0;
  let result: MNode | null = null;
  while (pending.length > 0) {
    const name = pending.shift()!;
    const last = pending.length === 0;
    const cur = stack[stack.length - 1]!;
    if (name === '' || name === '.') {
      if (last) result = cur;
      continue;
    }
    if (name === '..') {
      if (stack.length === 1) return { code: 'outside_root' };
      stack.pop();
      if (last) result = stack[stack.length - 1]!;
      continue;
    }
    const child = cur.children.get(name);
    if (child === undefined) return { code: 'not_found' };
    if (child.kind === 'symlink') {
      if (!follow) return { code: 'symlink_refused' };
      if (++links > MAX_LINKS) return { code: 'not_found' };
      if (child.target.startsWith('/')) return { code: 'outside_root' };
      pending.unshift(...child.target.split('/'));
      continue;
    }
    if (child.kind === 'dir') {
      if (last) result = child;
      else stack.push(child);
      continue;
    }
    if (!last) return { code: 'not_found' };
    result = child;
  }
  return { node: result! };
}

/** Whether a request could address this relpath at all (the documented request bounds). */
export function addressable(components: Bytes[]): boolean {
  return components.join('/').length < PATH_MAX && components.length <= MAX_COMPONENTS;
}

/**
 * The export root as a request finds it (it is resolved beneath the workdir on every request): a
 * directory, nothing (missing, or not a directory), or a place outside the workdir.
 */
export type RootState = MDir | null | 'outside';

/** A read of the raw relpath (the request target's part after `/resources/files/`). */
export function read(root: RootState, raw: Bytes, containment: Containment, maxBytes: number): ModelRead {
  const components = lower(raw);
  if (components === null) return { code: 'outside_root' };
  return readComponents(root, components, containment, maxBytes);
}

/** A read of an already-lowered relpath: the root first, then the request bounds, then the walk. */
export function readComponents(root: RootState, components: Bytes[], containment: Containment, maxBytes: number): ModelRead {
  if (root === 'outside') return { code: 'outside_root' };
  if (root === null) return { code: 'not_found' };
  if (!addressable(components)) return { code: 'not_found' };
  const r = resolve(root, components, containment !== 'scoped');
  if ('code' in r) return r;
  if (r.node.kind !== 'file') return { code: 'not_a_regular_file' };
  if (r.node.content.length > maxBytes) return { code: 'too_large' };
  return { code: 'ok', bytes: r.node.content };
}

export interface ModelEntry {
  /** The path as the listing's JSON carries it. */
  path: string;
  content: Buffer;
}

/**
 * SPEC 4, "Listing": regular files beneath the root, recursively, in UTF-8 byte order; under
 * sealed/advisory a symlink is listed under its own path only if it leads to a regular file beneath
 * the root, and symlinked directories are never descended; under scoped symlinks are left out;
 * special files are skipped. Sizes and digests are of the whole file (no max_bytes).
 */
export function list(root: RootState, containment: Containment): ModelEntry[] | { code: 'outside_root' } {
  const out: Array<{ bytes: Bytes; content: Buffer }> = [];
  if (root === 'outside') return { code: 'outside_root' };
  if (root === null) return [];
  const follow = containment !== 'scoped';
  const walk = (dir: MDir, prefix: Bytes[]) => {
    for (const [name, node] of dir.children) {
      const components = [...prefix, name];
      if (!isUtf8(name) || !addressable(components)) continue;
      if (node.kind === 'dir') walk(node, components);
      else if (node.kind === 'file') out.push({ bytes: components.join('/'), content: node.content });
      else if (node.kind === 'symlink' && follow) {
        const r = resolve(root, components, true);
        if ('node' in r && r.node.kind === 'file') out.push({ bytes: components.join('/'), content: r.node.content });
      }
    }
  };
  walk(root, []);
  out.sort((a, b) => (a.bytes < b.bytes ? -1 : a.bytes > b.bytes ? 1 : 0));
  return out.map((e) => ({ path: textOf(e.bytes), content: e.content }));
}
