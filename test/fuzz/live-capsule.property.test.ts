// A live capsule (SPEC section 10, a live workdir; issue 36). The real `serve` command, its operator
// plane over TCP or a unix socket, while other processes keep changing the files it serves: one
// rewrites a file in place, one appends to a log, one truncates and rewrites, one saves by rename,
// and some files stay still. Reads (some paused mid-body) and listings run meanwhile, and on a
// records disk small enough to fill (a 64 KiB tmpfs, where this process may mount one) another
// process fills it and frees it again. What must hold, whatever the order:
//  - the process never dies, and stops with exit 0 and session_end as the trace's last line;
//  - every complete body is exactly what its etag vouches for, and is bytes the file held: a file
//    saved by rename is one whole version (one inode's bytes), a log starts with what it held,
//    a file rewritten in place keeps its size, a still file is its bytes;
//  - a file that keeps changing is still served (complete, 200), as a snapshot; a settled file
//    touched while it streams may be cut (a reset on TCP, a destroyed unix socket), and then the
//    cut is traced as undelivered and the server goes on;
//  - while the records disk is full a read is served or refused closed (500 io_error), never
//    served unrecorded; every trace line parses; every 200 has its ok line, and no more.
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import {
  etagOf,
  liveWorkdir,
  mountTmpfs,
  parsedTrace,
  pattern,
  renamedVersion,
  serveLive,
  stalledGet,
  startWriter,
  unmount,
  WRITERS,
  type Answer,
} from '../helpers/live.js';
import { scratch } from '../helpers/tree.js';
import { fuzzIt, guard } from './runner.js';
import { settledSince } from './thresholds.js';
import { sha256Hex } from '../helpers/http.js';

const KiB = 1024;
const MiB = 1024 * KiB;

type Writer = 'still' | 'inPlace' | 'append' | 'truncateRewrite' | 'renameOver';
const WRITER_KINDS: Writer[] = ['still', 'inPlace', 'append', 'truncateRewrite', 'renameOver'];
/**
 * Either side of the whole-read and streaming thresholds (512 KiB), a body of several chunks, and
 * one larger than what loopback's socket buffers take in, so a body can still be in flight when
 * its file is touched.
 */
const SIZES = [4 * KiB, 300 * KiB, 1 * MiB, 3 * MiB, 12 * MiB];

interface FileSpec {
  size: number;
  writer: Writer;
}
/** A read, paused after `pauseAt` body bytes; `touch`: meanwhile a still file's tail is rewritten in place with other bytes. */
type Op = { op: 'read'; file: number; pauseAt: number | null; touch: boolean } | { op: 'list' } | { op: 'fill' } | { op: 'free' };
interface Case {
  /** `both`: the case twice at once, once per listener, each with its own server and files. */
  listener: 'tcp' | 'unix' | 'both';
  /** Wait until the still files are settled (past the racy margin) before the first step: they stream. */
  settleFirst: boolean;
  files: FileSpec[];
  ops: Op[];
  smallDisk: boolean;
}

const caseArb: fc.Arbitrary<Case> = fc
  .record({
    listener: fc.constantFrom('tcp' as const, 'unix' as const),
    settleFirst: fc.boolean(),
    files: fc.array(fc.record({ size: fc.constantFrom(...SIZES), writer: fc.constantFrom(...WRITER_KINDS) }), { minLength: 1, maxLength: 4 }),
    smallDisk: fc.boolean(),
    steps: fc.array(
      fc.oneof(
        {
          weight: 6,
          arbitrary: fc.record({
            op: fc.constant('read' as const),
            file: fc.nat(),
            pauseAt: fc.option(fc.integer({ min: 1, max: 2 * MiB }), { nil: null }),
            touch: fc.boolean(),
          }),
        },
        { weight: 2, arbitrary: fc.record({ op: fc.constant('list' as const) }) },
        { weight: 1, arbitrary: fc.record({ op: fc.constantFrom('fill' as const, 'free' as const) }) },
      ),
      { minLength: 3, maxLength: 14 },
    ),
  })
  .map(({ listener, settleFirst, files, smallDisk, steps }) => ({
    listener,
    settleFirst,
    files,
    smallDisk,
    ops: steps.map((s): Op => (s.op === 'read' ? { ...s, file: s.file % files.length } : s)),
  }));

