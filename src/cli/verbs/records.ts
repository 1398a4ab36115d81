// `records`: the sessions in the records directory, listed or pruned (the reading and the pruning
// are cli/records-tool.ts; the directory and session ids, session/records-dir.ts).
import type { Command } from 'commander';
import { UsageError } from '../../codes.js';
import { parseDuration } from '../../manifest/grammars.js';
import { fail, humanBytes, PROGRAM, shortErrors } from '../common.js';

async function recordsCommand(flags: { json?: boolean; prune?: string; dryRun?: boolean }): Promise<void> {
  const { listSessions, pruneSessions } = await import('../records-tool.js');
  const { recordsDirectory } = await import('../../session/records-dir.js');
  const when = (ms: number | null) => (ms === null ? '-' : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'));
  // The name comes from a manifest the capsule may have written: shown with its controls escaped.
  const { printable } = await import('../client.js');
  const nameOf = (s: import('../records-tool.js').RecordedSession) => (s.capsule === null ? '-' : printable(s.capsule));
  if (flags.prune === undefined) {
    if (flags.dryRun) throw new UsageError('--dry-run goes with --prune');
    const sessions = listSessions();
    const width = Math.max('CAPSULE'.length, ...sessions.map((s) => nameOf(s).length));
    const row = (s: import('../records-tool.js').RecordedSession) =>
      flags.json
        ? JSON.stringify({
            session_id: s.sessionId,
            capsule: s.capsule,
            workdir_digest: s.workdir,
            start_ms: s.startMs,
            end_ms: s.endMs,
            end_reason: s.endReason,
            bytes: s.bytes,
            live: s.live,
            dir: s.dir,
          })
        : `${s.sessionId.padEnd(36)}  ${nameOf(s).padEnd(width)}  ${when(s.startMs).padEnd(20)}  ${(s.live ? 'live' : when(s.endMs)).padEnd(20)}  ${humanBytes(s.bytes).padStart(9)}`;
    if (!flags.json)
      process.stdout.write(`${'SESSION'.padEnd(36)}  ${'CAPSULE'.padEnd(width)}  ${'START'.padEnd(20)}  ${'END'.padEnd(20)}  ${'SIZE'.padStart(9)}\n`);
    for (const s of sessions) process.stdout.write(`${row(s)}\n`);
    if (!flags.json && sessions.length === 0) process.stderr.write(`no sessions under ${recordsDirectory()}\n`);
    return;
  }
  const seconds = parseDuration(flags.prune);
  if (seconds === null) throw new UsageError(`--prune must be a duration like 30d, 12h or 90m (got '${flags.prune}')`);
  const { removed, kept } = pruneSessions(seconds * 1000, { dryRun: flags.dryRun === true });
  const verb = flags.dryRun ? 'would remove' : 'removed';
  for (const s of removed)
    process.stdout.write(
      flags.json
        ? `${JSON.stringify({ [verb.replace(' ', '_')]: s.sessionId, capsule: s.capsule, dir: s.dir, bytes: s.bytes })}\n`
        : `${verb} ${s.sessionId} (${nameOf(s)}, ended ${when(s.endMs)}, ${humanBytes(s.bytes)})\n`,
    );
  // Silence would read as "did it run?": said on stderr, like the kept ones, so stdout stays the list.
  if (removed.length === 0) process.stderr.write(`nothing to prune: no session under ${recordsDirectory()} ended more than ${flags.prune} ago\n`);
  for (const { session, why } of kept) process.stderr.write(`kept ${session.sessionId}: ${why}\n`);
}

/** The `records` verb, on the command `cmd`. */
export function register(cmd: Command): void {
  const records = cmd
    .command('records')
    .description("list the sessions in the records directory (id, the capsule's name, start, end, size), or prune the ended ones")
    .option('--json', 'one JSON line per session')
    .option('--prune <duration>', 'remove the sessions that ended longer ago than this, e.g. 30d (never a live one, never one without session_end)')
    .option('--dry-run', 'with --prune: print what would be removed, remove nothing')
    .addHelpText(
      'after',
      `
The records directory is RESOURCE_PLANE_RECORDS_DIR, else ~/.murmur/records. A trace is
append-only: a session is removed whole, and only once it ended (session_end written) and no
process has its trace open.

Examples:
  ${PROGRAM} records
  ${PROGRAM} records --prune 30d --dry-run`,
    )
    .action(async (flags: { json?: boolean; prune?: string; dryRun?: boolean }) => {
      try {
        await recordsCommand(flags);
      } catch (error) {
        fail(error, 'records');
      }
    });
  shortErrors(records, 'records');
}
