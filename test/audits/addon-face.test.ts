// The addon's TypeScript face (src/addon/), split like its C++ side: only load.ts loads the binding,
// each other module wraps the native/bind_*.cc it names, nothing shipped calls the testing entry,
// and every code union a module spells out is the addon's own list of codes, no more and no less.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { NATIVE_CODES } from '../../src/addon/export.js';
import { LANDLOCK_CODES } from '../../src/addon/landlock.js';
import { SOCKET_CODES } from '../../src/addon/sockets.js';
import { importGraph } from '../helpers/imports.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const read = (rel: string) => readFileSync(join(ROOT, rel), 'utf8');
const srcFiles = readdirSync(join(ROOT, 'src'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));

/** The string literals of `export type NAME = 'A' | 'B' …` in a source file. */
function unionOf(file: string, name: string): string[] {
  const m = new RegExp(`export type ${name} =([^;]*);`).exec(read(file));
  expect(m, `${file} declares ${name}`).not.toBeNull();
  return [...m![1]!.matchAll(/'([A-Z0-9_]+)'/g)].map((x) => x[1]!);
}

describe("the addon's face", () => {
  it('is loaded by src/addon/load.ts alone (node-gyp-build, or the RESOURCE_PLANE_ADDON build)', () => {
    const loaders = srcFiles.filter((f) => /node-gyp-build|RESOURCE_PLANE_ADDON|prebuilds/.test(read(join('src', f))));
    expect(loaders).toEqual(['addon/load.ts']);
  });

  it('is reached from the rest of src/ through its wrappers only: never load.ts, never the testing entry', () => {
    const crossing: string[] = [];
    for (const [file, deps] of importGraph()) {
      if (file.startsWith('addon/')) continue;
      for (const d of deps) if (d === 'addon/load.ts' || d === 'addon/for-tests.ts') crossing.push(`${file} → ${d}`);
    }
    expect(crossing).toEqual([]);
  });

  it('has one wrapper per native/bind_*.cc it names, and each of those exists', () => {
    const wrappers = srcFiles.filter((f) => f.startsWith('addon/') && f !== 'addon/load.ts' && f !== 'addon/for-tests.ts');
    expect(wrappers.sort()).toEqual(['addon/export.ts', 'addon/landing.ts', 'addon/landlock.ts', 'addon/sockets.ts']);
    for (const w of wrappers) {
      const named = [
        ...read(join('src', w))
          .split('\n', 3)
          .join('\n')
          .matchAll(/native\/(bind_\w+\.cc)/g),
      ].map((m) => m[1]!);
      expect(named.length, `${w} names the native/bind_*.cc it wraps in its opening comment`).toBeGreaterThan(0);
      for (const cc of named) expect(existsSync(join(ROOT, 'native', cc)), `${w}: native/${cc}`).toBe(true);
    }
  });

  it('spells each code union exactly as the addon lists its codes', () => {
    expect(unionOf('src/addon/load.ts', 'NativeCode').sort()).toEqual([...NATIVE_CODES].sort());
    expect(unionOf('src/addon/landlock.ts', 'LandlockCode').sort()).toEqual([...LANDLOCK_CODES].sort());
    expect(unionOf('src/addon/sockets.ts', 'SocketCode').sort()).toEqual([...SOCKET_CODES].sort());
  });

  it('is the one discipline for test-only entries across src/: a *ForTests export is never called from src/', () => {
    const calls: string[] = [];
    for (const f of srcFiles) {
      const text = read(join('src', f)).replace(/export (?:async )?(?:function|const) \w+ForTests\b/g, '');
      for (const m of text.matchAll(/\b(\w+ForTests)\b/g)) calls.push(`${f}: ${m[1]}`);
    }
    expect(calls).toEqual([]);
    // The entries exist (a rename that drops the suffix would pass the check above vacuously).
    expect(srcFiles.filter((f) => /ForTests\b/.test(read(join('src', f)))).sort()).toEqual(['addon/for-tests.ts', 'handle/key.ts', 'handle/token.ts']);
  });
});
