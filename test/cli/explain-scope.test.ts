// explain-scope answers before a session exists exactly what a launch then records:
// `--json` is byte-for-byte the `effective_grants` of `session_start` in a real launch's trace.
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, startServe } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';

const MANIFESTS: Array<[string, string]> = [
  ['nothing declared', 'name: a\nversion: "1"\n'],
  ['files only', 'name: a\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 2Mi\n'],
  ['peer files, defaults', 'name: a\nversion: "1"\nexports:\n  peer_files:\n    root: share\n'],
  ['fetch only', 'name: a\nversion: "1"\ncapabilities:\n  peer_fetch:\n    allow: ["localhost:8080", "http://Peer.Example"]\n'],
  [
    'everything',
    'name: a\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n  peer_files:\n    root: out/pub\n    max_ttl: 10m\n    max_bytes: 1Ki\ncapabilities:\n  network:\n    allow: [localhost, "api.example:443"]\n  peer_fetch:\n    allow: [localhost]\nlifecycle:\n  after_task: sleep\n',
  ],
];

describe('explain-scope --json equals session_start.effective_grants', () => {
  it.each(MANIFESTS)('%s', async (_label, manifest) => {
    const dir = scratch();
    // The trace must live outside the workdir (a launch refuses it inside).
    const records = scratch();
    const manifestPath = join(dir, 'murmur.yaml');
    writeFileSync(manifestPath, manifest);
    for (const containment of ['sealed', 'scoped']) {
      const explained = runCli(['explain-scope', '--manifest', manifestPath, '--json', '--containment', containment]);
      expect(explained.status).toBe(0);
      expect(explained.stdout.endsWith('\n')).toBe(true);
      expect(explained.stdout.trimEnd().split('\n')).toHaveLength(1);
      const trace = join(records, `trace-${containment}.jsonl`);
      const s = await startServe(['--workdir', dir, '--containment', containment, '--trace', trace]);
      s.child.kill('SIGTERM');
      await s.exited;
      const line = readFileSync(trace, 'utf8').split('\n')[0]!;
      // Byte for byte: the substring of the raw trace line, not a re-serialisation of it.
      const start = line.indexOf('"effective_grants":') + '"effective_grants":'.length;
      expect(line.slice(start, -1)).toBe(explained.stdout.trimEnd());
    }
  });

  it('renders sections for humans and creates nothing', () => {
    const dir = scratch();
    const manifestPath = join(dir, 'murmur.yaml');
    writeFileSync(manifestPath, MANIFESTS[4]![1]);
    const r = runCli(['explain-scope', '--manifest', manifestPath]);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('resource plane:');
    expect(r.stdout).toContain('peer handoff:');
    expect(r.stdout).toContain('  runtime writes:\n    - peer-in (directory, accessible, peer-fetch)');
    expect(readdirSync(dir)).toEqual(['murmur.yaml']);
    expect(existsSync(join(dir, 'peer-in'))).toBe(false);
  });
});
