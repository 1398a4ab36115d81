// The package as a new user gets it: `npm pack`, the tarball installed into a fresh project, then
// imported by name, its command run, and the demo run from the install (examples shipped) leaving
// nothing behind. Needs the npm registry for the dependencies, as `npm ci` does.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
let dir: string;
let project: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'rp-pack-'));
  project = join(dir, 'project');
  execFileSync('npm', ['pack', ROOT, '--pack-destination', dir, '--silent'], { stdio: 'pipe' });
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'))!;
  execFileSync('mkdir', [project]);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', type: 'module', private: true }));
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--silent', join(dir, tarball)], { cwd: project, stdio: 'pipe' });
}, 300_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the installed package', () => {
  it('ships what it needs and nothing of the checkout', () => {
    const pkg = join(project, 'node_modules', 'capsule-resource-plane');
    for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/cli.js', 'examples/reporter/murmur.yaml', 'prebuilds']) {
      expect(existsSync(join(pkg, f)), f).toBe(true);
    }
    for (const f of ['test', 'src', 'bench', '.ci']) expect(existsSync(join(pkg, f)), f).toBe(false);
  });

  it('loads its libc-tagged prebuild and compiled nothing at install', () => {
    const pkg = join(project, 'node_modules', 'capsule-resource-plane');
    // The install script (node-gyp-build) compiles only when no prebuild loads: no build/ then.
    expect(existsSync(join(pkg, 'build')), 'build/ in the installed package').toBe(false);
    const loaded = execFileSync(process.execPath, ['-e', 'const p = require("node-gyp-build").path(process.argv[1]); require(p); console.log(p)', pkg], { cwd: project });
    expect(loaded.toString().trim()).toBe(join(pkg, 'prebuilds', `linux-${process.arch}`, 'capsule-resource-plane.glibc.node'));
  });

  it('is imported by name', () => {
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', "import('capsule-resource-plane').then((m) => console.log(typeof m.launch, typeof m.resourcePlanes))"], { cwd: project });
    expect(out.toString().trim()).toBe('function function');
  });

  it('runs the demo from the install and removes its scratch directory when stopped', async () => {
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
