// The guard that keeps the suite out of the real home (test/global-setup.ts): every worker, and
// every command it spawns, sees HOME and RESOURCE_PLANE_RECORDS_DIR inside this run's own temp
// directory, so a test that forgets a trace path still cannot write to ~/.murmur/records. Watching
// the real records directory instead would not be reliable with test files running in parallel.
import { execFileSync } from 'node:child_process';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultTracePath } from '../../src/session/session.js';
import { TEST_HOME_ENV } from '../global-setup.js';

describe('the test run', () => {
  it('points HOME and the records directory at its own temp directory, not at the real home', () => {
    const home = process.env[TEST_HOME_ENV];
    expect(home).toBeDefined();
    expect(home!.startsWith(`${tmpdir()}/rp-test-home-`)).toBe(true);
    expect(process.env.HOME).toBe(home);
    expect(process.env.HOME).not.toBe(userInfo().homedir);
    expect(process.env.RESOURCE_PLANE_RECORDS_DIR).toBe(join(home!, '.murmur', 'records'));
    expect(defaultTracePath('/w', 'ses_x').startsWith(`${home}/`)).toBe(true);
  });

  it('hands the same to a process it spawns with the default environment', () => {
    const out = execFileSync(process.execPath, ['-e', 'process.stdout.write(JSON.stringify([process.env.HOME, process.env.RESOURCE_PLANE_RECORDS_DIR]))'], {
      encoding: 'utf8',
    });
    const home = process.env[TEST_HOME_ENV]!;
    expect(JSON.parse(out)).toEqual([home, join(home, '.murmur', 'records')]);
  });
});
