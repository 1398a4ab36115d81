// The package's face: one entry point through its `exports` map, importable by its own name,
// exporting what the README promises, with declarations a TypeScript consumer compiles against
// (callTool typed by tool name: test/types/consumer.ts); internal files are not importable.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

describe('the public API', () => {
  it('is importable by the package name and exports what the README promises', async () => {
    const api = await import('capsule-resource-plane');
    for (const name of [
      'launch',
      'openSession',
      'Session',
      'serve',
      'bind',
      'buildApp',
      'resourcePlanes',
      'routeRawTargets',
      'answerConnect',
      'callTool',
      'toolDefinitions',
      'shareFile',
      'fetchPeerFile',
      'CATALOGUE',
      'CODES',
      'Refusal',
      'renderHttp',
      'renderTool',
      'parseManifest',
      'ManifestError',
      'effectiveGrants',
      'renderExplainScope',
      'RUNTIME_WRITES',
      'CONTAINMENT_CLASSES',
      'LIMITS',
    ]) {
      expect(api, name).toHaveProperty(name);
    }
  });

  it('does not expose internal files', async () => {
    // Through Node itself (the test runner's bundler would resolve files directly).
    const probe = "import('capsule-resource-plane/dist/session/session.js').then(() => console.log('imported'), (e) => console.log(e.code))";
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', probe], { cwd: ROOT }).toString().trim();
    expect(out).toBe('ERR_PACKAGE_PATH_NOT_EXPORTED');
    const face = "import('capsule-resource-plane').then((m) => console.log(typeof m.launch))";
    expect(execFileSync(process.execPath, ['--input-type=module', '-e', face], { cwd: ROOT }).toString().trim()).toBe('function');
  });

  it('type-checks a consumer against the built declarations, and refuses internal imports', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rp-types-'));
    try {
      const config = {
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules/@types')],
        },
        files: [join(ROOT, 'test/types/consumer.ts'), join(ROOT, 'test/types/internal.ts')],
      };
      writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify(config));
      // Resolves 'capsule-resource-plane' by self-reference from test/types, inside this package.
      execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(dir, 'tsconfig.json')], { cwd: ROOT, stdio: 'pipe' });
    } catch (error) {
      throw new Error(`tsc failed:\n${(error as { stdout?: Buffer }).stdout?.toString() ?? error}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('tells a consumer who misuses callTool what is wrong, by tool name', () => {
    // A project of its own in a temp dir, the package linked in as an install would put it.
    const dir = mkdtempSync(join(tmpdir(), 'rp-types-misuse-'));
    try {
      mkdirSync(join(dir, 'node_modules'));
      symlinkSync(ROOT, join(dir, 'node_modules', 'capsule-resource-plane'));
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'misuse', type: 'module', private: true }));
      writeFileSync(
        join(dir, 'misuse.ts'),
        [
          "import { callTool, type Session } from 'capsule-resource-plane';",
          'export async function f(session: Session): Promise<void> {',
          "  await callTool(session, 'share-file', { peer: 'localhost:1', handle: 'mh1.x' });",
          "  await callTool(session, 'rm-rf', {});",
          "  const minted = await callTool(session, 'share-file', { path: 'a', peer: 'localhost:1' });",
          '  const n: number = minted.handle;',
          '  void n;',
          '}',
          '',
        ].join('\n'),
      );
      const config = {
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules/@types')],
        },
        files: ['misuse.ts'],
      };
      writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify(config));
      const r = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(dir, 'tsconfig.json'), '--pretty', 'false'], {
        cwd: dir,
        encoding: 'utf8',
      });
      expect(r.status).not.toBe(0);
      const errors = r.stdout
        .trim()
        .split('\n')
        .map((line) => line.replace(/^misuse\.ts\(\d+,\d+\): /, ''));
      expect(errors).toEqual([
        "error TS2353: Object literal may only specify known properties, and 'handle' does not exist in type 'ShareFileInput'.",
        "error TS2345: Argument of type '\"rm-rf\"' is not assignable to parameter of type 'ToolName'.",
        "error TS2322: Type 'string' is not assignable to type 'number'.",
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
