// Launch options as typed on a command line, each validated in one place: the listen address, the
// advertised URL and the containment class. (The session id's one validation is parseSessionId in src/session/records-dir.ts.)
import { existsSync, lstatSync, realpathSync, statSync, unlinkSync, type Stats } from 'node:fs';
import { basename, dirname, isAbsolute, resolve } from 'node:path';
import { UsageError } from '../codes.js';
import * as native from '../addon/sockets.js';
import { CONTAINMENT_CLASSES, isContainment, type Containment } from '../wire.js';
import { MAX_DIGEST_CACHE_ENTRIES } from '../limits.js';

/** `HOST:PORT`, with IPv6 hosts in brackets. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new UsageError(`--listen must be HOST:PORT (got '${value}')`);
  return { host: (m[1] ?? m[2])!, port };
}

/**
 * `--operator-listen`: `HOST:PORT`, or `unix:PATH` with an absolute path that does not exist yet,
 * is not inside the workdir (a capsule must not reach the operator plane through its own tree) and
 * lies in a private directory (see checkPrivateSocketDir). A stale socket there (see
 * removeStaleSocket) is removed, and `onStale` told so.
 */
export function parseOperatorListen(value: string, workdir: string, onStale?: (path: string) => void): { host: string; port: number } | { path: string } {
  return parseSideListen('--operator-listen', value, workdir, onStale);
}

/** A listener beside the peer one (`--operator-listen`, `--metrics-listen`), its diagnostics naming `flag`. */
export function parseSideListen(
  flag: string,
  value: string,
  workdir: string,
  onStale?: (path: string) => void,
): { host: string; port: number } | { path: string } {
  if (!value.startsWith('unix:')) {
    try {
      return parseListen(value);
    } catch {
      throw new UsageError(`${flag} must be HOST:PORT or unix:PATH (got '${value}')`);
    }
  }
  const path = value.slice('unix:'.length);
  if (!isAbsolute(path)) throw new UsageError(`${flag} unix:PATH needs an absolute path (got '${value}')`);
  const real = (p: string) => {
    try {
      return realpathSync(p);
    } catch {
      return resolve(p);
    }
  };
  const dir = real(dirname(path));
  const wd = real(workdir);
  if (dir === wd || dir.startsWith(`${wd}/`)) {
    throw new UsageError(`${flag} unix:PATH must be outside the workdir (got '${value}')`);
  }
  checkPrivateSocketDir(flag, resolve(dirname(path)));
  const target = resolve(dir, basename(path));
  if (existsSync(path) || isDanglingLink(path)) {
    if (!removeStaleSocket(flag, target, value)) throw new UsageError(`${flag} unix:PATH must not exist yet (got '${value}')`);
    onStale?.(target);
  }
  return { path: target };
}

/**
 * A socket file left by a server that died without closing (kill -KILL) would block every
 * restart. It is removed only when all of these hold: it is a socket (not a link or a file), it
 * is owned by this user, it sits in the private directory checked already (nobody else could
 * have put it there), and a connect is refused (nobody listens). A socket something still
 * accepts on is an error naming its process when the kernel says which. Returns false for any
 * other kind of file, which the caller refuses as before.
 */
function isDanglingLink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false;
  }
}

function removeStaleSocket(flag: string, path: string, value: string): boolean {
  let st: Stats;
  try {
    st = lstatSync(path);
  } catch {
    return false;
  }
  const uid = process.getuid?.();
  if (!st.isSocket() || (uid !== undefined && st.uid !== uid)) return false;
  const probe = native.probeUnixSocket(path);
  if (probe.state === 'live') {
    const holder = probe.pid > 0 ? ` by pid ${probe.pid}` : '';
    throw new UsageError(`${flag} unix:PATH is in use${holder}: another server listens on '${path}' (got '${value}')`);
  }
  if (probe.state !== 'stale') return false;
  try {
    unlinkSync(path);
  } catch {
    return false;
  }
  return true;
}

/**
 * The operator socket's directory must be private: owned by this process's user, writable by no
 * one else, and not a symlink. The confined server may make sockets and remove files anywhere in
 * it, and whoever else can write there could swap the socket for their own.
 */
function checkPrivateSocketDir(flag: string, dir: string): void {
  const refuse = (what: string): never => {
    throw new UsageError(`${flag} unix:PATH: the directory '${dir}' ${what}; use a private directory (owned by this user, mode 0700)`);
  };
  let st: Stats;
  try {
    st = lstatSync(dir);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return refuse(code === 'ENOENT' ? 'does not exist' : `cannot be examined (${code ?? String(error)})`);
  }
  if (st.isSymbolicLink()) refuse('is a symbolic link');
  // The rule covers the whole hierarchy beneath it.
  if (dir === '/') refuse('is the root of the filesystem');
  if (!st.isDirectory()) refuse('is not a directory');
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid) refuse(`is owned by uid ${st.uid}, not by this server's uid ${uid}`);
  const writers = [st.mode & 0o020 ? 'group' : null, st.mode & 0o002 ? 'others' : null].filter(Boolean);
  if (writers.length > 0) refuse(`is writable by ${writers.join(' and ')} (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`);
  checkSocketDirAncestors(flag, dir, uid);
}

