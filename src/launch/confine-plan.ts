// The Landlock ruleset a confined `resource-plane serve` needs, planned and nothing more: which
// hierarchies and files it may read, execute and write, which ports it may bind and connect to.
// Pure apart from looking at the filesystem (realpath, stat, ELF headers); it restricts nothing,
// so tests can plan for any input. src/launch/confine-apply.ts applies the plan (restrict, hand
// off, re-exec); the header there tells why confinement is a re-exec at all.
import { closeSync, existsSync, openSync, readFileSync, readSync, realpathSync, statSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Destination, Manifest } from '../manifest/model.js';
import type * as native from '../addon/landlock.js';
import { PEER_INBOX_DIR } from '../manifest/scope.js';

const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** What the process may read beyond its workdir and install: TLS roots, DNS, time zones, devices. */
const SYSTEM_READ_DIRS = ['/etc/ssl', '/etc/pki', '/usr/lib/ssl', '/usr/local/ssl', '/usr/share/ca-certificates', '/usr/share/zoneinfo'];
const SYSTEM_READ_FILES = [
  '/etc/ld.so.cache',
  '/etc/resolv.conf',
  '/etc/hosts',
  '/etc/nsswitch.conf',
  '/etc/host.conf',
  '/etc/gai.conf',
  '/etc/services',
  '/etc/protocols',
  '/etc/localtime',
  '/dev/urandom',
  '/dev/random',
];

const READ_DIR: native.LandlockFsRight[] = ['read_file', 'read_dir'];
const READ_FILE: native.LandlockFsRight[] = ['read_file'];
const EXECUTE: native.LandlockFsRight[] = ['read_file', 'execute'];
/** The trace: appended to, and a line the disk cut short truncated away (src/trace/trace.ts). */
const TRACE: native.LandlockFsRight[] = ['write_file', 'truncate'];
/** The landing (native/write.cc): a temp file created, written, renamed in place or removed. */
const LANDING: native.LandlockFsRight[] = ['read_file', 'read_dir', 'write_file', 'make_reg', 'remove_file'];
/** The operator plane's unix socket: bound (made) in its directory, unlinked by libuv on close. */
const SOCKET_DIR: native.LandlockFsRight[] = ['make_sock', 'remove_file'];
/** The same socket bound before confinement: only its removal at stop is left to do. */
const SOCKET_REMOVE: native.LandlockFsRight[] = ['remove_file'];

export interface PlanInput {
  workdir: string;
  tracePath: string;
  manifest: Manifest;
  listenPort: number;
  /** `--operator-listen`, parsed: its TCP port is bound too, or its unix socket made (and removed at close). */
  operatorListen?: { host: string; port: number } | { path: string } | null;
  /** `--metrics-listen`, parsed, handled as the operator listener is. */
  metricsListen?: { host: string; port: number } | { path: string } | null;
  /**
   * The listening sockets are bound before confinement and inherited (the first stage, or systemd):
   * the domain then grants no TCP bind and no socket creation at all.
   */
  inheritedListeners?: boolean;
  /** With inheritedListeners: the operator's unix socket file is this launch's, removed when it stops. */
  ownedSocket?: boolean;
  /** Defaults: this package's root, process.execPath, process.env, /proc/self/maps, process.pid. */
  packageRoot?: string;
  execPath?: string;
  env?: NodeJS.ProcessEnv;
  mappedFiles?: string[];
  execArgv?: string[];
  /** The process that will run confined (the re-exec keeps the PID): its own /proc entries are read. */
  pid?: number;
}

type Role = 'read' | 'execute' | 'write';

export interface Plan {
  rules: (native.LandlockPathRule & { role: Role })[];
  bindPorts: number[];
  /** null: outbound TCP stays unrestricted (an allow entry admits every port). */
  connectPorts: number[] | null;
  notes: string[];
}

