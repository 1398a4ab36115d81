// One declared export root seen through the resolver: the shared reader both planes and the mint
// use, so a path is judged by exactly one piece of code whichever door it came through. It lowers
// the path (src/paths.ts), calls the native resolver/reader, and turns every native failure into a
// neutral Refusal (src/codes.ts); the edge that answers renders it.
import type { MemoryBudget, Release } from './memory.js';
import { NATIVE_TO_CODE, asRefusal, Refusal } from '../codes.js';
import * as native from '../addon/export.js';
import { lowerRelpath } from '../paths.js';
import type { Containment } from '../wire.js';
import { DEFAULT_LISTING_BUDGET_MS, DEFAULT_SNAPSHOT_MAX_BYTES, MAX_CONCURRENT_LISTINGS } from '../limits.js';

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
 * A body above LIMITS.streamThresholdBytes whose file was shown not to move: its digest and size
 * are known, its bytes are still in the file, and `stream` sends them under that etag
 * (native.StreamHandle). `release` gives back its window and closes the stream.
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

/**
 * A body above LIMITS.streamThresholdBytes whose file is being written: a snapshot, every byte
 * already read from the one descriptor into `chunks` (pooled buffers, held in the budget) and
 * hashed, sent whole under that digest: torn or short as the writer made it. `release` gives the
 * buffers and their share back.
 */
export interface SnapshotBody {
  kind: 'snapshot';
  size: number;
  mtimeMs: number;
  sha256: string;
  /** Never: a snapshot is hashed as it is read. */
  digestCached: false;
  chunks: Buffer[];
  release: Release;
}

export type Body = WholeBody | StreamedBody | SnapshotBody;

/** Where a large body's chunk buffers come from and go back to (the budget's pool, or fresh ones). */
export interface ChunkBuffers {
  take(): Buffer;
  give(buffer: Buffer): void;
}

/** What a read may hold and wait for. */
export interface ReadContext {
  /** The one memory budget; absent, nothing is counted (tests, direct use). */
  budget?: MemoryBudget;
  /** The client-gone signal, asked for only where a read can wait. */
  gone?: () => AbortSignal;
  /** Chunk buffers for a snapshot; default fresh ones. */
  buffers?: ChunkBuffers;
}

const freshBuffers: ChunkBuffers = {
  take: () => Buffer.allocUnsafeSlow(native.LIMITS.streamChunkBytes),
  give: () => undefined,
};

/**
 * The largest snapshot a read may hold: a quarter of the budget (so a few changing files cannot
 * take all of it), or DEFAULT_SNAPSHOT_MAX_BYTES without one. A changing file above it is hashed
 * and streamed if it holds still meanwhile, else refused over_capacity.
 */
