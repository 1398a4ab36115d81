// The package as a new user gets it: `npm pack`, the tarball installed into a fresh project, then
// imported by name, its command run, and the demo run from the install (examples shipped) leaving
// nothing behind. The tarball is publishable (a license, not private) and holds what a user needs
// (dist, prebuilds, the native sources for a source build, examples, docs, LICENSE, README) and
// nothing of the checkout (tests, fuzz corpora, scratch, build output that no source makes any
// more). Needs the npm registry for the dependencies, as `npm ci` does.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as nodeModule from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileCacheProblem } from '../../src/cli/compile-cache.js';
import { packTarball } from '../helpers/pack.js';
import { npmNeedingRegistry, skipFor } from '../helpers/registry.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let dir: string;
let project: string;
/** Every path in the tarball, relative to the package root (tar's `package/` prefix removed). */
let packed: string[];
/** What npm printed while installing the tarball into the fresh project. */
let installLog: string;
/** Why the tarball could not be installed (no registry), or null. */
let unreachable: string | null = null;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'rp-pack-'));
  project = join(dir, 'project');
  const tarball = packTarball(dir);
  packed = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' })
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => line.replace(/^package\//, ''));
  execFileSync('mkdir', [project]);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', type: 'module', private: true }));
  // At npm's warning level, so that an engine warning would be seen; npm writes warnings to stderr.
  // The dependencies come from the registry or npm's cache; with neither, the tests that need the
  // installed copy skip and say why.
  const install = npmNeedingRegistry(['install', '--no-audit', '--no-fund', '--loglevel=warn', tarball], project);
  if (install.ok) installLog = `${install.stdout}${install.stderr}`;
  else unreachable = install.reason;
}, 300_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the tarball', () => {
  it('is publishable: an MIT license, the license text, not private', (ctx) => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { license?: string; private?: boolean };
    expect(pkg.license).toBe('MIT');
    expect(pkg.private).toBeUndefined();
    expect(packed).toContain('LICENSE');
    expect(readFileSync(join(ROOT, 'LICENSE'), 'utf8')).toMatch(/^MIT License\n\nCopyright \(c\) 2026 capsule-resource-plane contributors\n/);
    if (unreachable) return skipFor(ctx, unreachable);
    const installed = JSON.parse(readFileSync(join(project, 'node_modules', 'capsule-resource-plane', 'package.json'), 'utf8')) as { license?: string };
    expect(installed.license).toBe('MIT');
  });

  it('holds the build, its declarations, the prebuilds, the native sources for a source build, examples and docs', () => {
    for (const f of [
      'README.md',
      'LICENSE',
      'package.json',
      'binding.gyp',
      'dist/index.js',
      'dist/index.d.ts',
      'dist/cli/main.js',
      'native/addon.cc',
      'native/resolve.h',
      'examples/reporter/murmur.yaml',
      'docs/security.md',
    ]) {
      expect(packed, f).toContain(f);
    }
    expect(packed.filter((f) => /^prebuilds\/linux-(x64|arm64)\/[^/]+\.node$/.test(f)).length).toBeGreaterThanOrEqual(2);
  });

  it('holds no tests, fuzz corpora, benchmarks, sources, CI or scratch', () => {
    const stray = packed.filter(
      (f) =>
        /^(test|fuzz|bench|src|\.ci|build|build-asan|node_modules|\.vitest-tmp|\.compile-cache)\//.test(f) ||
        /(^|\/)peer-in\//.test(f) ||
        /\.(part|log|tgz)$/.test(f),
    );
    expect(stray).toEqual([]);
    expect(
      packed.every(
        (f) =>
          /^(dist|native|prebuilds|examples|docs)\//.test(f) ||
          ['README.md', 'LICENSE', 'package.json', 'binding.gyp', 'scripts/warm-compile-cache.mjs'].includes(f),
      ),
      packed.join('\n'),
    ).toBe(true);
  });

  it('ships no compiled module that no source makes any more (a stale dist/ is pruned before packing)', () => {
    const stale = packed
      .filter((f) => f.startsWith('dist/'))
      .filter((f) => !existsSync(join(ROOT, 'src', f.slice('dist/'.length).replace(/\.(d\.ts|js)$/, '.ts'))));
    expect(stale).toEqual([]);
  });

  // engines says >=22: the dependencies' own floors (cookie through fastify's light-my-request) are 22.
  it.skipIf(Number(process.versions.node.split('.')[0]) < 22)('installs into a fresh project with no engine warning', (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    expect(installLog).not.toContain('EBADENGINE');
  });
});

