// One declared export root seen through the resolver: the shared reader both planes and the mint
// use, so a path is judged by exactly one piece of code whichever door it came through. It lowers
// the path (src/paths.ts), calls the native resolver/reader, and turns every native failure into a
// neutral Refusal (src/codes.ts); the edge that answers renders it.
import type { MemoryBudget, Release } from './memory.js';
import { NATIVE_TO_CODE, asRefusal, Refusal } from '../codes.js';
import * as native from '../native.js';
import { lowerRelpath } from '../paths.js';
import type { Containment } from '../wire.js';

/**
 * Any failure of a native call, as a Refusal carrying the native detail (errno text, never a
 * path). Anything that is not a NativeError is an io_error whose text (which could carry a host
 * path) is not passed on: an unexpected exception fails closed.
 */
export function refusalFromNative(error: unknown): Refusal {
  if (error instanceof Refusal) return error;
  if (error instanceof native.NativeError) {
    return new Refusal(NATIVE_TO_CODE[error.code] ?? 'io_error', error.detail || error.code.toLowerCase());
  }
  return asRefusal(error);
}

/** How long one listing may run before it answers io_error saying so. */
export const DEFAULT_LISTING_BUDGET_MS = 30_000;
/** Listings of one root running at once; each holds a pool thread while it hashes. */
export const MAX_CONCURRENT_LISTINGS = 2;

export interface ExportViewOptions {
  /** The listing time budget; default DEFAULT_LISTING_BUDGET_MS. */
  listingBudgetMs?: number;
  /**
   * The workdir, asked for on every call rather than captured: once the session is closed a stale
   * view must fail, not follow whatever the getter held.
   */
  workdirFd: () => native.WorkdirRef;
  /** The declared root, verbatim (e.g. `out/`); resolved beneath the workdir on every call. */
  root: string;
  maxBytes: number;
  containment: Containment;
  resolver: native.ResolverKind;
}

/** Gives a read's memory back; called once its response has closed (sent, cut or abandoned). */
export type { Release } from './memory.js';
const noRelease: Release = () => undefined;

/** A body read whole: at most LIMITS.streamThresholdBytes, hashed over exactly these bytes. */
export interface WholeBody extends native.ReadResult {
  kind: 'whole';
  size: number;
  release: Release;
}

/**
 * A body above LIMITS.streamThresholdBytes: its digest and size are known, its bytes are still in
 * the file, and `stream` sends them under that etag (native.StreamHandle). `release` gives back its
 * window and closes the stream.
 */
export interface StreamedBody {
  kind: 'stream';
  size: number;
  mtimeMs: number;
  sha256: string;
  digestCached: boolean;
  stream: native.StreamHandle;
  release: Release;
}

export type Body = WholeBody | StreamedBody;

export class ExportView {
  readonly opts: Readonly<ExportViewOptions>;
  private readonly resolveOpts: native.ResolveOptions;
  /** Listings run one at a time: each hashes whole files on the shared pool reads need too. */
  private listingsRunning = 0;
  private listingsWaiting: Array<() => void> = [];

  constructor(opts: ExportViewOptions) {
    this.opts = Object.freeze({ ...opts });
    // Only `scoped` refuses symlinks; `sealed` and `advisory` follow them while they stay beneath.
    this.resolveOpts = { refuseSymlinks: opts.containment === 'scoped', resolver: opts.resolver };
  }

  /** Lowers `raw` or throws outside_root; returns the canonical relpath. */
  lower(raw: string, source: 'url' | 'text'): string {
    const lowered = lowerRelpath(raw, source);
    if (!lowered.ok) throw new Refusal('outside_root');
    return lowered.relpath;
  }

