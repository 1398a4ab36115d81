// `resource-plane records`: the sessions recorded under the records directory (id, start, end,
// size), and pruning the ended ones older than a duration. A trace is append-only, so a session
// is removed whole or not at all, and never while it may still be written: only a session whose
// trace ends with `session_end`, and that no process holds open, is ever pruned. The records
// directory is the operator's (outside every workdir), but its entries are still checked: a
// symlink or anything but a directory of one trace is left alone and reported.
import { closeSync, fstatSync, lstatSync, openSync, readdirSync, readlinkSync, readSync, renameSync, rmSync, rmdirSync, statSync, constants } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { recordsDirectory } from '../session/records-dir.js';

export interface RecordedSession {
  sessionId: string;
  /** The capsule's name (the manifest's `name`, from `session_start`), or null when the trace does not say. */
  capsule: string | null;
  /** The directory holding it: `<records>/<workdir digest>/<session id>`. */
  dir: string;
  /** The 16-hex digest of the workdir's real path it was served from. */
  workdir: string;
  startMs: number | null;
  /** `session_end`'s timestamp; null while the session runs, or if it died without one. */
  endMs: number | null;
  /** Why it ended (`stopped`, a signal), when it did. */
  endReason: string | null;
  bytes: number;
  /** A process has its trace open now: it is being written. */
  live: boolean;
}

/** Bytes read from each end of a trace to find its first and last line. */
const EDGE_BYTES = 256 * 1024;

function readEdge(fd: number, size: number, fromEnd: boolean): string {
  const n = Math.min(size, EDGE_BYTES);
  const buf = Buffer.alloc(n);
  readSync(fd, buf, 0, n, fromEnd ? size - n : 0);
  return buf.toString('utf8');
}

function parseLine(line: string | undefined): Record<string, unknown> | null {
  if (!line) return null;
  try {
    const v = JSON.parse(line) as unknown;
    return typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/**
 * Every trace file some process has open now (this user's processes: /proc/<pid>/fd), as the
 * (st_dev, st_ino) of the open file: a descriptor's link names the path the kernel resolved, which
 * is not the path this command built when the records directory is reached through a symlink.
 */
export function openTraces(): Set<string> {
  const open = new Set<string>();
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p));
  } catch {
    return open;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        // Only trace-named files are stat'ed (cheap to skip the rest); the identity is the inode's.
        if (!readlinkSync(`/proc/${pid}/fd/${fd}`).endsWith('/trace.jsonl')) continue;
        const st = statSync(`/proc/${pid}/fd/${fd}`);
        open.add(fileKey(st));
      } catch {
        // gone meanwhile
      }
    }
  }
  return open;
}

function fileKey(st: { dev: number; ino: number }): string {
  return `${st.dev}:${st.ino}`;
}

