// `resource-plane records`: the sessions under the records directory, and pruning the ended ones
// older than a duration, never one still being written (its trace open) nor one that never wrote
// session_end. Real sessions of the real command, in a records directory of the test's own.
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { pruneSessions } from '../../src/cli/records-tool.js';
import { landlockAbi } from '../../src/addon/landlock.js';
import { defer } from '../helpers/cleanup.js';
import { CLI, runCli, startServe } from '../helpers/cli.js';
import { spawn } from 'node:child_process';
import { scratch } from '../helpers/tree.js';

function capsuleDir(base: string, name: string): string {
  const workdir = join(base, name);
  mkdirSync(join(workdir, 'out'), { recursive: true });
  writeFileSync(join(workdir, 'murmur.yaml'), `name: ${name}\nversion: "1"\nexports:\n  files: { root: out/, mode: read-only }\n`);
  return workdir;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('records', () => {
  it('lists each session with its start, end and size; prunes only the ended, never the live or the unended', async () => {
    const base = scratch([]);
    const records = join(base, 'records');
    const env = { RESOURCE_PLANE_RECORDS_DIR: records };
    // One session that ended, one still running.
    const ended = await startServe(['--workdir', capsuleDir(base, 'a'), '--session-id', 'ses_ended'], env);
    ended.child.kill('SIGTERM');
    await ended.exited;
    const live = await startServe(['--workdir', capsuleDir(base, 'b'), '--session-id', 'ses_live'], env);
    try {
      // And one that died without session_end (as after kill -KILL), its trace closed.
      const dead = join(records, '0123456789abcdef', 'ses_dead');
      mkdirSync(dead, { recursive: true });
      writeFileSync(
        join(dead, 'trace.jsonl'),
        `${JSON.stringify({ event_type: 'session_start', timestamp: Date.now() - 86_400_000, session_id: 'ses_dead' })}\n`,
      );

      const listed = runCli(['records', '--json'], env);
      expect(listed.status, listed.stderr).toBe(0);
      const rows = listed.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      const byId = Object.fromEntries(rows.map((r) => [r.session_id, r]));
      expect(Object.keys(byId).sort()).toEqual(['ses_dead', 'ses_ended', 'ses_live']);
      expect(byId.ses_ended).toMatchObject({ live: false, end_reason: 'SIGTERM' });
      expect(byId.ses_ended.end_ms).toBeGreaterThanOrEqual(byId.ses_ended.start_ms);
      expect(byId.ses_ended.bytes).toBeGreaterThan(0);
      expect(byId.ses_live).toMatchObject({ live: true, end_ms: null });
      expect(byId.ses_dead).toMatchObject({ live: false, end_ms: null });
      const table = runCli(['records'], env);
      expect(table.stdout.split('\n')[0]).toMatch(/^SESSION\s+CAPSULE\s+START\s+END\s+SIZE$/);
      // The capsule's name beside each id (the manifest's name: a, b; '-' where the trace does not say).
      expect(table.stdout).toMatch(/^ses_live\s+b\s.*\slive\s/m);
      expect(table.stdout).toMatch(/^ses_ended\s+a\s/m);
      expect(table.stdout).toMatch(/^ses_dead\s+-\s/m);
      expect(byId.ses_ended.capsule).toBe('a');

      // Nothing has ended an hour ago: a prune removes nothing, and says so (on stderr: stdout is the list).
      const none = runCli(['records', '--prune', '1h'], env);
      expect(none.stdout).toBe('');
      expect(none.stderr).toContain(`nothing to prune: no session under ${records} ended more than 1h ago`);
      await sleep(1_100);
      const dry = runCli(['records', '--prune', '1s', '--dry-run'], env);
      expect(dry.stdout).toMatch(/^would remove ses_ended /);
      expect(existsSync(byId.ses_ended.dir)).toBe(true);
      const pruned = runCli(['records', '--prune', '1s'], env);
      expect(pruned.status, pruned.stderr).toBe(0);
      expect(pruned.stdout).toMatch(/^removed ses_ended \(a, ended /);
      expect(pruned.stderr).not.toContain('nothing to prune');
      expect(pruned.stderr).toContain('kept ses_live: live: a process has its trace open');
      expect(pruned.stderr).toContain('kept ses_dead: it has no session_end');
      expect(existsSync(byId.ses_ended.dir)).toBe(false);
      expect(existsSync(byId.ses_live.dir)).toBe(true);
      expect(existsSync(dead)).toBe(true);
      // The workdir's digest directory went with its last session.
      expect(readdirSync(records).length).toBe(2);
    } finally {
      live.child.kill('SIGTERM');
      await live.exited;
    }
  });

  it('refuses a duration it cannot read, and --dry-run without --prune', () => {
    const env = { RESOURCE_PLANE_RECORDS_DIR: join(scratch([]), 'none') };
    const bad = runCli(['records', '--prune', '30 days'], env);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--prune must be a duration like 30d, 12h or 90m (got '30 days')");
    expect(runCli(['records', '--dry-run'], env).status).toBe(2);
    const empty = runCli(['records'], env);
    expect(empty.status).toBe(0);
    expect(empty.stderr).toContain('no sessions under');
  });
});

describe('records and a session that is still being written', () => {
  it('sees a live session through a symlinked records directory (the trace compared by device and inode)', async () => {
    const base = scratch([]);
    mkdirSync(join(base, 'real-records'));
    symlinkSync(join(base, 'real-records'), join(base, 'records'));
    const env = { RESOURCE_PLANE_RECORDS_DIR: join(base, 'records') };
    const live = await startServe(['--workdir', capsuleDir(base, 'c'), '--session-id', 'ses_through_link'], env);
    defer(async () => {
      live.child.kill('SIGTERM');
      await live.exited;
    });
    const listed = runCli(['records', '--json'], env);
    expect(listed.status, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout.trim())).toMatchObject({ session_id: 'ses_through_link', capsule: 'c', live: true });
  });

  it('a trace opened between the check and the removal is put back and kept, never removed', () => {
    const root = join(scratch([]), 'records');
    const dir = join(root, '0123456789abcdef', 'ses_reused');
    mkdirSync(dir, { recursive: true });
    const t = Date.now() - 86_400_000;
    writeFileSync(
      join(dir, 'trace.jsonl'),
      `${[
        { event_type: 'session_start', timestamp: t },
        { event_type: 'session_end', timestamp: t + 1, reason: 'stopped' },
      ]
        .map((l) => JSON.stringify(l))
        .join('\n')}\n`,
    );
    let held: number | null = null;
    // A new launch reusing the id opens the trace just after prune judged it ended and unheld.
    const result = pruneSessions(3_600_000, { root, beforeRemove: (s) => (held = openSync(join(s.dir, 'trace.jsonl'), 'a')) });
    try {
      expect(held).not.toBeNull();
      expect(result.removed).toEqual([]);
      expect(result.kept.map((k) => [k.session.sessionId, k.why])).toEqual([['ses_reused', 'live: a process has its trace open']]);
      expect(readdirSync(join(root, '0123456789abcdef'))).toEqual(['ses_reused']);
      expect(readFileSync(join(dir, 'trace.jsonl'), 'utf8')).toContain('session_end');
    } finally {
      if (held !== null) closeSync(held);
    }
    // Once nobody holds it, it goes.
    expect(pruneSessions(3_600_000, { root }).removed.map((s) => s.sessionId)).toEqual(['ses_reused']);
  });

  it.skipIf(landlockAbi().abi === 0)('a reused --session-id is not prunable while a confined launch takes it over (between its two stages)', async () => {
    const base = scratch([]);
    const records = join(base, 'records');
    const env = { RESOURCE_PLANE_RECORDS_DIR: records };
    const workdir = capsuleDir(base, 'd');
    const first = await startServe(['--workdir', workdir, '--session-id', 'ses_again'], env);
    first.child.kill('SIGTERM');
    await first.exited;
    const trace = first.ready.trace;
    expect(readFileSync(trace, 'utf8').trim().split('\n').at(-1)).toContain('"session_end"');

    // The second launch of the same id stops between its first stage (trace made, Landlock
    // applied) and the re-exec, where no session of this process has the trace open yet.
    const go = join(base, 'go');
    const child = spawn(process.execPath, [CLI, 'serve', '--workdir', workdir, '--session-id', 'ses_again'], {
      env: { ...process.env, ...env, RESOURCE_PLANE_TEST_PAUSE_BEFORE_EXEC: go },
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    defer(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    });
    while (!err.includes('paused_before_exec') && child.exitCode === null) await new Promise((r) => setTimeout(r, 10));
    expect(err).toContain('paused_before_exec');

    await sleep(1_100); // the first session ended more than the shortest duration (1s) ago
    const pruned = runCli(['records', '--prune', '1s'], env);
    expect(pruned.stdout).toBe('');
    expect(pruned.stderr).toContain('kept ses_again: live: a process has its trace open');
    expect(existsSync(trace)).toBe(true);

    writeFileSync(go, '');
    while (!out.includes('\n') && child.exitCode === null) await new Promise((r) => setTimeout(r, 10));
    expect(JSON.parse(out.split('\n')[0]!)).toMatchObject({ session_id: 'ses_again', trace });
    // The record holds both sessions: the first one's end, then the second one's start.
    const kinds = readFileSync(trace, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).event_type);
    expect(kinds.filter((k) => k === 'session_start')).toHaveLength(2);
    expect(kinds.indexOf('session_end')).toBeLessThan(kinds.lastIndexOf('session_start'));
  });
});

describe("the trace's growth under refusals", () => {
  it('--refusal-trace-rate bounds how many refusals are traced one by one; the rest are summarised', async () => {
    const base = scratch([]);
    const trace = join(base, 'trace.jsonl');
    const s = await startServe(['--workdir', capsuleDir(base, 'e'), '--trace', trace, '--no-landlock', '--refusal-trace-rate', '0'], {});
    for (let i = 0; i < 30; i++) expect((await fetch(`${s.ready.url}/resources/files/missing-${i}.txt`)).status).toBe(404);
    s.child.kill('SIGTERM');
    await s.exited;
    const events = readFileSync(trace, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event_type: string; suppressed?: number });
    // Rate 0: not one refusal line, and every one of them counted in the summaries.
    expect(events.filter((e) => e.event_type === 'resource_read')).toEqual([]);
    expect(events.filter((e) => e.event_type === 'refusals_suppressed').reduce((n, e) => n + (e.suppressed ?? 0), 0)).toBe(30);
    expect(events.at(-1)!.event_type).toBe('session_end');
  });

  it('refuses a rate that is not a whole number of refusals per second', () => {
    const r = runCli(['serve', '--workdir', join(scratch([]), 'none'), '--refusal-trace-rate', '1.5']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("--refusal-trace-rate must be a whole number of refusals per second, 0 to 100000 (got '1.5')");
  });
});
