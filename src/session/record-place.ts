// Where the audit record may live: outside the workdir. Anything inside it the capsule can write,
// so a trace there could be rewritten by the party it audits, served on the operator plane, or
// land in an export root (which the server never writes). The check runs before anything of the
// launch is created, on the path as the kernel will resolve it: every existing ancestor's symlinks
// followed (a dangling one too, since creating through it lands at its target).
import { lstatSync, readlinkSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { UsageError } from '../codes.js';

/** Symlinks followed before a path is called unresolvable (the kernel's own limit). */
const MAX_LINKS = 40;

/**
 * `path` (absolute) with every symlink among its existing components followed and `..` taken
 * after them, as the kernel would; the components that do not exist yet are kept as they are.
 */
export function resolveThroughExisting(path: string, links = 0): string {
  const parts = path.split('/');
  let at = '/';
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (part === '' || part === '.') continue;
    if (part === '..') {
      at = dirname(at);
      continue;
    }
    const next = at === '/' ? `/${part}` : `${at}/${part}`;
    let link: string | null = null;
    try {
      if (lstatSync(next).isSymbolicLink()) link = readlinkSync(next);
    } catch {
      // Not there (yet): created as a plain directory or file, so `..` after it pops it.
    }
    if (link !== null) {
      if (links >= MAX_LINKS) throw new UsageError(`'${path}' has too many levels of symbolic links`);
      const rest = parts.slice(i + 1).join('/');
      const target = link.startsWith('/') ? link : `${at}/${link}`;
      return resolveThroughExisting(rest === '' ? target : `${target}/${rest}`, links + 1);
    }
    at = next;
  }
  return at;
}

function inside(path: string, dir: string): boolean {
  return dir === '/' || path === dir || path.startsWith(`${dir}/`);
}

/**
 * Refuses a trace path (`what` names the option) or a records directory that resolves inside the
 * workdir `workdir` (absolute, possibly not existing yet). Throws a one-line UsageError.
 */
export function checkRecordOutsideWorkdir(what: string, given: string, workdir: string): void {
  const wd = resolveThroughExisting(workdir);
  const real = resolveThroughExisting(resolve(given));
  if (inside(real, wd)) {
    throw new UsageError(
      `${what} '${given}' resolves to '${real}', inside the capsule workdir '${wd}', where the capsule could rewrite its own audit record; choose a place outside the workdir`,
    );
  }
}