/** Whether a body is bytes this file held, given how it is written (see the header). */
function heldBytes(spec: FileSpec, initial: Buffer, body: Buffer): string | null {
  switch (spec.writer) {
    case 'still':
      return null; // checked against the version the test wrote last (runCase)
    case 'inPlace':
      return body.length === spec.size ? null : `a file rewritten in place at ${spec.size} bytes was served ${body.length}`;
    case 'append':
      return body.length >= spec.size && body.subarray(0, spec.size).equals(initial) ? null : 'a log was served without what it held before';
    case 'truncateRewrite':
      return body.length <= spec.size ? null : `a file truncated and rewritten at ${spec.size} bytes was served ${body.length}`;
    case 'renameOver':
      return body.equals(initial) || renamedVersion(body, spec.size) !== null ? null : 'a file saved by rename was served bytes of no one version';
  }
}

let mountRefused: string | null | undefined;

async function runCase(c: Case): Promise<void> {
  // Side by side, the two runs overlap their waits (the racy margin, the writers, the server's start).
  if (c.listener === 'both') {
    await Promise.all([runCase({ ...c, listener: 'tcp' }), runCase({ ...c, listener: 'unix' })]);
    return;
  }
  const listener = c.listener;
  const initial = c.files.map((f, i) =>
    f.writer === 'renameOver' ? Buffer.concat([Buffer.from('v99999999\n'), Buffer.alloc(f.size - 10, 99999999 % 251)]) : pattern(f.size, i + 1),
  );
  /** What each still file holds now (a touch changes it). */
  const current = [...initial];
  let touches = 0;
  const written = Date.now();
  const dir = liveWorkdir(Object.fromEntries(initial.map((b, i) => [`f${i}`, b])));
  const beside = join(dir, 'beside');
  mkdirSync(beside);
  // The records directory: a 64 KiB tmpfs where mounting is allowed, else the disk (no fill then).
  const records = join(scratch(), 'records');
  mkdirSync(records, { mode: 0o700 });
  let small = false;
  if (c.smallDisk) {
    if (mountRefused === undefined) {
      const probe = join(scratch(), 'probe');
      mkdirSync(probe);
      mountRefused = mountTmpfs(probe, '16k');
      if (mountRefused === null) unmount(probe);
      else console.warn(`[live-capsule] the records disk is never filled here: ${mountRefused}`);
    }
    small = mountRefused === null && mountTmpfs(records, '64k') === null;
  }
  const fill = join(records, 'fill');
  const s = await serveLive(listener, dir, { trace: join(records, 'trace.jsonl') });
  const writers = await Promise.all(
    c.files.map((f, i) => (f.writer === 'still' ? null : startWriter(WRITERS[f.writer], join(dir, 'out', `f${i}`), join(beside, `f${i}`)))),
  );
  // A still file written at the start is settled (it streams, under a digest) after the racy margin
  // (counted from its writing: the server's start and the writers' took part of it). Only still
  // files settle: with none, the wait would change nothing.
  if (c.settleFirst && c.files.some((f) => f.writer === 'still')) await settledSince(written);
  let full = false;
  let reads200 = 0;
  let lists200 = 0;
  let cuts = 0;
  try {
    const check = (a: Answer, what: string, mayBeCut = false): boolean => {
      const label = `${what} (${a.status}, ${a.body.length}/${a.headers['content-length']}${full ? ', disk full' : ''}): ${s.stderr().slice(-1500)}`;
      if (a.status === 500 && full) {
        // Refused closed: the trace could not take the line, so no byte of the file left.
        expect(JSON.parse(a.body.toString()), label).toMatchObject({ error: 'io_error' });
        return false;
      }
      expect(a.status, label).toBe(200);
      if (what === 'listing') {
        expect(a.complete, label).toBe(true);
        return true;
      }
      expect(etagOf(a), label).toBeDefined();
      // Only a settled file changed while it streams is cut; a changing file is a snapshot, whole.
      if (!a.complete) {
        expect(mayBeCut, `cut: ${label}`).toBe(true);
        cuts++;
        return true;
      }
      expect(etagOf(a), label).toBe(sha256Hex(a.body));
      return true;
    };
    for (const op of c.ops) {
      if (op.op === 'fill' && small && !full) {
        try {
          execFileSync('dd', ['if=/dev/zero', `of=${fill}`, 'bs=4k'], { stdio: 'ignore' });
        } catch {
          // dd ends with ENOSPC: the disk is full
        }
        full = true;
      } else if (op.op === 'free' && full) {
        rmSync(fill);
        full = false;
      } else if (op.op === 'read') {
        const spec = c.files[op.file]!;
        const path = join(dir, 'out', `f${op.file}`);
        const touch = op.touch && spec.writer === 'still' && spec.size > 100;
        const before = current[op.file]!;
        const a = await stalledGet(s.target, `/resources/files/f${op.file}`, op.pauseAt ?? Infinity, async () => {
          if (touch) {
            // Nine bytes near the end, other than they were: a new version of the same size.
            const next = Buffer.from(before);
            next.write(`t${String(touches++).padStart(8, '0')}`, spec.size - 100, 'latin1');
            const fd = openSync(path, 'r+');
            writeSync(fd, next, spec.size - 100, 9, spec.size - 100);
            closeSync(fd);
            current[op.file] = next;
          }
          await new Promise((r) => setTimeout(r, 20));
        });
        if (check(a, `read of f${op.file} (${spec.writer}, ${spec.size}${touch ? ', touched' : ''})`, touch)) {
          reads200++;
          if (spec.writer === 'still') {
            // One version whole (the one before a touch, or after it), or a cut start of the one before.
            if (a.complete)
              expect(a.body.equals(before) || a.body.equals(current[op.file]!), `f${op.file}: a still file was served bytes it never held`).toBe(true);
            else expect(a.body.equals(before.subarray(0, a.body.length)), `f${op.file}: a cut body is not the start of the file`).toBe(true);
          } else {
            expect(heldBytes(spec, initial[op.file]!, a.body), `f${op.file}`).toBeNull();
          }
        }
      } else if (op.op === 'list') {
        const a = await stalledGet(s.target, '/resources/files');
        if (check(a, 'listing')) {
          lists200++;
          const { entries } = JSON.parse(a.body.toString()) as { entries: Array<{ path: string; size_bytes: number; sha256: string }> };
          for (const [i, spec] of c.files.entries()) {
            const e = entries.find((x) => x.path === `f${i}`);
            expect(e, `f${i} is listed`).toBeDefined();
            if (spec.writer === 'still') expect(e).toMatchObject({ size_bytes: spec.size, sha256: sha256Hex(current[i]!) });
            if (spec.writer === 'renameOver' || spec.writer === 'inPlace') expect(e!.size_bytes).toBe(spec.size);
            if (spec.writer === 'append') expect(e!.size_bytes).toBeGreaterThanOrEqual(spec.size);
          }
        }
      }
      expect(s.alive(), `the server died: ${s.stderr().slice(-2000)}`).toBe(true);
    }
    if (full) rmSync(fill);
    // Room (again): the next read is served.
    const last = await stalledGet(s.target, '/resources/files/f0');
    expect(last.status, s.stderr().slice(-1500)).toBe(200);
    reads200++;
  } finally {
    for (const w of writers) w?.kill('SIGKILL');
  }
  expect(await s.stop()).toEqual({ code: 0, signal: null });
  const events = parsedTrace(s.trace);
  const ok = (type: string) => events.filter((e) => e.event_type === type && e.outcome === 'ok').length;
  expect(ok('resource_read'), 'one ok line per 200 read').toBe(reads200);
  expect(ok('resource_list'), 'one ok line per 200 listing').toBe(lists200);
  // Every cut, and only a cut, is traced as undelivered.
  expect(events.filter((e) => e.event_type === 'response_undelivered').length, 'one response_undelivered per cut').toBe(cuts);
  expect(events.at(-1)!.event_type).toBe('session_end');
  if (small) unmount(records);
}

describe('a live capsule: files that change while they are served', () => {
  fuzzIt({
    name: 'live-capsule',
    file: import.meta.filename,
    runs: 4,
    timeoutMs: 180_000,
    // Every writer on both listeners (at once), read paused and not, with a listing and a full disk.
    examples: (): Array<[Case]> => [
      [
        {
          listener: 'both',
          settleFirst: true,
          smallDisk: true,
          files: WRITER_KINDS.map((writer, i) => ({ writer, size: SIZES[(i + 4) % SIZES.length]! })),
          ops: [
            ...WRITER_KINDS.map((_, file): Op => ({ op: 'read', file, pauseAt: 64 * KiB, touch: true })),
            { op: 'list' },
            { op: 'fill' },
            // Enough lines while full to fill the trace's last page: an append is cut short.
            ...[1, 2, 3].flatMap(() => WRITER_KINDS.map((_, file): Op => ({ op: 'read', file, pauseAt: null, touch: false }))),
            { op: 'list' },
            { op: 'free' },
            ...WRITER_KINDS.map((_, file): Op => ({ op: 'read', file, pauseAt: null, touch: false })),
          ],
        },
      ],
    ],
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
