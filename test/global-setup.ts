// Compiles src/ to dist/ once per test run, so tests that spawn the `resource-plane` command run
// the code under test, never a stale build.
import { execFileSync } from 'node:child_process';

export default function setup(): void {
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], { stdio: 'inherit' });
}
