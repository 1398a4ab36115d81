// Reading the manifest file. Every launch diagnostic about the file itself (missing, unreadable) is
// an E-MAN-003 naming the file that was given.
import { readFileSync } from 'node:fs';
import { ManifestError } from '../manifest/diagnostics.js';
import { parseManifest, type Manifest } from '../manifest/model.js';

/** Reads and validates a manifest file; a missing or unreadable file is an E-MAN-003 diagnostic. */
export function loadManifest(path: string): Manifest {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ManifestError(
      'E-MAN-003',
      `cannot read the manifest '${path}': ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}`,
      'pass --manifest FILE, or put murmur.yaml at the workdir root',
    );
  }
  return parseManifest(text);
}
