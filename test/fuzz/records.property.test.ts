// The records tool (`resource-plane records`, `records --prune`; issue 39). A generated records
// directory, reached directly or through a symlink: workdir digests (and a directory that is no
// digest), session ids reused across workdirs, traces that ended (`session_end` last), never ended,
// are empty or end in a torn line, or were ended and are being written again (a reused session id:
// a launch appending to a trace that still ends with the old `session_end`); some held open by a
// live process (a child of this test, given the descriptors opened through the records path, so
// through the symlink when there is one); and entries the tool must leave alone: a session
// directory that is a symlink, a trace that is a symlink, a stray file, a `.pruning-` leftover.
// Ages are hours away from the prune threshold (1h or 1d), so the clock's progress never decides.
// The model, from src/cli/records-tool.ts's documented rules and docs/cli.md, written apart:
//  - `records --json` lists exactly the session directories under 16-hex digests whose trace is a
//    regular file (no link, no dot entry), with the first line's start, the last line's end when it
//    is `session_end`, its reason, its size, the capsule's name, and `live` iff a process holds it;
//  - `records --prune D` removes exactly the sessions that no process holds and whose trace ends
//    with `session_end` more than D ago, and their workdir's directory when it empties; it never
//    removes a held one (reported `kept … live` when it started more than D ago) nor an unended one
//    (reported `kept … no session_end` likewise); every other byte, link and link target stays;
//  - `--dry-run` (in process) names the same sessions and removes nothing.
// The CLI runs with RESOURCE_PLANE_RECORDS_DIR and HOME pointing into this case's own directory.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { listSessions, pruneSessions } from '../../src/cli/records-tool.js';
import { defer } from '../helpers/cleanup.js';
import { runCliAsync } from '../helpers/cli.js';
import { scratch, treeState } from '../helpers/tree.js';
import { fuzzIt, guard } from './runner.js';

const HOUR = 3_600_000;
const DIGESTS = ['0123456789abcdef', 'fedcba9876543210', '00000000deadbeef'];
/** Not a workdir digest (upper case, too short): never listed, never touched. */
const NOT_DIGESTS = ['0123456789ABCDEF', '0123456789abcde'];
const IDS = ['ses_a', 'ses_b', 'ses.c:1', 'x-y_z'];
const AGES_H = [0.2, 3, 48];

type TraceKind = 'ended' | 'unended' | 'empty' | 'torn' | 'reused';
type Entry =
  | { e: 'session'; digest: number; id: number; trace: TraceKind; startH: number; endH: number; held: boolean; capsule: string | null }
  | { e: 'dir-link' | 'trace-link'; digest: number; id: number }
  | { e: 'stray-file' | 'dot-dir'; digest: number }
  | { e: 'not-digest'; which: number; id: number };
interface Case {
  entries: Entry[];
  viaLink: boolean;
  threshold: '1h' | '1d';
}

const entryArb: fc.Arbitrary<Entry> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      e: fc.constant('session' as const),
      digest: fc.nat(DIGESTS.length - 1),
      id: fc.nat(IDS.length - 1),
      trace: fc.constantFrom<TraceKind>('ended', 'ended', 'unended', 'empty', 'torn', 'reused'),
      startH: fc.constantFrom(...AGES_H),
      endH: fc.constantFrom(...AGES_H),
      held: fc.boolean(),
      capsule: fc.option(fc.constantFrom('cap', 'other \u001b[2J', 'é'), { nil: null }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ e: fc.constantFrom('dir-link' as const, 'trace-link' as const), digest: fc.nat(DIGESTS.length - 1), id: fc.nat(IDS.length - 1) }),
  },
  { weight: 1, arbitrary: fc.record({ e: fc.constantFrom('stray-file' as const, 'dot-dir' as const), digest: fc.nat(DIGESTS.length - 1) }) },
  { weight: 1, arbitrary: fc.record({ e: fc.constant('not-digest' as const), which: fc.nat(NOT_DIGESTS.length - 1), id: fc.nat(IDS.length - 1) }) },
);

