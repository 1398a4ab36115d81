// The README's error table and the catalogue in src/errors.ts are one fact written twice: this
// keeps them equal in both directions (every row documented, every documented row real).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CATALOGUE } from '../src/errors.js';

function readmeRows(): Map<string, { status: number; files: string | undefined; peer: string | undefined }> {
  const text = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const block = /<!-- error-table:start -->([\s\S]*?)<!-- error-table:end -->/.exec(text);
  if (!block) throw new Error('README has no error table markers');
  const rows = new Map();
  for (const line of block[1]!.trim().split('\n').slice(2)) {
    const cells = line.split('|').slice(1, -1).map((c) => c.trim());
    const [status, code, files, peer] = cells as [string, string, string, string];
    const message = (m: string) => (m === '–' ? undefined : m);
    rows.set(code.replaceAll('`', ''), { status: Number(status), files: message(files), peer: message(peer) });
  }
  return rows;
}

describe('README error table', () => {
  it('documents exactly the catalogue: codes, statuses and messages', () => {
    const rows = readmeRows();
    expect([...rows.keys()].sort()).toEqual(Object.keys(CATALOGUE).sort());
    for (const [code, row] of Object.entries(CATALOGUE)) {
      expect(rows.get(code), code).toEqual({ status: row.status, files: row.files, peer: row.peer });
    }
  });
});
