// One declared export root seen through the resolver: the shared reader both planes and the mint
// use, so a path is judged by exactly one piece of code whichever door it came through. It lowers
// the path (src/paths.ts), calls the native resolver/reader, and turns every native failure into a
// neutral Refusal (src/codes.ts); the edge that answers renders it.
import { SMALL_READ_BYTES, type ByteBudget } from './budget.js';
import { noteReleased } from './reclaim.js';
import { NATIVE_TO_CODE, Refusal } from '../codes.js';
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
  return new Refusal('io_error', 'internal error');
}

/** How long one listing may run before it answers io_error saying so. */
export const DEFAULT_LISTING_BUDGET_MS = 30_000;
/** Listings of one root running at once; each holds a pool thread while it hashes. */
export const MAX_CONCURRENT_LISTINGS = 2;

export interface ExportViewOptions {
  /** The listing time budget; default DEFAULT_LISTING_BUDGET_MS. */
  listingBudgetMs?: number;
  /**
   * The workdir descriptor, asked for on every call rather than captured: once the session closes
   * the number may be reused by an unrelated open, so a stale view must fail, not follow it.
   */
  workdirFd: () => number;
  /** The declared root, verbatim (e.g. `out/`); resolved beneath the workdir on every call. */
  root: string;
  maxBytes: number;
  containment: Containment;
  resolver: native.ResolverKind;
}

/** Gives a read's memory back; called once its response has closed (sent, cut or abandoned). */
export type Release = () => void;
const noRelease: Release = () => undefined;

/**
 * Files up to this size are read on the JS thread (native.readSmall), and are the ones the memory
 * budget does not count. Larger ones go to the pool: hashing 64 KiB costs ~50 µs, during which the
 * event loop would answer nothing else, while the pool's round trip costs ~10 µs and runs the hash
 * on another core.
 */
export const SYNC_READ_BYTES = SMALL_READ_BYTES;

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
   * Reads one file: at most max_bytes, hashed over exactly the bytes returned. A file of at most
   * SYNC_READ_BYTES is read synchronously on this thread (native.readSmall: no pool round trip).
   * Those are not counted against a memory `budget`. A larger one is read on the pool: with a
   * `budget`, its size (known from that first look) is reserved before the read allocates
   * anything and held until the caller calls `release` (the response is done). A file that does
   * not fit now waits for memory to be released, and past the budget's wait is refused
   * (over_capacity); one that grew past its reservation meanwhile is looked at again.
   */
  async read(relpath: string, budget?: ByteBudget, reuseBuffers = false): Promise<native.ReadResult & { release: Release }> {
    const deadline = budget ? Date.now() + budget.waitMs : 0;
    for (;;) {
      let first: native.ReadResult | { size: number };
      try {
        first = native.readSmall(this.opts.workdirFd(), this.opts.root, relpath, this.opts.maxBytes, SYNC_READ_BYTES, this.resolveOpts);
      } catch (error) {
        throw refusalFromNative(error);
      }
      if ('bytes' in first) return Object.assign(first, { release: noRelease });
      const size = first.size;
      if (!budget) {
        try {
          return Object.assign(await native.readFile(this.opts.workdirFd(), this.opts.root, relpath, this.opts.maxBytes, this.resolveOpts), { release: noRelease });
        } catch (error) {
          throw refusalFromNative(error);
        }
      }
      if (!budget.canHold(size)) {
        // Nothing is reserved while waiting, so a waiter that wakes to find too little room
        // changes nothing for the others (they are woken by real releases only).
        const left = deadline - Date.now();
        if (left <= 0) throw new Refusal('over_capacity');
        await budget.released(left);
        continue;
      }
      const reservation = budget.reserve(size);
      // A reused buffer, one byte longer than the most this read may take (the addon's rule).
      const most = reservation.budgetBytes ? Math.min(reservation.budgetBytes, this.opts.maxBytes) : 0;
      const into = reuseBuffers && most > SMALL_READ_BYTES ? budget.buffers.take(most + 1) : null;
      let result: native.ReadResult;
      try {
        result = await native.readFile(this.opts.workdirFd(), this.opts.root, relpath, this.opts.maxBytes, {
          ...this.resolveOpts,
          ...(reservation.budgetBytes ? { budgetBytes: reservation.budgetBytes } : {}),
          ...(into ? { into } : {}),
        });
      } catch (error) {
        reservation.cancel();
        if (into) budget.recycle(into); // the read is over and nothing else saw it
        if (!(error instanceof native.NativeError) || error.code !== 'OVER_BUDGET') throw refusalFromNative(error);
        // It grew past what was reserved for it since the first look: look again.
        if (Date.now() >= deadline) throw new Refusal('over_capacity');
        continue;
      }
      // What the response holds until it closes: with a reused buffer, all of it (the file may
      // have shrunk since the first look, and the bytes are a view that keeps it alive), less the
      // one byte that was there to see it grow, so an unchanged file counts as its size.
      const held = into ? Math.max(result.bytes.length, into.length - 1) : result.bytes.length;
      const hold = reservation.settle(held);
      let released = false;
      return Object.assign(result, {
        release: () => {
          if (released) return;
          released = true;
          hold();
          if (into && budget.recycle(into)) return;
          if (held > SMALL_READ_BYTES) noteReleased(held);
        },
      });
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
   * slot longer than the budget is refused over_capacity.
   */
  async list(signal?: AbortSignal): Promise<native.ListEntry[]> {
    await this.listingSlot(signal);
    try {
      const cancel = native.cancelToken(signal);
      return (await native.listRoot(this.opts.workdirFd(), this.opts.root, { ...this.resolveOpts, cancel, timeBudgetMs: this.opts.listingBudgetMs ?? DEFAULT_LISTING_BUDGET_MS })).entries;
    } catch (error) {
      throw refusalFromNative(error);
    } finally {
      this.listingsRunning -= 1;
      this.listingsWaiting.shift()?.();
    }
  }
}