const caseArb: fc.Arbitrary<Case> = fc.record({
  entries: fc.array(entryArb, { minLength: 1, maxLength: 8 }),
  viaLink: fc.boolean(),
  threshold: fc.constantFrom('1h' as const, '1d' as const),
});

const line = (o: Record<string, unknown>) => `${JSON.stringify(o)}\n`;

/** The bytes of a trace of this kind (session_end's end, if any, `endH` hours before `now`, after the start). */
function traceText(
  s: Extract<Entry, { e: 'session' }>,
  id: string,
  now: number,
): { text: string; start: number | null; end: number | null; reason: string | null; capsule: string | null } {
  const startMs = now - Math.max(s.startH, s.endH) * HOUR;
  const endMs = now - Math.min(s.startH, s.endH) * HOUR;
  const start = line({ event_type: 'session_start', timestamp: startMs, session_id: id, ...(s.capsule !== null ? { capsule: s.capsule } : {}) });
  const read = line({ event_type: 'resource_read', timestamp: startMs + 1, session_id: id, path: 'a' });
  const end = line({ event_type: 'session_end', timestamp: endMs, session_id: id, reason: 'SIGTERM' });
  switch (s.trace) {
    case 'ended':
    case 'reused':
      // A reused id: the new launch holds the trace (held is forced below) and has not written yet.
      return { text: start + read + end, start: startMs, end: endMs, reason: 'SIGTERM', capsule: s.capsule };
    case 'unended':
      return { text: start + read, start: startMs, end: null, reason: null, capsule: s.capsule };
    case 'empty':
      return { text: '', start: null, end: null, reason: null, capsule: null };
    case 'torn':
      return { text: start + read + end.slice(0, 20), start: startMs, end: null, reason: null, capsule: s.capsule };
  }
}

interface Expected {
  session_id: string;
  capsule: string | null;
  workdir_digest: string;
  start_ms: number | null;
  end_ms: number | null;
  end_reason: string | null;
  bytes: number;
  live: boolean;
  dir: string;
}

