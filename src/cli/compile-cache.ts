// Node's compile cache for the command's own start-up (issue 25: a launch boots two Node images,
// and compiling the same modules in both is most of what a confined start costs). The cache lives
// beside the code it caches, in the package's `.compile-cache/`, so it has exactly the code's trust:
// whoever could write it could already write dist/. Nothing is trusted that another user could have
// written: the directory and its version subdirectories must be real directories, owned by this
// user or root, writable by no one else; otherwise the command runs uncached. It is filled by
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
  return enableCompileCache === undefined || moduleConstants.compileCacheStatus === undefined ? `Node ${process.version} has no compile cache (22.1 or later has)` : null;
}

/** Writes what this process compiled to the cache now (Node would at exit). */
export function flushCompileCache(): void {
  flush?.();
}

/** `<package>/.compile-cache`: dist/cli/ is two levels below the package root. */
export const COMPILE_CACHE_DIR = fileURLToPath(new URL('../../.compile-cache', import.meta.url));

/** Why a directory may not hold code for this process, or null when it may. */
function untrusted(stat: Stats, euid: number): string | null {
  if (stat.isSymbolicLink()) return 'is a symbolic link';
  if (!stat.isDirectory()) return 'is not a directory';
  if (stat.uid !== euid && stat.uid !== 0) return `is owned by uid ${stat.uid}`;
  if ((stat.mode & 0o022) !== 0) return `is writable by group or others (mode ${(stat.mode & 0o777).toString(8)})`;
  return null;
}

/**
 * Why `dir` must not be used as a compile cache, or null when it may: it and each entry in it (one
 * per Node version) pass `untrusted`. A directory that does not exist is a reason too.
 */
export function compileCacheProblem(dir: string, euid = process.geteuid?.() ?? 0): string | null {
  let stat: Stats;
  try {
    stat = lstatSync(dir);
  } catch (error) {
    return `cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`;
  }
  const own = untrusted(stat, euid);
  if (own !== null) return `${dir} ${own}`;
  for (const name of readdirSync(dir)) {
    const problem = untrusted(lstatSync(join(dir, name)), euid);
    if (problem !== null) return `${join(dir, name)} ${problem}`;
  }
  return null;
}

/**
 * Turns the cache on for this process when `dir` passes the checks; returns why it did not.
 * NODE_DISABLE_COMPILE_CACHE=1 turns it off (Node's own switch); an explicit NODE_COMPILE_CACHE
 * is the caller's choice and left as Node set it.
 */
export function useCompileCache(dir = COMPILE_CACHE_DIR): string | null {
  const missing = compileCacheMissing();
  if (missing !== null) return missing;
  if (process.env.NODE_DISABLE_COMPILE_CACHE) return 'disabled by NODE_DISABLE_COMPILE_CACHE';
  if (process.env.NODE_COMPILE_CACHE) return 'NODE_COMPILE_CACHE is set';
  const problem = compileCacheProblem(dir);
  if (problem !== null) return problem;
  // Both defined: compileCacheMissing said so.
  const { status, message } = enableCompileCache!(dir);
  const { ENABLED, ALREADY_ENABLED } = moduleConstants.compileCacheStatus!;
  return status === ENABLED || status === ALREADY_ENABLED
    ? null
    : (message ?? 'Node refused it');
}