export function snapshotMaxBytes(budget?: MemoryBudget): number {
  return budget ? Math.floor(budget.limit / 4) : DEFAULT_SNAPSHOT_MAX_BYTES;
}

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
   * Reads one file as a Body from one resolution and one descriptor, never more than max_bytes
   * (refused by fstat before a byte is read): the first `size` bytes its fstat gave (growth after
   * that is the next version's). Up to LIMITS.syncReadMaxBytes it is read on this thread (no pool
   * round trip), counted against the budget but never refused for memory. Up to
   * LIMITS.streamThresholdBytes it is read whole on the pool once its size is held in the budget.
   * Above that it streams (only its window, two chunks, held) when it can be shown not to move
   * while sent, else it is served as a snapshot held in the budget (native/stream.h). A share that
   * cannot be had within the budget's wait, or a changing file too large to snapshot, is refused
   * over_capacity; `gone` (the client left) stops the wait and the digest. It is asked for only on
   * those paths: a small read never waits, and its signal (an AbortController and a close listener)
   * would be built for nothing.
   */
  async read(relpath: string, ctx: ReadContext = {}): Promise<Body> {
    const { workdirFd, root, maxBytes } = this.opts;
    const { budget } = ctx;
    let first: native.ReadResult | { size: number; file: native.OpenFile };
    try {
      first = native.readSmall(workdirFd(), root, relpath, maxBytes, native.LIMITS.syncReadMaxBytes, this.resolveOpts);
    } catch (error) {
      throw refusalFromNative(error);
    }
    if ('bytes' in first) {
      return Object.assign(first, { kind: 'whole' as const, size: first.bytes.length, release: budget ? budget.count(first.bytes.length) : noRelease });
    }
    const { size, file } = first;
    try {
      const signal = ctx.gone?.();
      if (size > native.LIMITS.streamThresholdBytes) return await this.large(file, size, ctx, signal);
      const release = budget ? await budget.acquire(size, signal) : noRelease;
      let result: native.ReadResult;
      try {
        result = await native.readOpened(file);
      } catch (error) {
        release();
        throw refusalFromNative(error);
      }
      // It may have shrunk since the fstat; what was held for it is given back with the response.
      return Object.assign(result, { kind: 'whole' as const, size: result.bytes.length, release });
    } finally {
      file.close(); // spent by read() or body(); closes it on a path that used neither
    }
  }

  /** A body above the streaming threshold: streamed if settled, else a snapshot (see read). */
  private async large(file: native.OpenFile, size: number, ctx: ReadContext, signal?: AbortSignal): Promise<StreamedBody | SnapshotBody> {
    const { budget } = ctx;
    const chunkBytes = native.LIMITS.streamChunkBytes;
    const window = budget ? await budget.acquire(2 * chunkBytes, signal) : noRelease;
    const snapshotOk = size <= snapshotMaxBytes(budget);
    let opened: native.BodyOpened;
    try {
      opened = await native.openBody(file, this.opts.maxBytes, snapshotOk, native.cancelToken(signal));
    } catch (error) {
      window();
      throw refusalFromNative(error);
    }
    const { stream } = opened;
    if (opened.settled) {
      const { size: length, mtimeMs, sha256, digestCached } = opened;
      return {
        kind: 'stream',
        size: length,
        mtimeMs,
        sha256,
        digestCached,
        stream,
        release: () => {
          window();
          stream.close();
        },
      };
    }
    window();
    if (!snapshotOk) {
      stream.close();
      throw new Refusal('over_capacity');
    }
    try {
      return await this.snapshot(stream, opened.size, opened.mtimeMs, ctx, signal);
    } finally {
      stream.close();
    }
  }

  /** Reads a snapshot's every chunk into buffers held in the budget, then names them by their digest. */
  private async snapshot(stream: native.StreamHandle, size: number, mtimeMs: number, ctx: ReadContext, signal?: AbortSignal): Promise<SnapshotBody> {
    const { budget } = ctx;
    const buffers = ctx.buffers ?? freshBuffers;
    const chunkBytes = native.LIMITS.streamChunkBytes;
    const held = budget ? await budget.acquire(Math.ceil(size / chunkBytes) * chunkBytes, signal) : noRelease;
    const taken: Buffer[] = [];
    const release = () => {
      for (const buffer of taken.splice(0)) buffers.give(buffer);
      held();
    };
    try {
      const chunks: Buffer[] = [];
      let length = 0;
      for (;;) {
        if (signal?.aborted) throw new Refusal('io_error', 'the read was cancelled');
        const buffer = buffers.take();
        taken.push(buffer);
        const { bytes, final } = await native.nextChunk(stream, buffer);
        if (bytes > 0) chunks.push(buffer.subarray(0, bytes));
        length += bytes;
        if (final) break;
      }
      return { kind: 'snapshot', size: length, mtimeMs, sha256: stream.digest(), digestCached: false, chunks, release };
    } catch (error) {
      release();
      throw refusalFromNative(error);
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
  async list(
    signal: AbortSignal | undefined,
    render: { head: string; tail: string },
    budget?: MemoryBudget,
  ): Promise<native.RenderedListing & { release: Release }> {
    await this.listingSlot(signal);
    try {
      const cancel = native.cancelToken(signal);
      let listing: native.RenderedListing;
      try {
        listing = await native.listRendered(
          this.opts.workdirFd(),
          this.opts.root,
          { ...this.resolveOpts, cancel, timeBudgetMs: this.opts.listingBudgetMs ?? DEFAULT_LISTING_BUDGET_MS },
          render,
        );
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
