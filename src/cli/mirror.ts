// `resource-plane mirror <url> <dir>`: makes <dir> equal to the operator plane's export, and proves
// it. One listing (its etag checked against its bytes when the server sends one); then, for each
// listed file whose sha256 differs from what <dir> holds, one GET whose body is accepted only when
// its etag is the listed digest and the bytes hash to it (src/response-body.ts, the reader `get`
// and fetch-peer-file share), written to an exclusive temporary file in the file's directory,
// fsync'd and renamed into place. A file whose etag is not the listed digest changed after the
// listing: it is asked for again a bounded number of times, then reported, never saved. Local
// files the export no longer has are removed only with --delete.
// The server is not trusted: a listed name is used only when it is a relative path of plain
// components, and everything is written beneath <dir>'s descriptor without following a symlink
// (src/cli/local-tree.ts); every text of its reaches the terminal through `printable`. The URL
// forms, headers, refusals and exit statuses are ls's and get's own (src/cli/client.ts, download.ts).
// Why this file is long: the one verified transfer (list, compare, get, retry, place, delete)
// reads best whole; what it writes locally is local-tree.ts's.
import type { FileHandle } from 'node:fs/promises';
import {
  announcedLength,
  base,
  checkListing,
  connect,
  getRaw,
  printable,
  printableJson,
  refusal,
  refusedBy,
  type Connection,
  type Listing,
  type Origin,
} from './client.js';
import { getFailure, writeAll } from './download.js';
import { ClientError, EXIT_STATUS, type ClientFailure } from './exit.js';
import { LocalTree, NotADirectory, type HeldDir } from './local-tree.js';
import { BodyFailure, readVerifiedBody } from '../response-body.js';
import { parseEtag } from '../wire.js';
import { CHANGED_ATTEMPTS, DEFAULT_JOBS, GET_MAX_BYTES, LIST_MAX_BYTES, MAX_JOBS } from '../limits.js';

/** The pause before asking again for a file that changed, times the attempt. */
const CHANGED_BACKOFF_MS = 100;
const NAME_MAX = 255;
const PATH_MAX = 4096;
const SHA256 = /^[0-9a-f]{64}$/;

/** Told how a mirror advances, one tick per listed file; the CLI draws a bar with it on a terminal. */
export interface MirrorProgress {
  start(total: number): void;
  tick(): void;
  stop(): void;
}

export interface MirrorOptions {
  /** Remove local files (and emptied directories) the export does not have. */
  delete?: boolean;
  /** Connections at once, 1 to MAX_JOBS; default DEFAULT_JOBS. */
  jobs?: number;
  headers?: Record<string, string>;
  /** The largest file saved (as get's --max-bytes); default GET_MAX_BYTES. */
  maxBytes?: number;
  /** The largest listing read (as ls's --max-bytes); default LIST_MAX_BYTES. */
  listingMaxBytes?: number;
  progress?: MirrorProgress | null;
  /** Aborting it stops every download; no partial file is left, and what was placed stays. */
  signal?: AbortSignal;
}

/** One listed file that <dir> does not hold as listed, and why; `path` is the server's text, unfiltered. */
export interface MirrorFailure {
  path: string;
  kind: ClientFailure;
  /** Already printable. */
  message: string;
}

export interface MirrorSummary {
  listed: number;
  upToDate: number;
  fetched: number;
  fetchedBytes: number;
  /** GET requests sent for files (retries included). */
  requests: number;
  /** Local entries removed (--delete), or, without it, local files the export does not have. */
  deleted: number;
  extra: number;
  /** In listing order. */
  failures: MirrorFailure[];
}

/** 0 when <dir> holds the export; else the status (docs/cli.md) of the first file that failed. */
export function mirrorExitStatus(summary: MirrorSummary): number {
  const first = summary.failures[0];
  return first === undefined ? 0 : EXIT_STATUS[first.kind];
}

