// Runs a README code block as a user's project would: an .mjs file in a fresh directory whose
// node_modules holds this package (and fastify) by name, with the records directory in that temp
// directory so nothing is written anywhere else.
import { execFile } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { defer } from './cleanup.js';
import { removeTree, tempDir } from './tree.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export async function runReadmeExample(code: string): Promise<string> {
  const project = tempDir('rp-readme-example-');
  defer(() => removeTree(project));
  mkdirSync(join(project, 'node_modules'));
  symlinkSync(ROOT, join(project, 'node_modules', 'capsule-resource-plane'));
  symlinkSync(join(ROOT, 'node_modules', 'fastify'), join(project, 'node_modules', 'fastify'));
  writeFileSync(join(project, 'example.mjs'), code);
  const { stdout } = await promisify(execFile)(process.execPath, ['example.mjs'], {
    cwd: project,
    env: { ...process.env, RESOURCE_PLANE_RECORDS_DIR: join(project, 'records') },
    timeout: 30_000,
  });
  return stdout;
}
