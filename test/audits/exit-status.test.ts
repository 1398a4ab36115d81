// docs/cli.md's *Exit status* table and src/cli/exit.ts are one fact written twice: every status
// the command exits with has its row, saying what it is for, and every row is a status it uses.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { EXIT, signalStatus } from '../../src/cli/exit.js';

/** What each status's row must say, in the words the table uses. */
const MEANING: Record<keyof typeof EXIT, RegExp> = {
  done: /^done$/,
  internal: /internal error/,
  usage: /usage mistake/,
  unreachable: /cannot be reached/,
  refused: /server refused/,
  unverified: /failed verification/,
  too_large: /--max-bytes/,
  local: /local problem/,
};

function table(): Map<string, string> {
  const text = readFileSync(new URL('../../docs/cli.md', import.meta.url), 'utf8');
  const section = /\n### Exit status\n([\s\S]*?)\n## /.exec(text);
  if (!section) throw new Error('docs/cli.md has no Exit status section');
  const rows = section[1]!
    .split('\n')
    .filter((l) => l.startsWith('|'))
    .slice(2);
  return new Map(
    rows.map(
      (l) =>
        l
          .split(/(?<!\\)\|/)
          .slice(1, -1)
          .map((c) => c.trim()) as [string, string],
    ),
  );
}

describe("docs/cli.md's exit statuses", () => {
  it('has one row per status in src/cli/exit.ts, saying what it is for, and the signal row', () => {
    const rows = table();
    expect([...rows.keys()]).toEqual([...Object.values(EXIT).map(String), '128+N']);
    for (const [name, status] of Object.entries(EXIT)) expect(rows.get(String(status)), name).toMatch(MEANING[name as keyof typeof EXIT]);
    expect(rows.get('128+N')).toContain(`${signalStatus('SIGINT')} for Ctrl-C, ${signalStatus('SIGHUP')} for a hang-up`);
  });
});