function real(path: string): string | null {
  try {
    return realpathSync(path);
  } catch {
    return null;
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function beneath(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith(sep) ? dir : dir + sep);
}

/** The files mapped into this process (the node binary, its shared libraries, loaded addons). */
function mappedFilesOfSelf(): string[] {
  const files = new Set<string>();
  for (const line of readFileSync('/proc/self/maps', 'utf8').split('\n')) {
    const path = line.split(/\s+/).slice(5).join(' ');
    if (path.startsWith('/') && !path.endsWith(' (deleted)')) files.add(path);
  }
  return [...files];
}

/**
 * The ELF interpreter (PT_INTERP) the kernel opens when it executes `path`: it needs the execute
 * right as much as the binary does. Null for a static binary or one this reader does not parse.
 */
export function elfInterpreter(path: string): string | null {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return null;
  }
  try {
    const head = Buffer.alloc(64);
    if (readSync(fd, head, 0, 64, 0) < 64 || head.readUInt32BE(0) !== 0x7f454c46) return null;
    if (head[4] !== 2 || head[5] !== 1) return null; // ELF64, little-endian (x64, arm64)
    const phoff = Number(head.readBigUInt64LE(32));
    const phentsize = head.readUInt16LE(54);
    const phnum = head.readUInt16LE(56);
    if (phentsize < 56 || phnum > 256) return null;
    const table = Buffer.alloc(phentsize * phnum);
    if (readSync(fd, table, 0, table.length, phoff) < table.length) return null;
    for (let i = 0; i < phnum; i++) {
      const at = i * phentsize;
      if (table.readUInt32LE(at) !== 3) continue; // PT_INTERP
      const offset = Number(table.readBigUInt64LE(at + 8));
      const size = Number(table.readBigUInt64LE(at + 32));
      if (size < 2 || size > 4096) return null;
      const name = Buffer.alloc(size);
      if (readSync(fd, name, 0, size, offset) < size) return null;
      const text = name.toString('latin1');
      return text.slice(0, text.indexOf('\0') < 0 ? text.length : text.indexOf('\0'));
    }
    return null;
  } finally {
    closeSync(fd);
  }
}

/** Flags with which node itself loads a file before the entry point (a preload, a loader). */
const PRELOAD_FLAGS = new Set(['--import', '--require', '-r', '--loader', '--experimental-loader']);

/**
 * The files node's own command line (its options and NODE_OPTIONS) makes it load at startup: the
 * re-executed image loads them again, inside the domain. Paths and file: URLs only; a bare
 * specifier resolves through node_modules, which the plan reads already.
 */
export function preloadFiles(execArgv: readonly string[], nodeOptions = ''): string[] {
  const words = [...execArgv, ...nodeOptions.split(/\s+/).filter(Boolean)];
  const files: string[] = [];
  for (let i = 0; i < words.length; i++) {
    const word = words[i]!;
    const eq = word.indexOf('=');
    const flag = eq > 0 ? word.slice(0, eq) : word;
    if (!PRELOAD_FLAGS.has(flag)) continue;
    const value = eq > 0 ? word.slice(eq + 1) : words[++i];
    if (value === undefined) break;
    if (value.startsWith('file:')) {
      try {
        files.push(fileURLToPath(value));
      } catch {
        // not a path
      }
    } else if (value.startsWith('/') || value.startsWith('.')) {
      files.push(resolve(value));
    }
  }
  return files;
}

/**
 * Every directory named node_modules above the package root: where its dependencies are when it
 * is installed (`<project>/node_modules/capsule-resource-plane` beside `<project>/node_modules/x`).
 */
export function ancestorNodeModules(packageRoot: string): string[] {
  const found: string[] = [];
  let dir = dirname(packageRoot);
  for (;;) {
    const candidate = join(dir, 'node_modules');
    // (The package's own node_modules lies beneath the package root, which is read already.)
    if (!beneath(candidate, packageRoot) && isDirectory(candidate)) found.push(candidate);
    if (dirname(dir) === dir) break;
    dir = dirname(dir);
  }
  return found;
}

/**
 * The ruleset a confined session needs. Paths are resolved here (rules are opened refusing every
 * symlink), missing system paths are left out, and a hierarchy already covered is not repeated.
 */