/** The summary as one line for a person, or with `json` as one line of JSON (paths escaped as ls --json does). */
export function renderSummary(summary: MirrorSummary, json: boolean, deleted: boolean): string {
  if (json) {
    const value = {
      listed: summary.listed,
      up_to_date: summary.upToDate,
      fetched: summary.fetched,
      fetched_bytes: summary.fetchedBytes,
      requests: summary.requests,
      deleted: summary.deleted,
      extra_kept: summary.extra,
      failed: summary.failures.map((f) => ({ path: f.path, exit_status: EXIT_STATUS[f.kind], error: f.message })),
    };
    return `${printableJson(JSON.stringify(value))}\n`;
  }
  const extra = !deleted && summary.extra > 0 ? `; ${summary.extra} local file(s) the export does not have kept (--delete removes them)` : '';
  return `mirror: ${summary.listed} listed, ${summary.upToDate} up to date, ${summary.fetched} fetched (${summary.fetchedBytes} bytes), ${summary.deleted} deleted, ${summary.failures.length} failed${extra}\n`;
}

/**
 * The components of a listed path when it names a place inside <dir>: relative, `/`-separated,
 * none empty, `.` or `..`, no NUL, well-formed Unicode (a lone surrogate has no UTF-8 name), each
 * within NAME_MAX bytes and the whole within PATH_MAX. Null otherwise: the server's name is never
 * normalised into something else.
 */
export function safeComponents(path: string): string[] | null {
  if (path === '' || !path.isWellFormed() || path.includes('\0') || Buffer.byteLength(path) > PATH_MAX) return null;
  const parts = path.split('/');
  for (const part of parts) {
    if (part === '' || part === '.' || part === '..' || Buffer.byteLength(part) > NAME_MAX) return null;
  }
  return parts;
}

type Entry = Listing['entries'][number];

/** The listing, read once and checked: its etag (when sent) names its bytes, and its shape is ls's. */
async function readListing(origin: Origin, maxBytes: number): Promise<Listing> {
  const res = await getRaw(origin, '/resources/files', maxBytes, 'mirror', true);
  if (res.statusCode !== 200) throw refusal(res.statusCode, res.body);
  let parsed: unknown;
  try {
    parsed = JSON.parse(res.body.toString('utf8'));
  } catch {
    throw new ClientError(`${origin.shown} answered 200 with a listing that is not JSON; nothing was changed`, 'unverified');
  }
  return checkListing(parsed);
}

/** A worker's connection, replaced after anything that may leave it mid-response. */
class Line {
  private current: Connection | null = null;
  constructor(private readonly origin: Origin) {}
  get(): Connection {
    return (this.current ??= connect(this.origin));
  }
  async reset(): Promise<void> {
    const c = this.current;
    this.current = null;
    await c?.close();
  }
}

interface Job {
  entry: Entry;
  parts: string[];
}

interface Run {
  origin: Origin;
  tree: LocalTree;
  maxBytes: number;
  signal?: AbortSignal;
  summary: MirrorSummary;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });

const interrupted = () => new ClientError('interrupted; files already placed are verified, and no partial file was left', 'unreachable');

/**
 * Fetches one listed file into place: GET, the etag must be the listed digest (else it changed
 * since the listing: asked again, then reported), the body must hash to it, then temp file, fsync,
 * rename. Returns the bytes placed.
 */
