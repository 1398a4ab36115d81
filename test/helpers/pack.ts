// The package as npm would publish it, packed from a copy of this checkout: `npm pack` runs the
// package's prepare (tsc) and prepack scripts, which rewrite dist/, and tests running beside this
// one spawn dist/cli/main.js; packing the checkout itself would rebuild dist/ under their feet.
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What the pack reads: the package's `files`, what its scripts build from, and its manifest. */
const SOURCES = [
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'binding.gyp',
  'LICENSE',
  'README.md',
  'src',
  'native',
  'prebuilds',
  'examples',
  'docs',
  'dist',
  'scripts',
];

/** Packs a copy of the checkout into `into`; returns the tarball's path. */
export function packTarball(into: string): string {
  const copy = join(into, 'checkout');
  mkdirSync(copy);
  for (const name of SOURCES) if (existsSync(join(ROOT, name))) cpSync(join(ROOT, name), join(copy, name), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(copy, 'node_modules'), 'dir');
  execFileSync('npm', ['pack', copy, '--pack-destination', into, '--silent'], { stdio: 'pipe' });
  return join(into, readdirSync(into).find((f) => f.endsWith('.tgz'))!);
}