async function runCase(c: Case): Promise<void> {
  const base = scratch([]);
  const real = join(base, 'records-real');
  mkdirSync(real);
  const root = c.viaLink ? join(base, 'records') : real;
  if (c.viaLink) symlinkSync(real, root);
  // Targets of links: a session and a trace outside the records directory, both ended long ago.
  const elsewhere = join(base, 'elsewhere');
  mkdirSync(join(elsewhere, 'session'), { recursive: true });
  const now = Date.now();
  const oldTrace =
    line({ event_type: 'session_start', timestamp: now - 100 * HOUR, session_id: 'far' }) +
    line({ event_type: 'session_end', timestamp: now - 99 * HOUR, session_id: 'far', reason: 'stopped' });
  writeFileSync(join(elsewhere, 'session', 'trace.jsonl'), oldTrace);
  writeFileSync(join(elsewhere, 'trace.jsonl'), oldTrace);

  const expected: Expected[] = [];
  const held: number[] = [];
  const used = new Set<string>();
  for (const e of c.entries) {
    if (e.e === 'not-digest') {
      const dir = join(real, NOT_DIGESTS[e.which]!, IDS[e.id]!);
      if (used.has(dir)) continue;
      used.add(dir);
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'trace.jsonl'), oldTrace);
      continue;
    }
    const digestDir = join(real, DIGESTS[e.digest]!);
    mkdirSync(digestDir, { recursive: true });
    if (e.e === 'stray-file' || e.e === 'dot-dir') {
      if (e.e === 'stray-file') {
        writeFileSync(join(digestDir, 'stray'), 'not a session\n');
      } else {
        mkdirSync(join(digestDir, '.pruning-ses_old-1'), { recursive: true });
        writeFileSync(join(digestDir, '.pruning-ses_old-1', 'trace.jsonl'), oldTrace);
      }
      continue;
    }
    const id = IDS[(e as { id: number }).id]!;
    const dir = join(digestDir, id);
    if (used.has(dir)) continue;
    used.add(dir);
    if (e.e !== 'session') {
      if (e.e === 'dir-link') {
        symlinkSync(join(elsewhere, 'session'), dir);
      } else {
        mkdirSync(dir);
        symlinkSync(join(elsewhere, 'trace.jsonl'), join(dir, 'trace.jsonl'));
      }
      continue;
    }
    mkdirSync(dir);
    const t = traceText(e, id, now);
    writeFileSync(join(dir, 'trace.jsonl'), t.text);
    const live = e.held || e.trace === 'reused';
    // Opened through the records path the tool is given (through the symlink, when there is one).
    if (live) held.push(openSync(join(root, DIGESTS[e.digest]!, id, 'trace.jsonl'), e.trace === 'reused' ? 'a' : 'r'));
    expected.push({
      session_id: id,
      capsule: t.capsule,
      workdir_digest: DIGESTS[e.digest]!,
      start_ms: t.start,
      end_ms: t.end,
      end_reason: t.reason,
      bytes: Buffer.byteLength(t.text),
      live,
      dir: join(root, DIGESTS[e.digest]!, id),
    });
  }
  // The live process: a child holding every held trace; this process lets its own copies go.
  let holder: ReturnType<typeof spawn> | null = null;
  if (held.length > 0) {
    holder = spawn('sleep', ['600'], { stdio: ['ignore', 'ignore', 'ignore', ...held] });
    const h = holder;
    const gone = new Promise<void>((resolve) => h.once('exit', () => resolve()));
    defer(async () => {
      if (h.exitCode === null && h.signalCode === null) h.kill('SIGKILL');
      await gone;
    });
    for (const fd of held) closeSync(fd);
    // Until the child has the descriptors (spawn returns once it has exec'd).
    await new Promise<void>((resolve) => (h.pid ? resolve() : h.once('spawn', () => resolve())));
  }
  const env = { RESOURCE_PLANE_RECORDS_DIR: root, HOME: base };
  const label = JSON.stringify(c);

  // records --json: exactly the sessions, each as the model says.
  const byDir = (a: { dir: string }, b: { dir: string }) => a.dir.localeCompare(b.dir);
  const listed = await runCliAsync(['records', '--json'], env);
  expect(listed.status, `${label}: ${listed.stderr}`).toBe(0);
  const rows = listed.stdout
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Expected);
  expect(rows.sort(byDir), `${label}: records --json`).toEqual([...expected].sort(byDir));
  // In process, the same (listSessions is what the command prints).
  expect(
    listSessions(root)
      .map((s) => s.live)
      .filter(Boolean).length,
    `${label}: live in process`,
  ).toBe(expected.filter((s) => s.live).length);

  const limit = c.threshold === '1h' ? HOUR : 24 * HOUR;
  const removable = expected.filter((s) => !s.live && s.end_ms !== null && now - s.end_ms > limit);
  const keptLive = expected.filter((s) => s.live && s.start_ms !== null && now - s.start_ms > limit);
  const keptUnended = expected.filter((s) => !s.live && s.end_ms === null && s.start_ms !== null && now - s.start_ms > limit);

  // --dry-run names the same and removes nothing.
  const before = treeState(base);
  const dry = pruneSessions(limit, { root, dryRun: true });
  expect(dry.removed.map((s) => s.dir).sort(), `${label}: --dry-run`).toEqual(removable.map((s) => s.dir).sort());
  expect(treeState(base), `${label}: --dry-run removes nothing`).toEqual(before);

  const pruned = await runCliAsync(['records', '--prune', c.threshold, '--json'], env);
  expect(pruned.status, `${label}: ${pruned.stderr}`).toBe(0);
  const removed = pruned.stdout
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as { removed: string; dir: string });
  expect(removed.map((r) => r.dir).sort(), `${label}: prune removes exactly the ended, unheld sessions older than ${c.threshold}`).toEqual(
    removable.map((s) => s.dir).sort(),
  );
  for (const s of expected) {
    const gone = removable.includes(s);
    expect(existsSync(join(s.dir, 'trace.jsonl')), `${label}: ${s.dir} ${gone ? 'removed' : 'kept'}${s.live ? ' (held by a live process)' : ''}`).toBe(!gone);
  }
  for (const s of keptLive) expect(pruned.stderr, label).toContain(`kept ${s.session_id}: live: a process has its trace open`);
  for (const s of keptUnended) expect(pruned.stderr, label).toContain(`kept ${s.session_id}: it has no session_end`);
  expect(pruned.stderr.split('\n').filter((l) => l.startsWith('kept ')).length, `${label}: kept lines`).toBe(keptLive.length + keptUnended.length);
  // Nothing else moved: every other file, link and link target is as it was, and a workdir's
  // directory went only with its last session.
  const after = treeState(base);
  const removedRel = removable.map((s) => relative(base, join(real, s.workdir_digest, s.session_id)));
  for (const [path, content] of before) {
    const underRemoved = removedRel.some((r) => path === r || path.startsWith(`${r}/`));
    const digestDir = DIGESTS.find((d) => path === relative(base, join(real, d)));
    if (underRemoved) continue;
    if (digestDir !== undefined && !after.has(path)) {
      const left = [...before.keys()].filter((p) => p.startsWith(`${path}/`) && !removedRel.some((r) => p === r || p.startsWith(`${r}/`)));
      expect(left, `${label}: ${path} removed while it still held entries`).toEqual([]);
      continue;
    }
    expect(after.get(path), `${label}: ${path} is untouched`).toEqual(content);
  }
  for (const d of DIGESTS) {
    const rel = relative(base, join(real, d));
    if (!before.has(rel)) continue;
    const left = [...before.keys()].filter((p) => p.startsWith(`${rel}/`) && !p.slice(rel.length + 1).includes('/') && !removedRel.includes(p));
    if (left.length === 0) expect(after.has(rel), `${label}: ${rel} went with its last session`).toBe(false);
  }
  holder?.kill('SIGKILL');
}

