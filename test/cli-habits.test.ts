// The command line as a new user meets it: diagnostics that name the file actually given, --version,
// one-line usage errors that point to --help, help with examples and the environment, a clear
// message for a bad log level, and explain-scope defaulting like serve. Each case runs the real
// command.
import { copyFileSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseManifest } from '../src/manifest/model.js';
import { runCli } from './helpers/cli.js';
import { makeTree, removeTree, tempDir } from './helpers/tree.js';

const README = new URL('../README.md', import.meta.url);
const MANIFEST = 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) removeTree(d);
});

function scratch(): string {
  const d = tempDir('rp-cli-habits-');
  dirs.push(d);
  return d;
}

describe('manifest diagnostics name the file that was read', () => {
  it('--manifest README.md names README.md, not murmur.yaml (explain-scope and serve)', () => {
    const d = scratch();
    const readme = join(d, 'README.md');
    copyFileSync(README, readme);
    for (const args of [['explain-scope', '--manifest', readme], ['serve', '--workdir', join(d, 'w'), '--manifest', readme, '--trace', join(d, 't.jsonl')]]) {
      const r = runCli(args);
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`^error\\[E-MAN-003\\]: the manifest '${readme.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}' is not valid YAML: `));
      expect(r.stderr).not.toContain('murmur.yaml');
    }
    expect(existsSync(join(d, 'w'))).toBe(false);
  });

  it('the default manifest names its path in the workdir', () => {
    const d = scratch();
    makeTree(d, ['w/out/a: a']);
    writeFileSync(join(d, 'w', 'murmur.yaml'), '- just\n- a list\n');
    const r = runCli(['serve', '--workdir', join(d, 'w'), '--trace', join(d, 't.jsonl')]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`error[E-MAN-003]: the manifest '${join(d, 'w', 'murmur.yaml')}' must be a mapping at the top level (got a list)`);
  });

  it('a missing --manifest is not told to pass --manifest', () => {
    const r = runCli(['explain-scope', '--manifest', '/nonexistent.yaml']);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe("error[E-MAN-003]: cannot read the manifest '/nonexistent.yaml': ENOENT\n  hint: check the path given to --manifest: it must name a readable regular file\n");
  });

  it('parsing text with no source keeps naming murmur.yaml', () => {
    expect(() => parseManifest('name: [a\n')).toThrow(/^murmur\.yaml is not valid YAML: /);
    expect(() => parseManifest('name: [a\n', 'x/m.yaml')).toThrow(/^the manifest 'x\/m\.yaml' is not valid YAML: /);
  });
});