async function fetchInto(run: Run, line: Line, job: Job, dir: HeldDir): Promise<number> {
  const { entry } = job;
  const name = job.parts[job.parts.length - 1]!;
  const target = `/resources/files/${job.parts.map(encodeURIComponent).join('/')}`;
  for (let attempt = 1; ; attempt++) {
    if (run.signal?.aborted) throw interrupted();
    const res = await line
      .get()
      .get(target, run.signal)
      .catch(async (error: unknown) => {
        await line.reset();
        throw error;
      });
    run.summary.requests += 1;
    let keepLine = false;
    let temp: { name: string; file: FileHandle } | null = null;
    try {
      if (res.statusCode !== 200) throw await refusedBy(res);
      const etag = res.headers.etag;
      const named = parseEtag(etag);
      if (named === null) throw new ClientError(`etag ${printable(String(etag))} names no sha256 digest; nothing was saved`, 'unverified');
      if (named !== entry.sha256) {
        if (attempt >= CHANGED_ATTEMPTS) {
          throw new ClientError(
            `changed since the listing: ${attempt} GETs answered an etag other than the listed sha256:${entry.sha256} (last ${printable(String(etag))}); not saved`,
            'unverified',
          );
        }
        await line.reset();
        await sleep(CHANGED_BACKOFF_MS * attempt, run.signal);
        continue;
      }
      const length = announcedLength(res.headers);
      if (length !== null && length > run.maxBytes) {
        throw new ClientError(
          `the file is ${length} bytes, more than the ${run.maxBytes} mirror saves; pass --max-bytes to raise it; nothing was saved`,
          'too_large',
        );
      }
      try {
        temp = await run.tree.temp(dir);
      } catch (error) {
        throw new ClientError(`cannot save: ${(error as NodeJS.ErrnoException).code ?? 'error'}; nothing was saved`, 'local');
      }
      const spool = temp.file;
      let body: Awaited<ReturnType<typeof readVerifiedBody>>;
      try {
        body = await readVerifiedBody(res.body as AsyncIterable<Buffer>, {
          sha256: entry.sha256,
          maxBytes: run.maxBytes,
          length,
          sink: (chunk) => writeAll(spool, chunk),
        });
      } catch (error) {
        if (!(error instanceof BodyFailure)) throw error;
        if (run.signal?.aborted) throw interrupted();
        throw getFailure(error, { shown: run.origin.shown, etag, length, maxBytes: run.maxBytes, aborted: false, verb: 'mirror' });
      }
      try {
        await spool.sync();
        await spool.close();
        run.tree.place(dir, temp.name, name);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code ?? 'error';
        throw new ClientError(
          `cannot save: ${code === 'EISDIR' || code === 'ENOTEMPTY' || code === 'EEXIST' ? 'a directory holds its name' : code}; nothing was saved`,
          'local',
        );
      }
      temp = null;
      keepLine = true;
      return body.bytes;
    } finally {
      if (temp !== null) {
        await temp.file.close().catch(() => undefined);
        run.tree.discard(dir, temp.name);
      }
      if (!keepLine) await line.reset();
    }
  }
}

/** One listed file: already right (same digest), fetched into place, or a failure. */
async function mirrorOne(run: Run, line: Line, job: Job): Promise<MirrorFailure | null> {
  const { entry, parts } = job;
  const fail = (error: unknown): MirrorFailure => {
    if (error instanceof ClientError) return { path: entry.path, kind: error.kind, message: error.message };
    if (error instanceof NotADirectory) return { path: entry.path, kind: 'local', message: `${printable(error.message)}; nothing was saved` };
    return {
      path: entry.path,
      kind: 'local',
      message: `cannot save: ${printable((error as NodeJS.ErrnoException).code ?? (error as Error).message)}; nothing was saved`,
    };
  };
  try {
    const dirs = parts.slice(0, -1);
    const held = run.tree.dir(dirs, false);
    if (held !== null) {
      let same: boolean;
      try {
        same = (await run.tree.digest(held, parts[parts.length - 1]!, entry.size_bytes, run.signal)) === entry.sha256;
      } finally {
        run.tree.release(held);
      }
      if (same) {
        run.summary.upToDate += 1;
        return null;
      }
    }
    if (run.signal?.aborted) throw interrupted();
    // Listed larger than it may be saved: refused without a GET (a body is still held to the limit
    // whatever the listing said).
    if (entry.size_bytes > run.maxBytes) {
      throw new ClientError(
        `the file is listed at ${entry.size_bytes} bytes, more than the ${run.maxBytes} mirror saves; pass --max-bytes to raise it; nothing was saved`,
        'too_large',
      );
    }
    const dir = run.tree.dir(dirs, true)!;
    let bytes: number;
    try {
      // Read after the await: `x += await f()` would add to the value x had before it, losing
      // what the other workers added meanwhile.
      bytes = await fetchInto(run, line, job, dir);
    } finally {
      run.tree.release(dir);
    }
    run.summary.fetchedBytes += bytes;
    run.summary.fetched += 1;
    return null;
  } catch (error) {
    if (run.signal?.aborted) throw interrupted();
    return fail(error);
  }
}

