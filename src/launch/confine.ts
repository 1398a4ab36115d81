// Self-confinement of `resource-plane serve` with Landlock: after launch the process can read only
// what it needs (the workdir, its own install, the system files Node, TLS and DNS use), write only
// the trace and the workdir's peer-in, bind only its listen port and connect only to the ports of
// the allow lists it connects through. Where the kernel has no Landlock, or when told not to, it serves
// unconfined and says why in session_start.
//
// Why a re-exec. A Landlock domain binds the thread that calls landlock_restrict_self and the
// threads it creates afterwards, never threads that already exist. By the time any of our code
// runs, Node has started its V8 platform threads and, for an ES module entry point, the libuv pool
// (the ESM loader reads modules through it); pool threads do every asynchronous open, fs's and the
// addon's. So confining in place would leave exactly the file-opening threads outside. Instead the
// launch is split in two phases within one process (one PID):
//
//   1. unconfined: validate everything (options, manifest, export roots: a refusal exits here as
//      before), settle what the session needs (workdir, session id, trace path, the manifest as
//      read once), create the trace file and peer-in, plan the ruleset; then, on the main thread,
//      restrict that thread and execve the same command from it;
//   2. the new image starts with that one thread, already in the domain, so every thread Node and
//      libuv create from then on is inside it. It takes the settled launch from an environment
//      variable (the manifest is not read again: after confinement it may not be readable), checks
//      that the domain is really in force, and serves.
//
// Nothing here runs for a library launch (launch()): confining the caller's process would be a
// surprise, so those sessions record that they are not confined.
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, realpathSync, statSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UsageError } from '../codes.js';
import { notConfined, type Confinement } from './confinement.js';
import type { Destination, Manifest } from '../manifest/model.js';
import * as native from '../native.js';
import { PEER_INBOX_DIR } from '../manifest/scope.js';
import { Trace } from '../trace/trace.js';
import { prepareSession, type SessionOptions } from './open-session.js';
import { parseAdvertise, parseListen, parseOperatorListen } from './options.js';

/** Carries a confined launch's settled state across the execve (phase 1 → phase 2). */
export const HANDOFF_ENV = 'RESOURCE_PLANE_CONFINED_LAUNCH';
/** `off` serves unconfined (as `--no-landlock` does); `auto` (the default) confines where possible. */
export const LANDLOCK_ENV = 'RESOURCE_PLANE_LANDLOCK';
/** Above this the handoff would not fit one environment string (the kernel caps each at 128 KiB). */
const HANDOFF_MAX_BYTES = 96 * 1024;

const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** What the process may read beyond its workdir and install: TLS roots, DNS, time zones, devices. */
const SYSTEM_READ_DIRS = ['/etc/ssl', '/etc/pki', '/usr/lib/ssl', '/usr/local/ssl', '/usr/share/ca-certificates', '/usr/share/zoneinfo'];
const SYSTEM_READ_FILES = [
  '/etc/ld.so.cache', '/etc/resolv.conf', '/etc/hosts', '/etc/nsswitch.conf', '/etc/host.conf', '/etc/gai.conf',
  '/etc/services', '/etc/protocols', '/etc/localtime', '/dev/urandom', '/dev/random',
];

const READ_DIR: native.LandlockFsRight[] = ['read_file', 'read_dir'];
const READ_FILE: native.LandlockFsRight[] = ['read_file'];
const EXECUTE: native.LandlockFsRight[] = ['read_file', 'execute'];
const APPEND: native.LandlockFsRight[] = ['write_file'];
/** The landing (native/write.cc): a temp file created, written, renamed in place or removed. */
const LANDING: native.LandlockFsRight[] = ['read_file', 'read_dir', 'write_file', 'make_reg', 'remove_file'];
/** The operator plane's unix socket: bound (made) in its directory, unlinked by libuv on close. */
const SOCKET_DIR: native.LandlockFsRight[] = ['make_sock', 'remove_file'];

export type LandlockMode = 'auto' | 'off';

