// The README's *Limits* table and src/limits.ts are one fact written twice: every row of the table
// is held against the bounds it states, so a bound cannot change without its row, and a row cannot
// be added without saying which bound it is.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { BAD_REQUEST_STATUSES } from '../../src/codes.js';
import * as L from '../../src/limits.js';

const kib = (bytes: number) => `${bytes / 1024} KiB`;
const mib = (bytes: number) => `${bytes / 2 ** 20} MiB`;
const sec = (ms: number) => `${ms / 1000} s`;
const WORDS = ['zero', 'one', 'two', 'three', 'four'];

/** Each row by the start of its first cell: what its default cell and its last cell must say. */
const ROWS: Array<{ row: string; default: string[]; effect?: string[] }> = [
  { row: 'header block', default: [kib(L.LIMITS.maxHeaderBytes)], effect: [`\`${BAD_REQUEST_STATUSES.header_overflow.status} bad_request\``] },
  { row: 'headers must arrive within', default: [sec(L.LIMITS.headersTimeoutMs)], effect: [`\`${BAD_REQUEST_STATUSES.timeout.status} bad_request\``] },
  { row: 'whole request must arrive within', default: [sec(L.LIMITS.requestTimeoutMs)], effect: [`\`${BAD_REQUEST_STATUSES.timeout.status} bad_request\``] },
  { row: 'idle keep-alive connection', default: [sec(L.LIMITS.keepAliveTimeoutMs)] },
  { row: 'a connection on which nothing moves', default: [sec(L.LIMITS.idleTimeoutMs)] },
  { row: 'pipelined requests', default: [`${L.MAX_QUEUED_PER_CONNECTION} waiting`] },
  { row: 'connections at once', default: [String(L.LIMITS.maxConnections)] },
  {
    row: 'memory held for clients',
    default: [mib(L.DEFAULT_MEMORY_BUDGET_BYTES)],
    effect: [
      `above ${kib(L.ADDON_LIMITS.syncReadMaxBytes)}, at most ${kib(L.ADDON_LIMITS.streamThresholdBytes)}`,
      `two ${kib(L.ADDON_LIMITS.streamChunkBytes)} chunks`,
      `(${mib(L.DEFAULT_SNAPSHOT_MAX_BYTES)} by default`,
      `at most ${WORDS[L.MAX_CONCURRENT_LISTINGS]} listings`,
      `past ${sec(L.DEFAULT_BUDGET_WAIT_MS)} is \`503 over_capacity\``,
      `at most ${mib(L.ADDON_LIMITS.syncReadMaxBytes * L.LIMITS.maxConnections)} at the connection cap`,
    ],
  },
  { row: 'one listing', default: [sec(L.DEFAULT_LISTING_BUDGET_MS)] },
  {
    row: 'the digest cache',
    default: [`${L.DEFAULT_DIGEST_CACHE_ENTRIES.toLocaleString('en-US')} entries`, `0 to ${L.MAX_DIGEST_CACHE_ENTRIES.toLocaleString('en-US')}`],
  },
  { row: 'listings of one root at once', default: [String(L.MAX_CONCURRENT_LISTINGS)] },
  { row: 'a listing whose client left', default: ['–'] },
  {
    row: 'shutdown',
    default: [`${sec(L.DRAIN_TIMEOUT_MS)} drain, ${sec(L.DRAIN_TIMEOUT_MS + L.SHUTDOWN_GRACE_MS)} in all`],
    effect: [`past ${sec(L.DRAIN_TIMEOUT_MS + L.SHUTDOWN_GRACE_MS)}`],
  },
  { row: 'a caller-chosen trace field', default: [`${L.TRACE_FIELD_MAX_CHARS} characters`] },
  {
    row: 'traced refusals per client address',
    default: [`a burst of ${L.REFUSAL_BURST}, then ${L.REFUSALS_PER_SECOND} per second`],
    effect: [`every ${sec(L.SUMMARY_INTERVAL_MS)}`, `the ${L.NAMED_SUMMARIES} clients with most`],
  },
  {
    row: 'traced refusals from all clients together',
    default: [`a burst of ${L.SERVER_REFUSAL_BURST}, then ${L.SERVER_REFUSALS_PER_SECOND} per second`],
    effect: [`At ${L.SERVER_REFUSALS_PER_SECOND} a second`, 'burst 10×N'],
  },
];

function limitsTable(): string[][] {
  const text = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const section = /\n## Limits\n([\s\S]*?)\n## /.exec(text);
  if (!section) throw new Error('README has no Limits section');
  const lines = section[1]!.split('\n').filter((l) => l.startsWith('|'));
  // The header row and the separator, then one line per limit.
  return lines.slice(2).map((l) =>
    l
      .split(/(?<!\\)\|/)
      .slice(1, -1)
      .map((c) => c.trim()),
  );
}

describe("README's Limits table", () => {
  it('states every bound as src/limits.ts defines it, one row per bound, none unaccounted for', () => {
    const table = limitsTable();
    expect(table.map((cells) => ROWS.find((r) => cells[0]!.startsWith(r.row))?.row ?? `unaccounted row: ${cells[0]}`)).toEqual(ROWS.map((r) => r.row));
    for (const cells of table) {
      const row = ROWS.find((r) => cells[0]!.startsWith(r.row))!;
      for (const d of row.default) expect(cells[1], `${row.row}: default`).toContain(d);
      for (const e of row.effect ?? []) expect(cells[2], `${row.row}: what happens`).toContain(e);
    }
  });
});
