// `resource-plane records`: the sessions under the records directory, and pruning the ended ones
// older than a duration, never one still being written (its trace open) nor one that never wrote
// session_end. Real sessions of the real command, in a records directory of the test's own.
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli, startServe } from '../helpers/cli.js';
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
      writeFileSync(join(dead, 'trace.jsonl'), `${JSON.stringify({ event_type: 'session_start', timestamp: Date.now() - 86_400_000, session_id: 'ses_dead' })}\n`);

      const listed = runCli(['records', '--json'], env);
      expect(listed.status, listed.stderr).toBe(0);
      const rows = listed.stdout.trim().split('\n').map((l) => JSON.parse(l));
      const byId = Object.fromEntries(rows.map((r) => [r.session_id, r]));
      expect(Object.keys(byId).sort()).toEqual(['ses_dead', 'ses_ended', 'ses_live']);
      expect(byId.ses_ended).toMatchObject({ live: false, end_reason: 'SIGTERM' });
      expect(byId.ses_ended.end_ms).toBeGreaterThanOrEqual(byId.ses_ended.start_ms);
      expect(byId.ses_ended.bytes).toBeGreaterThan(0);
      expect(byId.ses_live).toMatchObject({ live: true, end_ms: null });
      expect(byId.ses_dead).toMatchObject({ live: false, end_ms: null });
      const table = runCli(['records'], env);
      expect(table.stdout.split('\n')[0]).toMatch(/^SESSION\s+START\s+END\s+SIZE$/);
      expect(table.stdout).toMatch(/^ses_live\s.*\slive\s/m);

      // Nothing has ended an hour ago: a dry run and a real prune remove nothing.
      expect(runCli(['records', '--prune', '1h'], env).stdout).toBe('');
      await sleep(1_100);
      const dry = runCli(['records', '--prune', '1s', '--dry-run'], env);
      expect(dry.stdout).toMatch(/^would remove ses_ended /);
      expect(existsSync(byId.ses_ended.dir)).toBe(true);
      const pruned = runCli(['records', '--prune', '1s'], env);
      expect(pruned.status, pruned.stderr).toBe(0);
      expect(pruned.stdout).toMatch(/^removed ses_ended /);
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