/**
 * Mirrors the export at `url` into `dir`. Resolves with what happened (failures included: the
 * caller exits by mirrorExitStatus); rejects with a ClientError when nothing could be compared
 * (a usage mistake, an unreachable server, a refused or malformed listing) or when interrupted.
 */
export async function mirror(url: string, dir: string, opts: MirrorOptions = {}): Promise<MirrorSummary> {
  const origin = base(url, 'mirror', opts.headers ?? {});
  const jobs = opts.jobs ?? DEFAULT_JOBS;
  if (!Number.isInteger(jobs) || jobs < 1 || jobs > MAX_JOBS) throw new ClientError(`--jobs must be a whole number from 1 to ${MAX_JOBS}`, 'usage');
  const listing = await readListing(origin, opts.listingMaxBytes ?? LIST_MAX_BYTES);
  let tree: LocalTree;
  try {
    tree = LocalTree.open(dir);
  } catch (error) {
    throw new ClientError(`cannot mirror into '${printable(dir)}': ${printable((error as NodeJS.ErrnoException).code ?? (error as Error).message)}`, 'local');
  }
  const summary: MirrorSummary = { listed: listing.entries.length, upToDate: 0, fetched: 0, fetchedBytes: 0, requests: 0, deleted: 0, extra: 0, failures: [] };
  const failures = new Map<number, MirrorFailure>();
  const queue: Array<Job & { index: number }> = [];
  const keep = new Set<string>();
  const keptDirs = new Set<string>();
  listing.entries.forEach((entry, index) => {
    const parts = safeComponents(entry.path);
    // Each reads after the CLI's `error: <path>: `.
    const why =
      parts === null
        ? 'the listing names no place inside the directory (absolute, empty, or with a `.`, `..` or empty component); skipped'
        : keep.has(entry.path)
          ? 'the listing names it twice; skipped'
          : !SHA256.test(entry.sha256)
            ? `its listed sha256 ${printable(entry.sha256)} is not 64 lowercase hex digits, so no body could be verified; skipped`
            : null;
    if (why !== null) {
      failures.set(index, { path: entry.path, kind: 'unverified', message: why });
      return;
    }
    keep.add(entry.path);
    for (let i = 1; i < parts!.length; i++) keptDirs.add(parts!.slice(0, i).join('/'));
    queue.push({ entry, parts: parts!, index });
  });
  const run: Run = { origin, tree, maxBytes: opts.maxBytes ?? GET_MAX_BYTES, signal: opts.signal, summary };
  const progress = opts.progress ?? null;
  try {
    // First what the export no longer has (with --delete): a stale file or symlink where the export
    // now has a directory is gone before anything is written there.
    try {
      const count = tree.prune(keep, keptDirs, opts.delete === true);
      if (opts.delete) summary.deleted = count;
      else summary.extra = count;
    } catch (error) {
      throw new ClientError(
        `cannot ${opts.delete ? 'delete in' : 'read'} '${printable(dir)}': ${printable((error as NodeJS.ErrnoException).code ?? (error as Error).message)}`,
        'local',
      );
    }
    progress?.start(listing.entries.length);
    for (let i = 0; i < failures.size; i++) progress?.tick();
    let next = 0;
    const worker = async () => {
      const line = new Line(origin);
      try {
        while (next < queue.length && !opts.signal?.aborted) {
          const job = queue[next++]!;
          const failure = await mirrorOne(run, line, job);
          if (failure !== null) failures.set(job.index, failure);
          progress?.tick();
        }
      } finally {
        await line.reset();
      }
    };
    const settled = await Promise.allSettled(Array.from({ length: Math.min(jobs, Math.max(queue.length, 1)) }, worker));
    if (opts.signal?.aborted) throw interrupted();
    const broken = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (broken) throw broken.reason;
  } finally {
    progress?.stop();
    tree.close();
  }
  summary.failures = [...failures.entries()].sort((a, b) => a[0] - b[0]).map(([, f]) => f);
  return summary;
}