describe('the records tool', () => {
  fuzzIt({
    name: 'records-prune',
    file: import.meta.filename,
    runs: 3,
    timeoutMs: 90_000,
    // Fixed: a reused session id (ended, held again) through a symlinked records directory beside
    // an ended old one in the same workdir; every kind of entry the tool must leave alone.
    examples: (): Array<[Case]> => [
      [
        {
          viaLink: true,
          threshold: '1h',
          entries: [
            { e: 'session', digest: 0, id: 0, trace: 'reused', startH: 48, endH: 3, held: false, capsule: 'cap' },
            { e: 'session', digest: 0, id: 1, trace: 'ended', startH: 48, endH: 3, held: false, capsule: 'cap' },
            { e: 'session', digest: 1, id: 0, trace: 'ended', startH: 48, endH: 3, held: true, capsule: null },
            { e: 'session', digest: 1, id: 2, trace: 'unended', startH: 48, endH: 48, held: false, capsule: null },
          ],
        },
      ],
      [
        {
          viaLink: false,
          threshold: '1d',
          entries: [
            { e: 'dir-link', digest: 0, id: 0 },
            { e: 'trace-link', digest: 0, id: 1 },
            { e: 'stray-file', digest: 0 },
            { e: 'dot-dir', digest: 0 },
            { e: 'not-digest', which: 0, id: 0 },
            { e: 'not-digest', which: 1, id: 1 },
            { e: 'session', digest: 2, id: 3, trace: 'torn', startH: 48, endH: 48, held: false, capsule: 'é' },
            { e: 'session', digest: 2, id: 2, trace: 'empty', startH: 48, endH: 48, held: true, capsule: null },
            { e: 'session', digest: 2, id: 1, trace: 'ended', startH: 48, endH: 48, held: false, capsule: 'cap' },
          ],
        },
      ],
    ],
    // Invariant: records lists exactly the sessions with live iff held; prune removes exactly the unheld sessions whose session_end is older than the threshold, never a held or unended one, and nothing else.
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
