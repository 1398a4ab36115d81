// The packed tarball in a TypeScript app that brings its own Fastify: fastify is a peer dependency
// (^5), so the app's one copy serves the plugin and its types (a nested copy made `tsc` fail with
// TS2769/TS2339 when the app's minor differed from ours). A strict consumer
// (test/types/plugin-consumer.ts) is compiled with skipLibCheck off and run, on the oldest Fastify
// 5 release and on the one this repository's lockfile pins. Both installs need the registry, or the
// cache a `npm ci` of this checkout filled: without either, each test skips and prints why.
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packTarball } from '../helpers/pack.js';
import { npmNeedingRegistry, skipFor } from '../helpers/registry.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LOCKED = (JSON.parse(readFileSync(join(ROOT, 'node_modules/fastify/package.json'), 'utf8')) as { version: string }).version;
const OLDEST = '5.0.0';
let dir: string;
let tarball: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'rp-consumer-'));
  tarball = packTarball(dir);
}, 300_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.each([OLDEST, LOCKED])('a strict TypeScript app on fastify@%s', (version) => {
  let project: string;
  let unreachable: string | null = null;
  beforeAll(() => {
    project = join(dir, `app-${version}`);
    mkdirSync(project);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', type: 'module', private: true }));
    const install = npmNeedingRegistry(['install', '--no-audit', '--no-fund', '--loglevel=error', `fastify@${version}`, tarball], project);
    if (!install.ok) unreachable = install.reason;
  }, 300_000);

  it('gets one Fastify: its own, which the package shares', (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    const tree = JSON.parse(execFileSync('npm', ['ls', 'fastify', '--all', '--json'], { cwd: project, encoding: 'utf8' })) as {
      dependencies: Record<string, { version: string; dependencies?: Record<string, { version: string }> }>;
    };
    expect(tree.dependencies.fastify?.version).toBe(version);
    expect(tree.dependencies['capsule-resource-plane']?.dependencies?.fastify?.version ?? version).toBe(version);
    const nested = readdirSync(join(project, 'node_modules', 'capsule-resource-plane')).includes('node_modules')
      ? readdirSync(join(project, 'node_modules', 'capsule-resource-plane', 'node_modules'))
      : [];
    expect(nested).not.toContain('fastify');
  });

  it('compiles with strict checks and the libraries checked too, then serves a read through a prefix', (ctx) => {
    if (unreachable) return skipFor(ctx, unreachable);
    copyFileSync(join(ROOT, 'test/types/plugin-consumer.ts'), join(project, 'consumer.ts'));
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: false,
          outDir: 'out',
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules/@types')],
        },
        files: ['consumer.ts'],
      }),
    );
    const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: project, encoding: 'utf8' });
    expect(`${tsc.stdout}${tsc.stderr}`).toBe('');
    expect(tsc.status).toBe(0);
    const out = JSON.parse(execFileSync(process.execPath, ['out/consumer.js'], { cwd: project, encoding: 'utf8' })) as {
      status: number;
      body: string;
      etag: string;
      same: boolean;
    };
    expect(out).toMatchObject({ status: 200, body: 'consumer bytes', same: true });
    expect(out.etag).toMatch(/^"sha256:[0-9a-f]{64}"$/);
  });
});
