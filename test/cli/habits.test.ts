// The command line as a new user meets it: diagnostics that name the file actually given, --version
// (and -v, -V), one-line usage errors that point to --help and name a mistyped option even where a
// required one is then missing, help with examples and the environment, a clear
// message for a bad log level, and explain-scope defaulting like serve. Each case runs the real
// command.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseManifest } from '../../src/manifest/model.js';
import { runCli } from '../helpers/cli.js';
import { makeTree, removeTree, scratch } from '../helpers/tree.js';

const CLI_DOC = new URL('../../docs/cli.md', import.meta.url);
const PACKAGE = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
const MANIFEST = 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n';

describe('manifest diagnostics name the file that was read', () => {
  it('--manifest README.md names README.md, not murmur.yaml (explain-scope and serve)', () => {
    const d = scratch();
    const readme = join(d, 'README.md');
    copyFileSync(CLI_DOC, readme);
    for (const args of [
      ['explain-scope', '--manifest', readme],
      ['serve', '--workdir', join(d, 'w'), '--manifest', readme, '--trace', join(d, 't.jsonl')],
    ]) {
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
    expect(r.stderr).toBe(
      "error[E-MAN-003]: cannot read the manifest '/nonexistent.yaml': ENOENT\n  hint: check the path given to --manifest: it must name a readable regular file\n",
    );
  });

  it('parsing text with no source keeps naming murmur.yaml', () => {
    expect(() => parseManifest('name: [a\n')).toThrow(/^murmur\.yaml is not valid YAML: /);
    expect(() => parseManifest('name: [a\n', 'x/m.yaml')).toThrow(/^the manifest 'x\/m\.yaml' is not valid YAML: /);
  });
});

describe('--version', () => {
  it.each([['--version'], ['-v'], ['-V']])('%s prints the version in package.json and exits 0', (flag) => {
    const r = runCli([flag]);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`${PACKAGE.version}\n`);
    expect(r.stderr).toBe('');
  });
});

describe('usage errors are one line that points to --help', () => {
  it.each([
    [['serve'], "error: required option '--workdir <dir>' not specified (see resource-plane serve --help)"],
    [
      ['serve', '--workdir', '/nonexistent-rp', '--containment', 'airtight'],
      /^error: option '--containment <class>' argument 'airtight' is invalid\. Allowed choices are advisory, scoped, sealed\. \(see resource-plane serve --help\)$/,
    ],
    [['serve', '--workdir', '/nonexistent-rp', '--frob'], "error: unknown option '--frob' (see resource-plane serve --help)"],
    // The mistyped option is named, not only the required one it left missing.
    [['serve', '--workdri', '/nonexistent-rp'], "error: unknown option '--workdri' (did you mean --workdir?) (see resource-plane serve --help)"],
    [['serve', '--workdir', '/nonexistent-rp', '--listen', 'nonsense'], /^error: --listen must be HOST:PORT.* \(see resource-plane serve --help\)$/],
    [['explain-scope'], 'error: explain-scope needs --workdir DIR (reads DIR/murmur.yaml) or --manifest FILE (see resource-plane explain-scope --help)'],
    [['explain-scope', '--jsn'], /^error: unknown option '--jsn' \(did you mean --json\?\) \(see resource-plane explain-scope --help\)$/],
    [['get', 'http://127.0.0.1:1'], "error: missing required argument 'path' (see resource-plane get --help)"],
    [['ls', 'http://127.0.0.1:1', 'extra'], /^error: too many arguments for 'ls'\. .* \(see resource-plane ls --help\)$/],
    [['frob'], "error: unknown command 'frob' (see resource-plane --help)"],
  ])('%j', (args, expected) => {
    const r = runCli(args);
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    const lines = r.stderr.split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[1]).toBe('');
    if (typeof expected === 'string') expect(lines[0]).toBe(expected);
    else expect(lines[0]).toMatch(expected);
    expect(r.stderr).not.toContain('Usage:');
    expect(existsSync('/nonexistent-rp')).toBe(false);
  });
});

describe('help', () => {
  it('the program help has examples and the environment variables', () => {
    const r = runCli(['--help']);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('Examples:\n  resource-plane serve --workdir ./cap ');
    expect(r.stdout).toContain('resource-plane explain-scope --workdir ./cap');
    for (const v of ['RESOURCE_PLANE_LOG_LEVEL', 'RESOURCE_PLANE_RECORDS_DIR', 'RESOURCE_PLANE_RESOLVER']) expect(r.stdout).toContain(`\n  ${v} `);
  });

  it('docs/cli.md shows the help exactly as the command prints it', () => {
    const readme = readFileSync(CLI_DOC, 'utf8');
    const shown = /`resource-plane --help` \(and [^\n]*\n\n```\n([\s\S]*?)```\n/.exec(readme);
    expect(shown, 'docs/cli.md has the help block').not.toBeNull();
    expect(shown![1]).toBe(runCli(['--help']).stdout);
  });

  it('the program help offers -v, --version', () => {
    expect(runCli(['--help']).stdout).toMatch(/^ {2}-v, --version +print the version and exit$/m);
  });

  it('serve --help says --workdir is required, with examples and the environment', () => {
    const r = runCli(['serve', '--help']);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/--workdir <dir>\s+the capsule workdir \(required\)/);
    expect(r.stdout).toContain('--workdir is required.');
    expect(r.stdout).toContain('SIGINT, SIGTERM and SIGHUP\nend the session gracefully (SIGHUP reloads nothing');
    expect(r.stdout).toContain('resource-plane serve --workdir ./cap --control stdio');
    expect(r.stdout).toContain('RESOURCE_PLANE_LOG_LEVEL    trace|debug|info|warn|error|fatal|silent (default info)');
  });

  it.each(['explain-scope', 'ls', 'get'])('%s --help has examples', (command) => {
    const r = runCli([command, '--help']);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(`Examples:\n  resource-plane ${command} `);
  });
});

