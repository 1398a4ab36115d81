// A live workdir (SPEC section 10, issue 36): the capsule keeps writing while the server reads. Each
// test runs the real `serve` command (so a crash is a dead process, not a failed assertion inside
// one) on every kind of listener a deployment uses: TCP, a unix socket, and a socket handed over by
// systemd. Writers are other processes. What must hold:
//  - a settled file changed while it streams is cut (reset on TCP, destroyed on a unix socket),
//    the process lives, the cut is traced as undelivered, the next request is served, and the
//    session still ends with session_end;
//  - a file rewritten in place in a tight loop, or a log that keeps growing, is served (a snapshot
//    or its first `size` bytes), every body under an etag equal to its sha256;
//  - a trace whose disk fills is never torn: every line parses, every delivered body has its line,
//    and serving resumes once there is room.
import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defer } from '../helpers/cleanup.js';
import { startServe } from '../helpers/cli.js';
import { sha256Hex } from '../helpers/http.js';
import {
  ACTIVATE,
  etagOf,
  liveWorkdir as workdir,
  mountTmpfs,
  parsedTrace,
  pattern,
  serveLive as serve,
  stalledGet,
  startWriter,
  targetOf,
  WRITERS,
  type Listener,
} from '../helpers/live.js';
import { scratch } from '../helpers/tree.js';

const MiB = 1024 * 1024;
/** Past the racy margin (native/digest_cache.h, 2 s): a file this old is settled, and streams. */
const SETTLE_MS = 2_300;

const LISTENERS: Listener[] = ['tcp', 'unix', 'systemd'];

describe.each(LISTENERS)('a live workdir over %s', (kind) => {
  const skip = kind === 'systemd' && !existsSync(ACTIVATE);

  it.skipIf(skip)('a settled file changed while it streams: the body is cut, the process lives, the cut is traced, the next read is served', async () => {
    const BODY = 8 * MiB;
    const dir = workdir({ 'big.bin': pattern(BODY, 7), 'small.txt': 'still here' });
    const written = Date.now();
    const s = await serve(kind, dir);
    await new Promise((r) => setTimeout(r, Math.max(0, written + SETTLE_MS - Date.now())));
    const path = join(dir, 'out', 'big.bin');
    const cut = await stalledGet(s.target, '/resources/files/big.bin', MiB, () => {
      const fd = openSync(path, 'r+');
      writeSync(fd, Buffer.from('rewritten'), 0, 9, BODY - 100);
      closeSync(fd);
    });
    expect(cut.status, s.stderr()).toBe(200);
    expect(cut.headers.etag).toBe(`"sha256:${sha256Hex(pattern(BODY, 7))}"`);
    expect(cut.complete, `${cut.body.length} of ${cut.headers['content-length']} bytes`).toBe(false);
    expect(cut.body.equals(pattern(BODY, 7).subarray(0, cut.body.length))).toBe(true);
    // The process lives, and serves the next request.
    const next = await stalledGet(s.target, '/resources/files/small.txt');
    expect(next.status, s.stderr()).toBe(200);
    expect(next.body.toString()).toBe('still here');
    expect(s.alive()).toBe(true);
    // It stops as it should: session_end is the last line, after the undelivered one.
    expect(await s.stop()).toEqual({ code: 0, signal: null });
    const trace = parsedTrace(s.trace);
    const undelivered = trace.find((e) => e.event_type === 'response_undelivered');
    expect(undelivered).toMatchObject({
      of: 'resource_read',
      path: 'big.bin',
      outcome: 'undelivered',
      bytes: BODY,
      reason: 'the file changed while it was sent',
    });
    expect(trace.at(-1)!.event_type).toBe('session_end');
  });

  it.skipIf(skip || kind === 'systemd')('a 1 MiB file rewritten in place in a tight loop is served, every body under its own etag', async () => {
    const dir = workdir({ 'report.bin': Buffer.alloc(MiB, 64) });
    const s = await serve(kind, dir);
    await startWriter(WRITERS.inPlace, join(dir, 'out', 'report.bin'));
    let served = 0;
    const torn = new Set<string>();
    for (let i = 0; i < 120; i++) {
      const a = await stalledGet(s.target, '/resources/files/report.bin');
      if (a.status !== 200) continue;
      // No complete body ever differs from its etag, and none is longer than the file.
      expect(a.complete).toBe(true);
      expect(etagOf(a)).toBe(sha256Hex(a.body));
      expect(a.body.length).toBe(MiB);
      served++;
      if (new Set(a.body).size > 1) torn.add(a.headers.etag!);
    }
    expect(served, s.stderr()).toBeGreaterThanOrEqual(114);
    expect(s.alive()).toBe(true);
    await s.stop();
    const reads = parsedTrace(s.trace).filter((e) => e.event_type === 'resource_read' && e.outcome === 'ok');
    expect(reads.length).toBe(served);
  });

  it.skipIf(skip || kind === 'systemd')('a 2 MiB log appended every few ms is served: each body is the log as it was, whole', async () => {
    const before = pattern(2 * MiB, 3);
    const dir = workdir({ 'agent.log': before });
    const s = await serve(kind, dir);
    await startWriter(WRITERS.append, join(dir, 'out', 'agent.log'));
    let served = 0;
    let grew = 0;
    for (let i = 0; i < 20; i++) {
      const a = await stalledGet(s.target, '/resources/files/agent.log');
      if (a.status !== 200) continue;
      expect(a.complete).toBe(true);
      expect(etagOf(a)).toBe(sha256Hex(a.body));
      expect(a.body.subarray(0, before.length).equals(before)).toBe(true);
      served++;
      if (a.body.length > before.length) grew++;
    }
    expect(served, s.stderr()).toBeGreaterThanOrEqual(19);
    // The writer ran meanwhile: later bodies hold what it appended.
    expect(grew).toBeGreaterThan(0);
    expect(s.alive()).toBe(true);
  });
});

