// The package's own name and version, read from package.json at run time so `--version`, the MCP
// `serverInfo` and the installed package can never disagree. A leaf: it imports nothing of ours.
import { readFileSync } from 'node:fs';

interface PackageIdentity {
  name: string;
  version: string;
}

let cached: PackageIdentity | null = null;

/**
 * package.json sits one level above this file both in the checkout (`src/version.ts`, run by the
 * tests) and in the build or an installed package (`dist/version.js`).
 */
export function packageIdentity(): PackageIdentity {
  if (cached) return cached;
  const parsed = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as Partial<PackageIdentity>;
  if (typeof parsed.name !== 'string' || typeof parsed.version !== 'string') {
    throw new Error('package.json has no name or version');
  }
  cached = { name: parsed.name, version: parsed.version };
  return cached;
}

export function packageVersion(): string {
  return packageIdentity().version;
}
