// Reading the manifest like a served file. The default `<workdir>/murmur.yaml` lives where the
// capsule writes, so it is opened beneath the workdir descriptor by the same resolver as a read:
// no symlink followed anywhere, a FIFO or device never opened for real, regular files only, at most
// MANIFEST_MAX_BYTES. An explicit `--manifest` is the operator's own path (symlinks followed) but is
// likewise opened without blocking, regular-only and capped. A diagnostic echoes only what was read
// from the manifest itself, and names the file that was given.
import { closeSync, constants, fstatSync, openSync, readSync, statSync } from 'node:fs';
import { ManifestError } from '../manifest/diagnostics.js';
import { describeUnknownKey, parseManifest, refuseUnknownKeys, unknownKeys, type Manifest } from '../manifest/model.js';
import * as native from '../addon/export.js';
import { MANIFEST_MAX_BYTES } from '../limits.js';

export const DEFAULT_MANIFEST_NAME = 'murmur.yaml';

const HINT = 'pass --manifest FILE, or put murmur.yaml at the workdir root';
/** For a path the operator gave: suggesting --manifest again would not help. */
const GIVEN_HINT = 'check the path given to --manifest: it must name a readable regular file';
const OUTSIDE_HINT = 'keep the manifest outside the workdir and pass --manifest FILE (a capsule can rewrite a manifest in its own workdir)';

function unreadable(shown: string, why: string, hint = HINT): ManifestError {
  return new ManifestError('E-MAN-003', `cannot read the manifest '${shown}': ${why}`, hint);
}

/** A workdir that does not exist has no manifest: the diagnostic serve and explain-scope both give. */
export function missingManifest(shown: string): ManifestError {
  return unreadable(shown, 'ENOENT');
}

/**
 * What is done with the keys of a manifest this server does not read: one in a block it owns is
 * always refused (E-MAN-003); a likely typo in the runtime's blocks is warned of, or refused
 * under --strict.
 */
export interface KeyCheck {
  strict?: boolean;
  warn?: (fields: { key: string; suggestion: string | null; manifest: string }, message: string) => void;
}

function checkKeys(text: string, shown: string, check: KeyCheck | undefined): void {
  const left = refuseUnknownKeys(unknownKeys(text, shown), shown, check?.strict === true);
  for (const k of left)
    check?.warn?.({ key: k.key, suggestion: k.suggestion, manifest: shown }, `${describeUnknownKey(k)} in the manifest: this server ignores it`);
}

/** `murmur.yaml` beneath the workdir descriptor; `shown` is the path a diagnostic names. */
export async function readManifestBeneath(workdirFd: number, resolver: native.ResolverKind, shown: string, check?: KeyCheck): Promise<Manifest> {
  let bytes: Buffer;
  try {
    // The workdir itself is the root; scoped policy: the first symlink is refused.
    bytes = (await native.readFile(workdirFd, '.', DEFAULT_MANIFEST_NAME, MANIFEST_MAX_BYTES, { refuseSymlinks: true, resolver })).bytes;
  } catch (error) {
    const code = error instanceof native.NativeError ? error.code : 'IO_ERROR';
    if (code === 'NOT_FOUND') throw unreadable(shown, 'ENOENT');
    if (code === 'SYMLINK_REFUSED') throw unreadable(shown, 'it is a symlink, which is never followed inside the workdir', OUTSIDE_HINT);
    if (code === 'NOT_A_REGULAR_FILE') throw unreadable(shown, 'it is not a regular file', OUTSIDE_HINT);
    if (code === 'TOO_LARGE') throw unreadable(shown, `it is larger than ${MANIFEST_MAX_BYTES} bytes`);
    throw unreadable(shown, error instanceof native.NativeError ? error.detail || error.code : 'unknown error');
  }
  const text = bytes.toString('utf8');
  const manifest = parseManifest(text, shown);
  checkKeys(text, shown, check);
  return manifest;
}

/** An explicit manifest path: non-blocking, regular files only, capped. */
export function loadManifest(path: string, check?: KeyCheck): Manifest {
  let fd: number;
  try {
    // Checked before the open, so a FIFO or a device is never opened; the open never blocks and
    // the descriptor is checked again, since the path may have changed in between.
    if (!statSync(path).isFile()) throw unreadable(path, 'it is not a regular file', GIVEN_HINT);
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (error) {
    if (error instanceof ManifestError) throw error;
    throw unreadable(path, (error as NodeJS.ErrnoException).code ?? 'unknown error', GIVEN_HINT);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw unreadable(path, 'it is not a regular file', GIVEN_HINT);
    const buf = Buffer.alloc(MANIFEST_MAX_BYTES + 1);
    let n = 0;
    while (n < buf.length) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
    }
    if (n > MANIFEST_MAX_BYTES) throw unreadable(path, `it is larger than ${MANIFEST_MAX_BYTES} bytes`, GIVEN_HINT);
    const text = buf.subarray(0, n).toString('utf8');
    const manifest = parseManifest(text, path);
    checkKeys(text, path, check);
    return manifest;
  } catch (error) {
    if (error instanceof ManifestError) throw error;
    throw unreadable(path, (error as NodeJS.ErrnoException).code ?? 'unknown error', GIVEN_HINT);
  } finally {
    closeSync(fd);
  }
}