/** One session directory, or null when it is not one this command manages (a link, a stray file). */
function readSession(digestDir: string, workdir: string, sessionId: string, open: Set<string>): RecordedSession | null {
  const dir = join(digestDir, sessionId);
  const st = lstatSync(dir);
  if (!st.isDirectory()) return null;
  const trace = join(dir, 'trace.jsonl');
  let fd: number;
  try {
    // O_NOFOLLOW: a trace that is a link is not a trace this server wrote.
    fd = openSync(trace, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const tst = fstatSync(fd);
    if (!tst.isFile()) return null;
    const first = parseLine(readEdge(fd, tst.size, false).split('\n')[0]);
    const lines = readEdge(fd, tst.size, true)
      .split('\n')
      .filter((l) => l !== '');
    const last = parseLine(lines.at(-1));
    const ended = last?.event_type === 'session_end';
    return {
      sessionId,
      capsule: first?.event_type === 'session_start' && typeof first.capsule === 'string' ? first.capsule : null,
      dir,
      workdir,
      startMs: first?.event_type === 'session_start' && typeof first.timestamp === 'number' ? first.timestamp : null,
      endMs: ended && typeof last.timestamp === 'number' ? last.timestamp : null,
      endReason: ended && typeof last.reason === 'string' ? last.reason : null,
      bytes: tst.size,
      live: open.has(fileKey(tst)),
    };
  } finally {
    closeSync(fd);
  }
}

/** Every recorded session, oldest first. */
export function listSessions(root = recordsDirectory()): RecordedSession[] {
  const open = openTraces();
  const found: RecordedSession[] = [];
  let digests: string[];
  try {
    digests = readdirSync(root);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  for (const digest of digests) {
    const digestDir = join(root, digest);
    if (!/^[0-9a-f]{16}$/.test(digest) || !lstatSync(digestDir).isDirectory()) continue;
    for (const id of readdirSync(digestDir)) {
      // A session being pruned (renamed aside) is not listed.
      if (id.startsWith('.')) continue;
      const s = readSession(digestDir, digest, id, open);
      if (s) found.push(s);
    }
  }
  return found.sort((a, b) => (a.startMs ?? 0) - (b.startMs ?? 0));
}

export interface Pruned {
  removed: RecordedSession[];
  /** Old enough, but not removable: running (its trace open) or never ended. */
  kept: Array<{ session: RecordedSession; why: string }>;
}

/**
 * Removes the sessions that ended more than `olderThanMs` before `now`: never one whose trace a
 * process holds, never one without `session_end` (it may be running, or died mid-write: an
 * operator decides). With `dryRun`, says what it would remove and removes nothing.
 *
 * A session id may be reused (`serve --session-id`): a new launch then appends to a trace that
 * still ends with the old `session_end`. So the check and the removal must not race: the session's
 * directory is first renamed aside (a launch that opens the trace by path from then on makes a new
 * one), then the open traces are read again, and a trace some process opened before the rename is
 * put back and kept. `beforeRemove` runs between the first check and the rename (tests).
 */
export function pruneSessions(
  olderThanMs: number,
  opts: { root?: string; now?: number; dryRun?: boolean; beforeRemove?: (s: RecordedSession) => void } = {},
): Pruned {
  const now = opts.now ?? Date.now();
  const result: Pruned = { removed: [], kept: [] };
  const live = (s: RecordedSession) => result.kept.push({ session: s, why: 'live: a process has its trace open' });
  for (const s of listSessions(opts.root)) {
    const age = s.endMs === null ? null : now - s.endMs;
    if (s.live) {
      if (s.startMs !== null && now - s.startMs > olderThanMs) live(s);
      continue;
    }
    if (age === null) {
      if (s.startMs !== null && now - s.startMs > olderThanMs)
        result.kept.push({ session: s, why: 'it has no session_end (still running, or it died): remove it yourself if it is over' });
      continue;
    }
    if (age <= olderThanMs) continue;
    if (!opts.dryRun) {
      opts.beforeRemove?.(s);
      const aside = join(dirname(s.dir), `.pruning-${basename(s.dir)}-${process.pid}`);
      try {
        renameSync(s.dir, aside);
      } catch {
        continue; // gone or replaced meanwhile: not this run's to remove
      }
      let taken: boolean;
      try {
        taken = openTraces().has(fileKey(lstatSync(join(aside, 'trace.jsonl'))));
      } catch {
        taken = true;
      }
      if (taken) {
        try {
          renameSync(aside, s.dir);
        } catch {
          // A launch made the directory anew meanwhile: the held trace stays aside, reported.
          result.kept.push({ session: { ...s, dir: aside }, why: `live: a process opened its trace while it was being pruned (left at ${aside})` });
          continue;
        }
        live(s);
        continue;
      }
      rmSync(aside, { recursive: true });
      try {
        rmdirSync(dirname(s.dir));
      } catch {
        // other sessions of the same workdir remain
      }
    }
    result.removed.push(s);
  }
  return result;
}