describe('a bad RESOURCE_PLANE_LOG_LEVEL', () => {
  it.each(['loud', 'INFO', ''])('%j is one clear line, exit 2, before anything is created', (level) => {
    const d = scratch();
    makeTree(d, ['w/out/a: a']);
    writeFileSync(join(d, 'w', 'murmur.yaml'), MANIFEST);
    const r = runCli(['serve', '--workdir', join(d, 'w'), '--trace', join(d, 't.jsonl')], { RESOURCE_PLANE_LOG_LEVEL: level });
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      `error: RESOURCE_PLANE_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent (got '${level}') (see resource-plane serve --help)\n`,
    );
    expect(existsSync(join(d, 't.jsonl'))).toBe(false);
  });

  it('stops the demo before it starts anything', () => {
    const r = runCli(['demo'], { RESOURCE_PLANE_LOG_LEVEL: 'loud' });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^error: RESOURCE_PLANE_LOG_LEVEL must be one of .* \(see resource-plane demo --help\)\n$/);
  });

  it('a bad RESOURCE_PLANE_RESOLVER is a usage error too', () => {
    const r = runCli(['explain-scope', '--manifest', '/nonexistent.yaml'], { RESOURCE_PLANE_RESOLVER: 'fast' });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe("error: RESOURCE_PLANE_RESOLVER must be openat2 or walk (got 'fast') (see resource-plane explain-scope --help)\n");
  });
});

describe('explain-scope defaults like serve', () => {
  function workdir(): { d: string; w: string } {
    const d = scratch();
    const w = join(d, 'w');
    makeTree(w, ['out/a: a']);
    writeFileSync(join(w, 'murmur.yaml'), MANIFEST);
    return { d, w };
  }

  it('--workdir DIR alone explains DIR/murmur.yaml, exactly as --manifest DIR/murmur.yaml does', () => {
    const { w } = workdir();
    for (const json of [[], ['--json']]) {
      const alone = runCli(['explain-scope', '--workdir', w, ...json]);
      expect(alone.status).toBe(0);
      expect(alone.stdout).toBe(runCli(['explain-scope', '--manifest', join(w, 'murmur.yaml'), ...json]).stdout);
    }
    expect(readdirSync(w).sort()).toEqual(['murmur.yaml', 'out']);
  });

  it('reads DIR/murmur.yaml the safe way serve does: a symlink or a FIFO is refused, never followed or opened', () => {
    const { d, w } = workdir();
    writeFileSync(join(d, 'host-secret.yaml'), 'name: HOST-ONLY-SECRET-77\nversion: [oops\n');
    removeTree(join(w, 'murmur.yaml'));
    symlinkSync(join(d, 'host-secret.yaml'), join(w, 'murmur.yaml'));
    const link = runCli(['explain-scope', '--workdir', w]);
    expect(link.status).toBe(2);
    expect(link.stderr).toMatch(/^error\[E-MAN-003\]: cannot read the manifest '.*murmur\.yaml': it is a symlink, which is never followed inside the workdir/);
    expect(link.stderr).not.toContain('HOST-ONLY-SECRET');
    removeTree(join(w, 'murmur.yaml'));
    execFileSync('mkfifo', [join(w, 'murmur.yaml')]);
    const fifo = runCli(['explain-scope', '--workdir', w]);
    expect(fifo.status).toBe(2);
    expect(fifo.stderr).toMatch(/it is not a regular file/);
  });

  it('a workdir with no manifest is refused as serve refuses it', () => {
    const d = scratch();
    const r = runCli(['explain-scope', '--workdir', join(d, 'absent')]);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      `error[E-MAN-003]: cannot read the manifest '${join(d, 'absent', 'murmur.yaml')}': ENOENT\n  hint: pass --manifest FILE, or put murmur.yaml at the workdir root\n`,
    );
    expect(existsSync(join(d, 'absent'))).toBe(false);
  });

  it('checks the export roots against DIR (E-CAP-007)', () => {
    const { d, w } = workdir();
    removeTree(join(w, 'out'));
    makeTree(d, ['elsewhere/']);
    symlinkSync(join(d, 'elsewhere'), join(w, 'out'));
    const r = runCli(['explain-scope', '--workdir', w, '--json']);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^error\[E-CAP-007\]: exports\.files\.root 'out\/' resolves to /);
    expect(r.stdout).toBe('');
  });
});