  /**
   * Reads one file as a Body, never more than max_bytes (refused by fstat before a byte is read).
   * Up to LIMITS.syncReadMaxBytes it is read on this thread (no pool round trip), counted against
   * `budget` but never refused for memory. Up to LIMITS.streamThresholdBytes it is read whole on the
   * pool once its size is held in `budget`. Above that it is streamed: only its window (two chunks)
   * is held, and its digest is taken before anything is sent. A share that cannot be had within the
   * budget's wait is refused over_capacity; `gone` (the client left) stops the wait and the digest.
   * It is asked for only on those paths: a small read never waits, and its signal (an
   * AbortController and a close listener) would be built for nothing.
   */
  async read(relpath: string, budget?: MemoryBudget, gone?: () => AbortSignal): Promise<Body> {
    const { workdirFd, root, maxBytes } = this.opts;
    let signal: AbortSignal | undefined;
    for (;;) {
      let first: native.ReadResult | { size: number };
      try {
        first = native.readSmall(workdirFd(), root, relpath, maxBytes, native.LIMITS.syncReadMaxBytes, this.resolveOpts);
      } catch (error) {
        throw refusalFromNative(error);
      }
      if ('bytes' in first) {
        return Object.assign(first, { kind: 'whole' as const, size: first.bytes.length, release: budget ? budget.count(first.bytes.length) : noRelease });
      }
      const size = first.size;
      signal ??= gone?.();
      if (size > native.LIMITS.streamThresholdBytes) {
        const release = budget ? await budget.acquire(2 * native.LIMITS.streamChunkBytes, signal) : noRelease;
        let opened: native.StreamOpened;
        try {
          opened = await native.openStream(workdirFd(), root, relpath, maxBytes, { ...this.resolveOpts, cancel: native.cancelToken(signal) });
        } catch (error) {
          release();
          throw refusalFromNative(error);
        }
        const { stream } = opened;
        return { kind: 'stream', size: opened.size, mtimeMs: opened.mtimeMs, sha256: opened.sha256, digestCached: opened.digestCached, stream, release: () => {
          release();
          stream.close();
        } };
      }
      const release = budget ? await budget.acquire(size, signal) : noRelease;
      let result: native.ReadResult;
      try {
        // Never more than the streaming threshold in memory: a file that grew past it since the
        // first look is OVER_BUDGET, and is looked at again (and streamed).
        result = await native.readFile(workdirFd(), root, relpath, maxBytes, { ...this.resolveOpts, budgetBytes: native.LIMITS.streamThresholdBytes });
      } catch (error) {
        release();
        if (error instanceof native.NativeError && error.code === 'OVER_BUDGET') continue;
        throw refusalFromNative(error);
      }
      // It may have grown (up to the threshold) since the first look: what it holds is counted.
      const extra = budget && result.bytes.length > size ? budget.count(result.bytes.length - size) : noRelease;
      return Object.assign(result, { kind: 'whole' as const, size: result.bytes.length, release: () => {
        release();
        extra();
      } });
    }
  }

  private async listingSlot(signal?: AbortSignal): Promise<void> {
    if (this.listingsRunning < MAX_CONCURRENT_LISTINGS) {
      this.listingsRunning += 1;
      return;
    }
    const granted = await new Promise<boolean>((resolve) => {
      const grant = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', give);
        resolve(true);
      };
      const give = () => {
        clearTimeout(timer);
        this.listingsWaiting = this.listingsWaiting.filter((w) => w !== grant);
        resolve(false);
      };
      const timer = setTimeout(give, this.opts.listingBudgetMs ?? DEFAULT_LISTING_BUDGET_MS);
      signal?.addEventListener('abort', give, { once: true });
      this.listingsWaiting.push(grant);
    });
    if (!granted) throw new Refusal('over_capacity');
    this.listingsRunning += 1;
  }

  /** Resolves and fstat's one file without reading it (the mint's check). */
  async stat(relpath: string): Promise<native.StatResult> {
    try {
      return await native.statFile(this.opts.workdirFd(), this.opts.root, relpath, this.resolveOpts);
    } catch (error) {
      throw refusalFromNative(error);
    }
  }

  /**
   * The recursive listing; a root that does not exist yet lists as empty. It stops (io_error, saying
   * why) when `signal` aborts (the client left, the session is stopping) or past the time budget.
   * At most MAX_CONCURRENT_LISTINGS run at once (each holds a pool thread while it hashes, and
   * reads need the pool too), so one stuck listing never holds the next; a listing that waits for a
   * slot longer than the budget is refused over_capacity. The addon renders the body between `head`
   * and `tail` (native.listRendered); with a `budget`, the body's bytes are held in it before the
   * slot is given up, so no more than MAX_CONCURRENT_LISTINGS bodies ever exist outside the budget,
   * and one that gets no room within the budget's wait is refused over_capacity.
   */
  async list(signal: AbortSignal | undefined, render: { head: string; tail: string }, budget?: MemoryBudget): Promise<native.RenderedListing & { release: Release }> {
    await this.listingSlot(signal);
    try {
      const cancel = native.cancelToken(signal);
      let listing: native.RenderedListing;
      try {
        listing = await native.listRendered(this.opts.workdirFd(), this.opts.root, { ...this.resolveOpts, cancel, timeBudgetMs: this.opts.listingBudgetMs ?? DEFAULT_LISTING_BUDGET_MS }, render);
      } catch (error) {
        throw refusalFromNative(error);
      }
      const release = budget ? await budget.acquire(listing.body.length, signal) : noRelease;
      return Object.assign(listing, { release });
    } finally {
      this.listingsRunning -= 1;
      this.listingsWaiting.shift()?.();
    }
  }
}