describe('a trace whose disk fills', () => {
  it('is never torn: no body leaves unrecorded, every line parses, and serving resumes once there is room', async (ctx) => {
    const dir = workdir({ 'a.txt': 'served while the disk is full, or refused' });
    const records = join(scratch(), 'records');
    mkdirSync(records, { mode: 0o700 });
    const refused = mountTmpfs(records, '64k');
    if (refused) return ctx.skip(refused);
    const trace = join(records, 'trace.jsonl');
    const s = await startServe(['--workdir', dir, '--trace', trace]);
    defer(async () => {
      if (s.child.exitCode === null) s.child.kill('SIGKILL');
      await s.exited;
    });
    const target = targetOf(s.ready.url);
    let delivered = 0;
    const read = async () => {
      const a = await stalledGet(target, '/resources/files/a.txt');
      if (a.status === 200) {
        expect(a.complete).toBe(true);
        delivered++;
        return 'ok';
      }
      // Refused closed: no file byte in it.
      expect(a.status).toBe(500);
      expect(JSON.parse(a.body.toString())).toEqual({ error: 'io_error', message: 'read failed: the trace could not be written' });
      return 'refused';
    };
    for (let i = 0; i < 5; i++) expect(await read(), `before: ${s.stderr()}`).toBe('ok');
    // Another process fills the disk; the trace's last page still has room for a few lines.
    const fill = join(records, 'fill');
    try {
      execFileSync('dd', ['if=/dev/zero', `of=${fill}`, 'bs=4k'], { stdio: 'ignore' });
    } catch {
      // dd ends with ENOSPC: the disk is full
    }
    const whileFull: string[] = [];
    for (let i = 0; i < 60; i++) whileFull.push(await read());
    expect(whileFull).toContain('refused');
    // Room again: serving resumes by itself.
    rmSync(fill);
    for (let i = 0; i < 5; i++) expect(await read(), `after: ${s.stderr().slice(-2000)}`).toBe('ok');
    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    const events = parsedTrace(trace);
    const ok = events.filter((e) => e.event_type === 'resource_read' && e.outcome === 'ok');
    expect(ok.length).toBe(delivered);
    expect(events.at(-1)!.event_type).toBe('session_end');
  });
});
