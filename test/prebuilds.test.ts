// The committed prebuilds load where the README says they do. Each binary's ELF requirements (the
// libraries it needs, the symbol versions it asks of them, what it exports) are read from the file
// itself and held to the floor table in README.md, "Native addon and prebuilds": one fact, written
// once, checked against the bytes that ship.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { compareVersions, readElfRequirements } from './helpers/elf.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PREBUILDS = join(ROOT, 'prebuilds');
const committed = readdirSync(PREBUILDS).flatMap((dir) => readdirSync(join(PREBUILDS, dir)).map((f) => `${dir}/${f}`));

/** The README's floor table: version-name prefix (GLIBC_, GLIBCXX_, …) → the highest allowed. */
function statedFloor(): Map<string, string> {
  const text = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const block = /<!-- prebuild-floor:start -->([\s\S]*?)<!-- prebuild-floor:end -->/.exec(text);
  if (!block) throw new Error('README has no prebuild-floor table markers');
  const floor = new Map<string, string>();
  for (const line of block[1]!.trim().split('\n').slice(2)) {
    const [name, version] = line.split('|').slice(1, 3).map((c) => c.trim());
    const prefix = /^`(\w+_)`/.exec(name!)?.[1];
    if (!prefix || !/^\d+(\.\d+)*$/.test(version!)) throw new Error(`unreadable floor row: ${line}`);
    floor.set(prefix, version!);
  }
  return floor;
}

/** Every required version above the floor, or of a kind the floor does not name. */
function violations(versions: Map<string, string[]>, floor: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [file, names] of versions) {
    for (const name of names) {
      const m = /^([A-Z]+_)(\d+(?:\.\d+)*)$/.exec(name);
      const limit = m && floor.get(m[1]!);
      if (!m || !limit) out.push(`${file}: ${name} (not in the README's floor table)`);
      else if (compareVersions(m[2]!, limit) > 0) out.push(`${file}: ${name} (floor ${m[1]}${limit})`);
    }
  }
  return out;
}

// The libraries a prebuild may link: the C library, the C++ runtime Node itself links, and (on
// aarch64, where -fstack-protector reads the guard from it) the dynamic loader.
const ALLOWED_NEEDED = ['libc.so.6', 'libstdc++.so.6', 'libgcc_s.so.1', 'ld-linux-x86-64.so.2', 'ld-linux-aarch64.so.1'];
// Node looks up these two; native/exports.map keeps everything else local.
const ENTRY_POINTS = ['napi_register_module_v1', 'node_api_module_get_api_version_v1'];

function hasObjdump(): boolean {
  try {
    execFileSync('objdump', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('the prebuild floor', () => {
  const floor = statedFloor();

  it('is stated for glibc, libstdc++ and libgcc', () => {
    expect([...floor.keys()].sort()).toEqual(['CXXABI_', 'GCC_', 'GLIBCXX_', 'GLIBC_']);
  });

  it('catches what the prebuild needed before it was lowered', () => {
    // What `objdump -T` showed on the glibc 2.36 / GCC 12 build before native/stat_call.h and
    // native/compat.cc: the check must name each of them.
    const before = new Map([
      ['libc.so.6', ['GLIBC_2.2.5', 'GLIBC_2.28', 'GLIBC_2.32', 'GLIBC_2.33']],
      ['libstdc++.so.6', ['GLIBCXX_3.4.21', 'GLIBCXX_3.4.26', 'GLIBCXX_3.4.29', 'CXXABI_1.3.9']],
      ['libgcc_s.so.1', ['GCC_3.0', 'GCC_4.2.0']],
      ['libfoo.so', ['FOO_1.0']],
    ]);
    expect(violations(before, floor).map((v) => v.split(' ')[1])).toEqual([
      'GLIBC_2.32', 'GLIBC_2.33', 'GLIBCXX_3.4.26', 'GLIBCXX_3.4.29', 'GCC_4.2.0', 'FOO_1.0',
    ]);
  });

  it.each(committed)('%s asks for nothing above it', (file) => {
    const elf = readElfRequirements(join(PREBUILDS, file));
    expect(elf.versions.size, 'no version references read: is this a real prebuild?').toBeGreaterThan(0);
    expect(violations(elf.versions, floor)).toEqual([]);
    expect(elf.needed.filter((n) => !ALLOWED_NEEDED.includes(n))).toEqual([]);
    expect(elf.exports).toEqual(ENTRY_POINTS);
  });

  it.skipIf(!hasObjdump())('reads the same requirements objdump does (skipped without binutils)', () => {
    for (const file of committed) {
      const text = execFileSync('objdump', ['-p', join(PREBUILDS, file)], { encoding: 'utf8' });
      const fromObjdump = new Map<string, string[]>();
      let current = '';
      for (const line of text.slice(text.indexOf('Version References:')).split('\n')) {
        const from = /^\s+required from (\S+):$/.exec(line);
        if (from) current = from[1]!;
        const version = /^\s+0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)$/.exec(line);
        if (version) fromObjdump.set(current, [...(fromObjdump.get(current) ?? []), version[1]!]);
      }
      const needed = [...text.matchAll(/^\s+NEEDED\s+(\S+)$/gm)].map((m) => m[1]);
      const elf = readElfRequirements(join(PREBUILDS, file));
      const sorted = (m: Map<string, string[]>) => [...m].map(([f, v]) => [f, [...v].sort()]).sort();
      expect(sorted(elf.versions), file).toEqual(sorted(fromObjdump));
      expect(elf.needed, file).toEqual(needed);
    }
  });
});

describe('libc-tagged prebuilds', () => {
  const name = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).name as string;
  // node-gyp-build's own choice, in a child (this process may hold a local build), from the package
  // root as src/native.ts asks; PREBUILDS_ONLY keeps a local build/Release out of the way.
  const resolveFrom = (env: Record<string, string>) =>
    execFileSync(process.execPath, ['-e', 'const p = require("node-gyp-build").path(process.argv[1]); require(p); console.log(p)', ROOT], {
      cwd: ROOT, env: { ...process.env, PREBUILDS_ONLY: '1', ...env }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'],
    }).trim();

  it('are named <package>.glibc.node, one per platform-arch', () => {
    for (const file of committed) expect(file).toMatch(new RegExp(`^linux-(x64|arm64)/${name}\\.glibc\\.node$`));
  });

  it('are what node-gyp-build loads from the package root on glibc', () => {
    expect(resolveFrom({})).toBe(join(PREBUILDS, `linux-${process.arch}`, `${name}.glibc.node`));
  });

  it('are not offered on musl: node-gyp-build finds no build there (npm install then compiles)', () => {
    expect(() => resolveFrom({ LIBC: 'musl' })).toThrow(/No native build was found for .*libc=musl/);
  });
});