/** `--no-landlock` or RESOURCE_PLANE_LANDLOCK=off turn confinement off; anything but off/auto is a usage error. */
export function landlockMode(flag: boolean, env: NodeJS.ProcessEnv = process.env): { mode: LandlockMode; why: string | null } {
  if (!flag) return { mode: 'off', why: 'disabled by --no-landlock' };
  const value = env[LANDLOCK_ENV];
  if (value === undefined || value === '' || value === 'auto') return { mode: 'auto', why: null };
  if (value === 'off') return { mode: 'off', why: `disabled by ${LANDLOCK_ENV}=off` };
  throw new UsageError(`${LANDLOCK_ENV} must be 'auto' or 'off' (got '${value}')`);
}

// ── The plan ────────────────────────────────────────────────────────────────────────────────────

export interface PlanInput {
  workdir: string;
  tracePath: string;
  manifest: Manifest;
  listenPort: number;
  /** `--operator-listen`, parsed: its TCP port is bound too, or its unix socket made (and removed at close). */
  operatorListen?: { host: string; port: number } | { path: string } | null;
  /** Defaults: this package's root, process.execPath, process.env, /proc/self/maps. */
  packageRoot?: string;
  execPath?: string;
  env?: NodeJS.ProcessEnv;
  mappedFiles?: string[];
  execArgv?: string[];
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

  // What the session writes: its trace (the file itself, created before confinement) and, when it
  // may fetch, the landing directory. peer-in lies in the capsule's workdir, so it is optional: a
  // capsule that replaced it with a link or a file loses the landing, never the confinement.
  add(input.tracePath, APPEND, false, 'write');
  if (input.manifest.peerFetchAllow !== null) add(join(input.workdir, PEER_INBOX_DIR), LANDING, true, 'write', true);
  const operator = input.operatorListen ?? null;
  if (operator !== null && 'path' in operator) add(real(dirname(operator.path)), SOCKET_DIR, true, 'write');

