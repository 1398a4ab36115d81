// Builds and runs the renameat2 swapper (test/helpers/swapper.c) in a child process.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

export function swapperBinary(): string {
  const out = join(here, '..', '..', 'build', 'test-swapper');
  if (!existsSync(out)) {
    mkdirSync(dirname(out), { recursive: true });
    execFileSync('cc', ['-O2', '-o', out, join(here, 'swapper.c')]);
  }
  return out;
}

/** Starts the swapper; resolves with the number of exchanges it made once it exits. */
export function runSwapper(a: string, b: string, count: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(swapperBinary(), [a, b, String(count)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(Number(out.trim())) : reject(new Error(`swapper exited ${code}`))));
  });
}
