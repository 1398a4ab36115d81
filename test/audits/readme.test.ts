// The README's error table and the catalogue in src/codes.ts are one fact written twice: this
// keeps them equal in both directions (every code documented, every documented row real).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { BAD_REQUEST_STATUSES, CATALOGUE } from '../../src/codes.js';

type Row = { status: number | null; messages: Record<string, string> };

function readmeRows(): Map<string, Row> {
  const text = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const block = /<!-- error-table:start -->([\s\S]*?)<!-- error-table:end -->/.exec(text);
  if (!block) throw new Error('README has no error table markers');
  const rows = new Map<string, Row>();
  const contexts = ['files', 'peer', 'server', 'tool'];
  for (const line of block[1]!.trim().split('\n').slice(2)) {
    const cells = line
      .split(/(?<!\\)\|/)
      .slice(1, -1)
      .map((c) => c.trim().replaceAll('\\|', '|'));
    const [status, code, ...messages] = cells as [string, string, ...string[]];
    const row: Row = { status: status === '–' ? null : Number(status), messages: {} };
    messages.forEach((m, i) => {
      if (m !== '–') row.messages[contexts[i]!] = m;
    });
    rows.set(code.replaceAll('`', ''), row);
  }
  return rows;
}

describe('README error table', () => {
  it('documents exactly the catalogue: codes, statuses and messages', () => {
    const rows = readmeRows();
    expect([...rows.keys()].sort()).toEqual(Object.keys(CATALOGUE).sort());
    for (const [code, row] of Object.entries(CATALOGUE)) {
      expect(rows.get(code), code).toEqual({ status: row.status, messages: { ...row.messages } });
    }
  });
});

describe("README's statuses of bad_request", () => {
  it('names each status admission answers bad_request with, for the cause the catalogue gives', () => {
    const text = readFileSync(new URL('../../README.md', import.meta.url), 'utf8').replaceAll('\n', ' ');
    const sentence = /`bad_request` is .*?\./.exec(text)?.[0] ?? '';
    const words: Record<keyof typeof BAD_REQUEST_STATUSES, string> = { header_overflow: 'too large', timeout: 'in time', expectation: '`Expect`' };
    for (const [cause, { status }] of Object.entries(BAD_REQUEST_STATUSES)) {
      expect(sentence, cause).toMatch(new RegExp(`\`${status}\`[^\`]*${words[cause as keyof typeof words].replaceAll('`', '\\`')}`));
    }
  });
});
