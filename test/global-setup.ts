// Once per test run: compiles src/ to dist/, so tests that spawn the `resource-plane` command run
// the code under test, never a stale build; and points HOME and RESOURCE_PLANE_RECORDS_DIR at a
// fresh directory of this run, removed at its end, so that no test, nor any command it spawns,
// writes a session trace into the real ~/.murmur/records, even one that forgets to pass a trace
// path. The workers inherit the variables: vitest builds their environment from process.env after
// the global setup has run (test/audits/test-env.test.ts checks that it did).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';

/** Names this run's stand-in home, for the test that checks the guard. */
export const TEST_HOME_ENV = 'RESOURCE_PLANE_TEST_HOME';

export default function setup(): () => void {
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], { stdio: 'inherit' });
  const realHome = homedir();
  const home = realpathSync(mkdtempSync(join(tmpdir(), 'rp-test-home-')));
  // npm, run by a few tests, keeps the real user's configuration (nodedir) and package cache.
  process.env.npm_config_userconfig ??= join(realHome, '.npmrc');
  process.env.npm_config_cache ??= join(realHome, '.npm');
  process.env.HOME = home;
  process.env.RESOURCE_PLANE_RECORDS_DIR = join(home, '.murmur', 'records');
  process.env[TEST_HOME_ENV] = home;
  return () => rmSync(home, { recursive: true, force: true });
}
