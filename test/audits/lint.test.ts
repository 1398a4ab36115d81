// The formatter and the linter the project runs (biome.jsonc): `npm run lint` by hand, and this
// test so that `npm test`, and CI with it, fails on code that is not formatted or breaks a rule.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('the code as the formatter and linter want it', () => {
  it('passes `biome check` (format and lint) with no finding', () => {
    const r = spawnSync(process.execPath, ['node_modules/@biomejs/biome/bin/biome', 'check', '--error-on-warnings', '--max-diagnostics=20', '.'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(`${r.stdout}${r.stderr}`.trim().split('\n').slice(-3).join('\n'), r.stdout + r.stderr).toMatch(/Checked \d+ files/);
    expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
  });
});
