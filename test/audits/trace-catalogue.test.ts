// The trace's catalogue (src/trace/events.ts) and docs/trace.md say the same, both ways: every
// event type the code can write is documented with exactly its fields, in the order a line carries
// them, and the docs name no event or field the code never writes. Lines a real session writes
// carry exactly the catalogue's fields.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EVENT_FIELDS, peerHandleMint, peerHandleRedeem, resourceList, resourceRead, responseUndelivered, sessionStart } from '../../src/trace/events.js';
import { TRACE_FIELD_MAX_CHARS } from '../../src/limits.js';
import { boundedField, Trace } from '../../src/trace/trace.js';

const DOC = readFileSync(fileURLToPath(new URL('../../docs/trace.md', import.meta.url)), 'utf8');

/** The table's rows: event type → the fields its cell names (what is in parentheses is commentary). */
function documented(markdown: string): Map<string, string[]> {
  const rows = new Map<string, string[]>();
  for (const line of markdown.split('\n')) {
    const m = /^\| `([a-z0-9_]+)` \| (.*) \|$/.exec(line);
    if (!m) continue;
    let cell = m[2]!;
    while (/\([^()]*\)/.test(cell)) cell = cell.replace(/\([^()]*\)/g, '');
    rows.set(
      m[1]!,
      [...cell.matchAll(/`([a-z0-9_]+)`/g)].map((f) => f[1]!),
    );
  }
  return rows;
}

describe('the trace catalogue against docs/trace.md', () => {
  const rows = documented(DOC);

  it('documents every event type the code writes, with its fields in line order', () => {
    for (const [type, fields] of Object.entries(EVENT_FIELDS)) expect(rows.get(type), type).toEqual([...fields]);
  });

  it('documents no event type the code cannot write', () => {
    expect([...rows.keys()].sort()).toEqual(Object.keys(EVENT_FIELDS).sort());
  });

  it('reads the table it checks (a parser that finds nothing would pass anything)', () => {
    expect(rows.size).toBeGreaterThanOrEqual(9);
    expect(documented('| `x_event` | `a` (note: `b`), `c` |').get('x_event')).toEqual(['a', 'c']);
  });

  it('builds each line with exactly its catalogued fields, explicit nulls for absent values', () => {
    const read = resourceRead({ path: 'a.txt', outcome: 'ok', reason: null, bytes: 3, sha256: 'f'.repeat(64), generation: 2, containment: 'sealed' });
    expect(Object.keys(read.fields)).toEqual([...EVENT_FIELDS.resource_read]);
    const list = resourceList({
      root: 'out',
      outcome: 'no_resource_plane',
      reason: 'x',
      entryCount: null,
      totalBytes: null,
      generation: 0,
      containment: 'advisory',
    });
    expect(list.fields.entry_count).toBeNull();
  });

  it("bounds a mint's audience like every caller-chosen field: a peer names it on its card", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rp-trace-bound-'));
    try {
      const trace = Trace.open(join(dir, 'trace.jsonl'), 'ses_bound');
      trace.start(sessionStart({ containment: 'sealed', resolver: 'openat2', toolsDeclared: [], capsule: 'cap', confinement: null, effectiveGrants: {} }));
      await trace.record(
        peerHandleMint({ handleId: null, path: 'a.txt', audience: `${'n'.repeat(65_536)}@localhost:1`, expiresAtMs: null, outcome: 'ok', reason: null }),
      );
      await trace.close();
      const line = JSON.parse(readFileSync(join(dir, 'trace.jsonl'), 'utf8').trim().split('\n')[1]!) as { audience: string };
      expect(line.audience.length).toBeLessThanOrEqual(TRACE_FIELD_MAX_CHARS + 64);
      expect(line.audience).toMatch(/…\[65548 chars, sha256:[0-9a-f]{16}\]$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("takes an undelivered line's path and handle id from the event it follows, never restated", () => {
    const redeem = peerHandleRedeem({
      handleId: 'hid_1',
      path: 'p.bin',
      generation: 4,
      audienceAsserted: 'a',
      bytes: 9,
      sha256: null,
      outcome: 'ok',
      reason: null,
    });
    expect(responseUndelivered(redeem, 9).fields).toEqual({
      of: 'peer_handle_redeem',
      path: 'p.bin',
      handle_id: 'hid_1',
      bytes: 9,
      generation: 4,
      outcome: 'undelivered',
      reason: 'the connection closed before the whole body was sent',
    });
    const read = resourceRead({ path: 'a.txt', outcome: 'ok', reason: null, bytes: 3, sha256: null, generation: 1, containment: 'sealed' });
    expect(responseUndelivered(read, 3, 'changed').fields).toMatchObject({ of: 'resource_read', path: 'a.txt', handle_id: null });
    const list = resourceList({ root: 'out', outcome: 'ok', reason: null, entryCount: 1, totalBytes: 1, generation: 1, containment: 'sealed' });
    // Absent values are explicit nulls, as on every line.
    expect(responseUndelivered(list, 80).fields).toMatchObject({ of: 'resource_list', path: null, handle_id: null, bytes: 80 });
  });
});

describe("a request's line, byte for byte", () => {
  // Every request's line is exactly what JSON.stringify gives for the common fields then the
  // catalogue's, in that order, with caller-chosen fields bounded and tokens redacted, whatever the
  // path holds: a faster rendering of it must keep these bytes.
  const token = 'mh1.eyJ2IjoxfQ.c2ln';
  const paths = [
    'plain.txt',
    'quote"back\\slash',
    'ctl\u0000\u0001\u001f\ttab\nline',
    'sep\u2028\u2029',
    'lone\ud800surrogate and \udc00',
    'emoji 🦊 and é',
    `token ${token} inside`,
    `${'x'.repeat(TRACE_FIELD_MAX_CHARS + 10)}`,
  ];
  it.each(paths.map((p) => [p]))('%j', async (path) => {
    const dir = mkdtempSync(join(tmpdir(), 'rp-trace-flat-'));
    try {
      const trace = Trace.open(join(dir, 'trace.jsonl'), 'ses_"flat"\\');
      const parent = trace.start(
        sessionStart({ containment: 'sealed', resolver: 'openat2', toolsDeclared: [], capsule: 'cap', confinement: null, effectiveGrants: {} }),
      );
      const fields = { path, outcome: 'ok', reason: null, bytes: 1e21, sha256: 'f'.repeat(64), generation: -0, containment: 'sealed' };
      await trace.record(resourceRead(fields));
      await trace.close();
      const raw = readFileSync(join(dir, 'trace.jsonl'), 'utf8').split('\n')[1]!;
      const parsed = JSON.parse(raw) as Record<string, unknown>;
      const expected = JSON.stringify({
        event_type: 'resource_read',
        event_id: parsed.event_id,
        parent_id: parent,
        session_id: 'ses_"flat"\\',
        timestamp: parsed.timestamp,
        path: boundedField(path),
        outcome: 'ok',
        bytes: 1e21,
        sha256: 'f'.repeat(64),
        generation: 0,
        containment_achieved: 'sealed',
        reason: null,
      });
      expect(raw).toBe(expected);
      expect(raw).not.toContain(token);
      if (path.length > TRACE_FIELD_MAX_CHARS) expect(parsed.path).toMatch(/…\[\d+ chars, sha256:[0-9a-f]{16}\]$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
