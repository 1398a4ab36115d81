// The launch check of the export roots (E-CAP-007), in one implementation: a root is refused when
// the descriptor-based resolver that every request uses refuses it as outside the workdir. That
// covers a link pointing out (as the host sees it) and a link with an absolute target (outside as
// every request sees it, even when on the host it points inside), which would otherwise launch and
// then refuse every request. A root that does not resolve yet passes: every request resolves it
// again, so this is an early, legible refusal rather than the enforcement.
import { existsSync, lstatSync, readlinkSync, realpathSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import type { Manifest } from '../manifest/model.js';
import { ManifestError } from '../manifest/diagnostics.js';
import * as native from '../addon/export.js';

/**
 * What to show as "resolves to": the host's realpath when it leaves the workdir; else the first
 * absolute symlink target on the way (why the resolver refused it); else the first target at all
 * (a relative one climbing out, e.g. through /proc); else the root as declared.
 */
function shownResolution(workdir: string, declared: string): string {
  try {
    const real = realpathSync(join(workdir, declared));
    if (real !== workdir && !real.startsWith(`${workdir}/`)) return real;
  } catch {
    // Falls through to the link walk below.
  }
  let current = workdir;
  let firstTarget: string | null = null;
  for (const component of declared.split('/').filter((c) => c !== '' && c !== '.')) {
    const next = join(current, component);
    try {
      if (!lstatSync(next).isSymbolicLink()) {
        current = next;
        continue;
      }
      const target = readlinkSync(next);
      if (isAbsolute(target)) return target;
      firstTarget ??= target;
      current = realpathSync(next);
    } catch {
      break;
    }
  }
  return firstTarget ?? declared;
}

/** E-CAP-007 through `workdirFd` (the descriptor the session will hold), `workdirReal` for messages. */
export async function checkExportRoots(manifest: Manifest, workdirReal: string, workdirFd: number, resolver: native.ResolverKind): Promise<void> {
  const roots: Array<[string, string]> = [];
  if (manifest.files) roots.push(['exports.files.root', manifest.files.root]);
  if (manifest.peerFiles) roots.push(['exports.peer_files.root', manifest.peerFiles.root]);
  for (const [field, declared] of roots) {
    try {
      await native.checkRoot(workdirFd, declared, resolver);
    } catch (error) {
      if (!(error instanceof native.NativeError) || error.code !== 'OUTSIDE_ROOT') throw error;
      throw new ManifestError(
        'E-CAP-007',
        `${field} '${declared}' resolves to '${shownResolution(workdirReal, declared)}', which is outside the capsule workdir '${workdirReal}'`,
        `point ${field} at a directory inside the workdir; a symlinked root needs a relative target that stays inside ` +
          '(inside a sealed sandbox an absolute path does not name a host path, so every request would be refused)',
      );
    }
  }
}

/** Opens `workdir` just long enough to run checkExportRoots (explain-scope has no session). */
export async function checkExportRootsAt(manifest: Manifest, workdir: string, resolver: native.ResolverKind = native.chooseResolver()): Promise<void> {
  if (!existsSync(workdir)) return;
  const real = realpathSync(workdir);
  const fd = await native.openDirectory(real);
  try {
    await checkExportRoots(manifest, real, fd, resolver);
  } finally {
    native.closeFd(fd);
  }
}