  // Ports: the listener's own (0 is the ephemeral range), and those of the allow lists the server
  // itself connects through: peer_fetch.allow (fetch-peer-file: the issuer's card, the redeem) and,
  // with a peer plane, network.allow (share-file reads the recipient's card).
  const bindPorts = [input.listenPort, ...(operator !== null && 'port' in operator ? [operator.port] : [])];
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

// ── Applying it ─────────────────────────────────────────────────────────────────────────────────

interface Handoff {
  v: 1;
  workdir: string;
  manifest: Manifest;
  sessionId: string;
  tracePath: string;
  confinement: Confinement;
}

function report(plan: Plan, applied: native.LandlockApplied): Confinement {
  const skippedIdx = new Set(applied.skipped.map((s) => s.index));
  const kept = plan.rules.filter((_r, i) => !skippedIdx.has(i));
  const net = applied.handledNet;
  return {
    applied: true,
    landlock_abi: applied.abi,
    reason: null,
    read: kept.filter((r) => r.role === 'read').map((r) => r.path),
    execute: kept.filter((r) => r.role === 'execute').map((r) => r.path),
    write: kept.filter((r) => r.role === 'write').map((r) => r.path),
    bind_ports: net.includes('bind_tcp') ? plan.bindPorts : null,
    connect_ports: net.includes('connect_tcp') ? (plan.connectPorts ?? []) : null,
    scoped: applied.scoped,
    skipped: applied.skipped.map((s) => `${plan.rules[s.index]!.path}: ${s.detail}`),
    notes: [
      ...plan.notes,
      ...(applied.abi < 4 ? [`Landlock ABI ${applied.abi} has no network rules: TCP binds and connects are not restricted`] : []),
    ],
  };
}

export interface ConfineOptions extends Omit<SessionOptions, 'advertisedUrl' | 'confinement'> {
  listen?: string;
  advertise?: string;
  operatorListen?: string;
}

/**
 * Phase 1. Validates the launch as serve would, then confines the main thread and re-executes the
 * same command inside the domain: on success it does not return. It returns only a report of why
 * nothing was applied, and the caller then serves in this process, unconfined.
 */
export async function confineAndReexec(opts: ConfineOptions, log: (fields: { session_id: string }, msg: string) => void): Promise<Confinement> {
  const listen = parseListen(opts.listen ?? '127.0.0.1:0');
  parseAdvertise(opts.advertise);
  const operatorListen = opts.operatorListen === undefined ? null : parseOperatorListen(opts.operatorListen, opts.workdir);
  // Every check a launch makes, with the same diagnostics; the workdir is created if missing.
  const prepared = await prepareSession(opts);
  prepared.abandon();
  const { workdir, manifest, sessionId, tracePath } = prepared;

  const abi = native.landlockAbi();
  if (!abi.ok) return notConfined(`Landlock is unavailable: ${abi.code} (${abi.detail})`);

  // The trace file must exist for its rule (the rule names the file, not its whole directory). Made
  // exactly as the session will open it, so a bad --trace fails here with the same error.
  await Trace.open(tracePath, sessionId).close();
  if (manifest.peerFetchAllow !== null) {
    try {
      mkdirSync(join(workdir, PEER_INBOX_DIR), { mode: 0o755 });
    } catch {
      // Already there (or unusable: the rule is optional and the landing refuses it on its own).
    }
  }

  const plan = planConfinement({ workdir, tracePath, manifest, listenPort: listen.port, operatorListen });
  if (plan.rules.some((r) => r.role === 'read' && r.path === '/')) {
    return notConfined("a read rule would cover the whole filesystem ('/')", abi.abi);
  }
  const handoffBase = { v: 1 as const, workdir, manifest, sessionId, tracePath };
  if (Buffer.byteLength(JSON.stringify(handoffBase)) > HANDOFF_MAX_BYTES) {
    return notConfined('the parsed manifest is too large to hand to the confined process', abi.abi);
  }

  const applied = native.landlockRestrictSelf({
    paths: plan.rules.map(({ path, access, directory, optional }) => ({ path, access, directory, optional })),
    bindPorts: plan.bindPorts,
    restrictConnect: plan.connectPorts !== null,
    connectPorts: plan.connectPorts ?? [],
  });
  if (!applied.ok) return notConfined(`the Landlock ruleset was not applied: ${applied.code} (${applied.detail})`, applied.abi || abi.abi);

  const handoff: Handoff = { ...handoffBase, confinement: report(plan, applied) };
  const env = Object.entries({ ...process.env, [HANDOFF_ENV]: JSON.stringify(handoff) })
    .filter((e): e is [string, string] => e[1] !== undefined)
    .map(([k, v]) => `${k}=${v}`);
  log({ session_id: sessionId }, 'confined: re-executing inside the Landlock domain');
  const argv = [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
  const failed = native.replaceProcessImage(process.execPath, argv, env);
  // Still here: the main thread is confined for good, the threads already running are not. Serve
  // on (the session works: what the main thread opens is in the ruleset), but say it plainly.
  return notConfined(
    `the re-exec into the Landlock domain failed (${failed.code}: ${failed.detail}); this process's main thread is confined, its other threads are not`,
    applied.abi,
  );
}

/**
 * Phase 2: the settled launch phase 1 handed over, or null when this is not a confined re-exec.
 * The variable is removed from the environment at once. The report's `applied` is believed only
 * if the domain is observably in force (the root directory, which no rule covers, is unreadable),
 * so a hand-set variable cannot make an unconfined server claim otherwise.
 */
export function takeHandoff(env: NodeJS.ProcessEnv = process.env): Omit<Handoff, 'v'> | null {
  const raw = env[HANDOFF_ENV];
  if (raw === undefined) return null;
  delete env[HANDOFF_ENV];
  let handoff: Handoff;
  try {
    handoff = JSON.parse(raw) as Handoff;
  } catch {
    throw new UsageError(`${HANDOFF_ENV} is not a confined launch's handoff`);
  }
  if (handoff?.v !== 1 || typeof handoff.workdir !== 'string' || typeof handoff.sessionId !== 'string' ||
      typeof handoff.tracePath !== 'string' || typeof handoff.manifest !== 'object' || handoff.manifest === null ||
      typeof handoff.confinement?.applied !== 'boolean') {
    throw new UsageError(`${HANDOFF_ENV} is not a confined launch's handoff`);
  }
  let confinement = handoff.confinement;
  if (confinement.applied && !rootIsDenied()) {
    confinement = notConfined(`${HANDOFF_ENV} claims a Landlock domain, but none is in force ('/' is readable)`, confinement.landlock_abi);
  }
  return { workdir: handoff.workdir, manifest: handoff.manifest, sessionId: handoff.sessionId, tracePath: handoff.tracePath, confinement };
}

function rootIsDenied(): boolean {
  try {
    closeSync(openSync('/', 'r'));
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EACCES';
  }
}