export function planConfinement(input: PlanInput): Plan {
  const env = input.env ?? process.env;
  const rules: Plan['rules'] = [];
  const notes: string[] = [];
  const readDirs: string[] = [];
  const add = (path: string | null, access: native.LandlockFsRight[], directory: boolean, role: Role, optional = false) => {
    if (path === null) return;
    if (role === 'read' && readDirs.some((d) => beneath(path, d))) return;
    if (rules.some((r) => r.path === path && r.role === role)) return;
    if (role === 'read' && directory) readDirs.push(path);
    rules.push({ path, access, directory, optional, role });
  };
  const readDir = (path: string) => {
    const r = real(path);
    if (r !== null && isDirectory(r)) add(r, READ_DIR, true, 'read');
  };
  const readFile = (path: string) => {
    const r = real(path);
    if (r !== null && existsSync(r) && !isDirectory(r)) add(r, READ_FILE, false, 'read');
  };

  // The capsule's workdir (what is served), then this package and wherever its dependencies live.
  add(input.workdir, READ_DIR, true, 'read');
  const packageRoot = real(input.packageRoot ?? PACKAGE_ROOT) ?? PACKAGE_ROOT;
  add(packageRoot, READ_DIR, true, 'read');
  for (const dir of ancestorNodeModules(packageRoot)) readDir(dir);

  // Node itself: the binary and its interpreter may be executed (the re-exec), and the shared
  // libraries it maps may be read (by the dynamic loader of the new image).
  const execPath = real(input.execPath ?? process.execPath);
  add(execPath, EXECUTE, false, 'execute');
  const interpreter = execPath === null ? null : elfInterpreter(execPath);
  if (interpreter !== null) add(real(interpreter), EXECUTE, false, 'execute');
  // Only shared objects: any other mapped file (an addon in the package is covered already) must
  // not open up the directory it happens to sit in.
  for (const file of input.mappedFiles ?? mappedFilesOfSelf()) {
    const r = real(file);
    if (r === null || r === execPath || !/\.so(\.[0-9.]+)?$/.test(r) || isDirectory(r)) continue;
    readDir(dirname(r));
  }

  for (const file of preloadFiles(input.execArgv ?? process.execArgv, env.NODE_OPTIONS)) readFile(file);

  for (const dir of SYSTEM_READ_DIRS) readDir(dir);
  for (const file of SYSTEM_READ_FILES) readFile(file);
  for (const name of ['NODE_EXTRA_CA_CERTS', 'SSL_CERT_FILE'] as const) if (env[name]) readFile(env[name]);
  for (const dir of (env.SSL_CERT_DIR ?? '').split(':').filter(Boolean)) readDir(dir);

  // The process's own /proc entries (status, stat, limits, fd/): what process.memoryUsage() and
  // --metrics read through /proc/self. Landlock rules bind inodes, and /proc/self is a link that
  // resolves per caller, so the rule names the real directory of this PID, which the re-exec keeps.
  // Nothing there reaches another file: its links (fd/N, cwd, root, exe) are checked at their
  // targets, and it is read, never written.
  readDir(`/proc/${input.pid ?? process.pid}`);

  // What the session writes: its trace (the file itself, created before confinement) and, when it
  // may fetch, the landing directory. peer-in lies in the capsule's workdir, so it is optional: a
  // capsule that replaced it with a link or a file loses the landing, never the confinement.
  add(input.tracePath, TRACE, false, 'write');
  if (input.manifest.peerFetchAllow !== null) add(join(input.workdir, PEER_INBOX_DIR), LANDING, true, 'write', true);
  const operator = input.operatorListen ?? null;
  const sides = [operator, input.metricsListen ?? null];
  for (const side of sides) {
    if (side === null || !('path' in side)) continue;
    if (!input.inheritedListeners) add(real(dirname(side.path)), SOCKET_DIR, true, 'write');
    else if (input.ownedSocket) add(real(dirname(side.path)), SOCKET_REMOVE, true, 'write');
  }

  // Ports: the listener's own (0 is the ephemeral range), and those of the allow lists the server
  // itself connects through: peer_fetch.allow (fetch-peer-file: the issuer's card, the redeem) and,
  // with a peer plane, network.allow (share-file reads the recipient's card).
  const bindPorts = input.inheritedListeners ? [] : [input.listenPort, ...sides.flatMap((side) => (side !== null && 'port' in side ? [side.port] : []))];
  const outbound: [string, readonly Destination[]][] = [];
  if (input.manifest.peerFetchAllow !== null) outbound.push(['capabilities.peer_fetch.allow', input.manifest.peerFetchAllow]);
  if (input.manifest.peerFiles !== null) outbound.push(['capabilities.network.allow', input.manifest.networkAllow]);
  let connectPorts: number[] | null = [];
  for (const [list, entries] of outbound) {
    const bare = entries.find((d) => d.port === null);
    if (bare) {
      connectPorts = null;
      notes.push(`${list} entry '${bare.raw}' names no port, so outbound TCP is not restricted to ports`);
      break;
    }
    connectPorts.push(...entries.map((d) => d.port as number));
  }
  if (connectPorts !== null) connectPorts = [...new Set(connectPorts)].sort((a, b) => a - b);
  return { rules, bindPorts: [...new Set(bindPorts)], connectPorts, notes };
}