/**
 * Every ancestor of the socket directory, as the kernel reaches it (symlinks resolved), judged as
 * OpenSSH's StrictModes judges the path to a key: owned by this user or root, and writable by no
 * one else, unless it is root's and sticky (/tmp), where others can add entries but not rename or
 * remove ours. Whoever can write an ancestor can rename the private directory away and put their
 * own in its place, so a private last component alone proves nothing.
 */
function checkSocketDirAncestors(flag: string, dir: string, uid: number | undefined): void {
  let at: string;
  try {
    at = realpathSync(dir);
  } catch (error) {
    throw new UsageError(`${flag} unix:PATH: the directory '${dir}' cannot be resolved (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
  while (at !== '/') {
    at = dirname(at);
    const refuse = (what: string): never => {
      throw new UsageError(
        `${flag} unix:PATH: the directory '${dir}' lies under '${at}', which ${what}; every directory above the socket must be owned by this user or root and writable by no one else (unless root's and sticky, as /tmp)`,
      );
    };
    let st: Stats;
    try {
      st = statSync(at);
    } catch (error) {
      return refuse(`cannot be examined (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
    }
    if (uid !== undefined && st.uid !== uid && st.uid !== 0) refuse(`is owned by uid ${st.uid}`);
    const writable = (st.mode & 0o022) !== 0;
    const stickyOfRoot = (st.mode & 0o1000) !== 0 && st.uid === 0;
    if (writable && !stickyOfRoot)
      refuse(`is writable by ${st.mode & 0o002 ? 'others' : 'its group'} (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`);
  }
}

export function parseContainment(value: string | undefined): Containment {
  const c = value ?? 'advisory';
  if (!isContainment(c)) throw new UsageError(`--containment must be one of ${CONTAINMENT_CLASSES.join(', ')} (got '${value}')`);
  return c;
}

/**
 * The advertised URL, with the port always explicit: the audience is `<name>@<host:port>`, and a
 * URL parser drops a default port (`:80`), which would make the audience `<name>@<host>`.
 */
export function parseAdvertise(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`--advertise must be an http(s) URL (got '${value}')`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.search || url.hash || url.username || url.password) {
    throw new UsageError(`--advertise must be an http(s) URL with no query, fragment or credentials (got '${value}')`);
  }
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  const path = url.pathname.replace(/\/+$/, '');
  return `${url.protocol}//${url.hostname}:${port}${path}`;
}

/** The launch's addresses as typed options: what launch() and the confined launch's first stage both read. */
export interface AddressOptions {
  listen?: string;
  advertise?: string;
  operatorListen?: string;
  metricsListen?: string;
  workdir: string;
}

export interface Addresses {
  listen: { host: string; port: number };
  advertise: string | undefined;
  /** null without --operator-listen, or when the sockets were handed over (`inherited`). */
  operator: { host: string; port: number } | { path: string } | null;
  /** null without --metrics-listen, or when the sockets were handed over. */
  metrics: { host: string; port: number } | { path: string } | null;
}

/** Every address option validated, in one place, with the defaults a launch uses. */
export function parseAddresses(opts: AddressOptions, inherited: boolean, onStale?: (path: string) => void): Addresses {
  return {
    listen: parseListen(opts.listen ?? '127.0.0.1:0'),
    advertise: parseAdvertise(opts.advertise),
    operator: inherited || opts.operatorListen === undefined ? null : parseOperatorListen(opts.operatorListen, opts.workdir, onStale),
    metrics: inherited || opts.metricsListen === undefined ? null : parseSideListen('--metrics-listen', opts.metricsListen, opts.workdir, onStale),
  };
}

/**
 * The digest cache's capacity (`serve --digest-cache-entries`, the session option
 * `digestCacheEntries`): a whole number of entries from 0 (no cache) to 2^24. Each entry takes about
 * 100 bytes once stored (native/digest_cache.h), beside the memory budget.
 */
export function parseDigestCacheEntries(value: string | number, flag = '--digest-cache-entries'): number {
  const n = typeof value === 'number' ? value : /^[0-9]{1,9}$/.test(value) ? Number(value) : NaN;
  if (!Number.isInteger(n) || n < 0 || n > MAX_DIGEST_CACHE_ENTRIES) {
    throw new UsageError(`${flag} must be a whole number of entries from 0 (no cache) to ${MAX_DIGEST_CACHE_ENTRIES} (got '${String(value)}')`);
  }
  return n;
}