describe('the installed package', () => {
  it('ships what it needs and nothing of the checkout', (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    const pkg = join(project, 'node_modules', 'capsule-resource-plane');
    for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/cli/main.js', 'examples/reporter/murmur.yaml', 'prebuilds']) {
      expect(existsSync(join(pkg, f)), f).toBe(true);
    }
    for (const f of ['test', 'src', 'bench', '.ci']) expect(existsSync(join(pkg, f)), f).toBe(false);
  });

  it('loads its libc-tagged prebuild and compiled nothing at install', (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    const pkg = join(project, 'node_modules', 'capsule-resource-plane');
    // The install script (node-gyp-build) compiles only when no prebuild loads: no build/ then.
    expect(existsSync(join(pkg, 'build')), 'build/ in the installed package').toBe(false);
    const loaded = execFileSync(process.execPath, ['-e', 'const p = require("node-gyp-build").path(process.argv[1]); require(p); console.log(p)', pkg], {
      cwd: project,
    });
    expect(loaded.toString().trim()).toBe(join(pkg, 'prebuilds', `linux-${process.arch}`, 'capsule-resource-plane.glibc.node'));
  });

  // (A Node without a compile cache, 20 and older: there the install says so and goes on.)
  it.skipIf(typeof (nodeModule as { enableCompileCache?: unknown }).enableCompileCache !== 'function')(
    'fills its compile cache at install, beside its code and writable by no one else',
    (ctx) => {
      if (unreachable) return skipFor(ctx, unreachable);
      const cache = join(project, 'node_modules', 'capsule-resource-plane', '.compile-cache');
      const versions = readdirSync(cache);
      expect(versions.length, `${cache} holds no Node version's entries`).toBeGreaterThan(0);
      // Every module a launch loads: the command, Fastify, pino, the MCP SDK, YAML.
      expect(readdirSync(join(cache, versions[0]!)).length).toBeGreaterThan(300);
      expect(compileCacheProblem(cache)).toBeNull();
    },
  );

  it('holds no test probes: their variables only earn a warning, and nothing reads the named file', async (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    expect(packed.filter((f) => f.startsWith('dist/testing/'))).toEqual([]);
    const pkg = join(project, 'node_modules', 'capsule-resource-plane');
    expect(existsSync(join(pkg, 'dist', 'testing'))).toBe(false);
    const work = mkdtempSync(join(project, 'probe-work-'));
    writeFileSync(join(work, 'murmur.yaml'), 'name: probe\nversion: "1"\n');
    const records = mkdtempSync(join(project, 'probe-records-'));
    const child = spawn(join(project, 'node_modules', '.bin', 'capsule-resource-plane'), ['serve', '--workdir', work], {
      cwd: project,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, RESOURCE_PLANE_RECORDS_DIR: records, RESOURCE_PLANE_TEST_UNCHECKED_READ: join(ROOT, 'package.json') },
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('"listening"')) resolve();
      });
      void exited.then((code) => reject(new Error(`serve exited ${code}: ${err}`)));
    });
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(err).toContain('this build has no test probes');
    expect(err).not.toContain('test_hook');
  });

  it('installs its command under the package name (what `npx capsule-resource-plane` runs) and as resource-plane', (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
    for (const bin of ['capsule-resource-plane', 'resource-plane']) {
      expect(execFileSync(join(project, 'node_modules', '.bin', bin), ['--version'], { cwd: project, encoding: 'utf8' }).trim(), bin).toBe(version);
    }
  });

  it('is imported by name', (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    const out = execFileSync(
      process.execPath,
      ['--input-type=module', '-e', "import('capsule-resource-plane').then((m) => console.log(typeof m.launch, typeof m.resourcePlanes))"],
      { cwd: project },
    );
    expect(out.toString().trim()).toBe('function function');
  });

  it('runs the demo from the install and removes its scratch directory when stopped', async (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    const bin = join(project, 'node_modules', '.bin', 'resource-plane');
    const child = spawn(bin, ['demo'], { cwd: project, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('Ctrl-C to stop.')) resolve();
      });
      child.on('exit', (code) => reject(new Error(`demo exited ${code}: ${out}`)));
    });
    child.removeAllListeners('exit');
    expect(out).toMatch(/^4\. sha256 .* {2}MATCH$/m);
    const scratch = /scratch: (\S+)/.exec(out)![1]!;
    expect(existsSync(scratch)).toBe(true);
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(existsSync(scratch)).toBe(false);
  });
});
