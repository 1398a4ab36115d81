// Node's compile cache for the command's own start-up (issue 25: a launch boots two Node images,
// and compiling the same modules in both is most of what a confined start costs). The cache lives
// beside the code it caches, in the package's `.compile-cache/`, so it has exactly the code's trust:
// whoever could write it could already write dist/. Nothing is trusted that another user could have
// written: the directory and its version subdirectories must be real directories, and every file in
// them a regular file (never a link), all owned by this user or root and writable by no one else;
// otherwise the command runs uncached, and serve's log says why. It is filled by
// `node scripts/warm-compile-cache.mjs` (run by `npm run build`, `prepare` and `install`), never by
// a confined serve, whose Landlock domain refuses the write (Node then just does not save).
// Imports only node: modules: it runs before anything else is loaded.
import { lstatSync, readdirSync, type Stats } from 'node:fs';
import * as nodeModule from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Node 22.1's API, which the pinned @types/node (20) does not describe. */
interface CompileCacheApi {
  enableCompileCache?(dir: string): { status: number; message?: string; directory?: string };
  flushCompileCache?(): void;
  constants: { compileCacheStatus?: { ENABLED: number; ALREADY_ENABLED: number } };
}
const { enableCompileCache, flushCompileCache: flush, constants: moduleConstants } = nodeModule as unknown as CompileCacheApi;

/** Why this Node has no compile cache, or null when it has one (22.1 and later). */
export function compileCacheMissing(): string | null {
  return enableCompileCache === undefined || moduleConstants.compileCacheStatus === undefined
    ? `Node ${process.version} has no compile cache (22.1 or later has)`
    : null;
}

/** Writes what this process compiled to the cache now (Node would at exit). */
export function flushCompileCache(): void {
  flush?.();
}

/** `<package>/.compile-cache`: dist/cli/ is two levels below the package root. */
export const COMPILE_CACHE_DIR = fileURLToPath(new URL('../../.compile-cache', import.meta.url));

/** Why an entry of the cache may not hold code for this process (`kind` what it must be), or null when it may. */
function untrusted(stat: Stats, euid: number, kind: 'directory' | 'file' = 'directory'): string | null {
  if (stat.isSymbolicLink()) return 'is a symbolic link';
  if (kind === 'directory' ? !stat.isDirectory() : !stat.isFile()) return kind === 'directory' ? 'is not a directory' : 'is not a regular file';
  if (stat.uid !== euid && stat.uid !== 0) return `is owned by uid ${stat.uid}`;
  if ((stat.mode & 0o022) !== 0) return `is writable by group or others (mode ${(stat.mode & 0o777).toString(8)})`;
  return null;
}

/**
 * Why `dir` must not be used as a compile cache, or null when it may: it, each entry in it (one
 * directory per Node version) and every file in those (what Node loads code from) pass
 * `untrusted`: a file another user could have written, or a link to one, turns the whole cache
 * off. A directory that does not exist is a reason too.
 */
export function compileCacheProblem(dir: string, euid = process.geteuid?.() ?? 0): string | null {
  // Another process may be saving into the cache meanwhile (Node writes a temporary file and
  // renames it into place, and makes a version directory on first use): an entry that is gone by
  // the time it is looked at is skipped; any other failure (the directory itself missing included)
  // turns the cache off, never the command.
  try {
    const own = untrusted(lstatSync(dir), euid);
    if (own !== null) return `${dir} ${own}`;
    for (const name of readdirSync(dir)) {
      const version = join(dir, name);
      const versionStat = lstatSync(version, { throwIfNoEntry: false });
      if (versionStat === undefined) continue;
      const problem = untrusted(versionStat, euid);
      if (problem !== null) return `${version} ${problem}`;
      for (const file of listOrNothing(version)) {
        const path = join(version, file);
        const fileStat = lstatSync(path, { throwIfNoEntry: false });
        if (fileStat === undefined) continue;
        const fileProblem = untrusted(fileStat, euid, 'file');
        if (fileProblem !== null) return `${path} ${fileProblem}`;
      }
    }
  } catch (error) {
    return `cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`;
  }
  return null;
}

/** The names in `dir`, or none when it was removed since its parent was read. */
function listOrNothing(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

/** What the last useCompileCache decided, for the serve log: null while it has not run. */
let outcome: { used: boolean; why: string | null; level: 'debug' | 'info' | 'warn' } | null = null;

/**
 * Whether the cache is on and, if not, why, with how loudly the log should say it: `warn` when a
 * file in it could have been written by someone else (the cache is off), `info` when the caller's
 * own NODE_COMPILE_CACHE is used (unchecked: it is the caller's choice), `debug` otherwise.
 */
export function compileCacheOutcome(): typeof outcome {
  return outcome;
}

/**
 * Turns the cache on for this process when `dir` passes the checks; returns why it did not.
 * NODE_DISABLE_COMPILE_CACHE=1 turns it off (Node's own switch); an explicit NODE_COMPILE_CACHE
 * is the caller's choice and left as Node set it.
 */
export function useCompileCache(dir = COMPILE_CACHE_DIR): string | null {
  const decide = (why: string | null, level: 'debug' | 'info' | 'warn' = 'debug'): string | null => {
    outcome = { used: why === null, why, level };
    return why;
  };
  const missing = compileCacheMissing();
  if (missing !== null) return decide(missing);
  if (process.env.NODE_DISABLE_COMPILE_CACHE) return decide('disabled by NODE_DISABLE_COMPILE_CACHE');
  if (process.env.NODE_COMPILE_CACHE) {
    return decide(`NODE_COMPILE_CACHE is set: the caller's cache (${process.env.NODE_COMPILE_CACHE}) is used as Node opened it, unchecked`, 'info');
  }
  const problem = compileCacheProblem(dir);
  if (problem !== null)
    return decide(
      `${problem}: the compile cache is off (nothing is trusted that another user could have written)`,
      problem.startsWith('cannot be read') ? 'debug' : 'warn',
    );
  // Both defined: compileCacheMissing said so.
  const { status, message } = enableCompileCache!(dir);
  const { ENABLED, ALREADY_ENABLED } = moduleConstants.compileCacheStatus!;
  return decide(status === ENABLED || status === ALREADY_ENABLED ? null : (message ?? 'Node refused it'));
}
