// The memory budget of reads in flight: bytes a read or a redeem holds from the moment its buffer
// is read until its response closes (sent, cut or abandoned). A file larger than what is left is not
// read at all (the addon refuses it after the fstat, before allocating); a read that raced others to
// the last of the budget drops its buffer instead of waiting while holding it. Either waits for a
// release, and past a short wait is refused (503 over_capacity). A buffer given back counts until it
// is collected (src/export/reclaim.ts), so the budget bounds resident memory in every round, not
// only the bytes of reads in flight. So a crowd of clients that never drain cannot pin more than
// the budget, plus at most one max_bytes buffer per pool thread.

import { BufferPool } from './buffer-pool.js';
import { collectNow, pendingReclaim } from './reclaim.js';

export const DEFAULT_MEMORY_BUDGET_BYTES = 256 * 1024 * 1024;
/** How long a read waits for its share before it is refused. */
export const DEFAULT_BUDGET_WAIT_MS = 2_000;
/**
 * Bodies at most this large are not counted. They are read on the JS thread (no pool buffer), and
 * admission lets a connection have one response at a time, so together they are bounded by the
 * connection cap: 1,024 × 16 KiB.
 */
export const SMALL_READ_BYTES = 16 * 1024;

export interface Reservation {
  budgetBytes: number;
  cancel(): void;
  settle(size: number): () => void;
}

export class ByteBudget {
  private held = 0;
  private releaseWaiters: Array<() => void> = [];

  /**
   * Buffers of finished responses, reused by the next reads of their size. Idle buffers count as
   * held: a reservation that needs their room evicts them first, so reads in flight and idle
   * buffers together stay within the limit.
   */
  readonly buffers: BufferPool;

  constructor(readonly limit: number = DEFAULT_MEMORY_BUDGET_BYTES, readonly waitMs: number = DEFAULT_BUDGET_WAIT_MS) {
    this.buffers = new BufferPool(limit);
  }

  /** Keeps a finished read's buffer for reuse if the limit has room for it idle; false if not. */
  recycle(buffer: Buffer): boolean {
    if (this.held + this.buffers.idleBytes + pendingReclaim() + buffer.length > this.limit) return false;
    return this.buffers.give(buffer);
  }

  get inUse(): number {
    return this.held;
  }

  /**
   * Reserves room for one read of at most `maxBytes`, before it allocates anything. `budgetBytes` is
   * what the addon may allocate for it (0: no limit, for one file larger than the whole budget when
   * nothing else is held). With less than a small read's room left, nothing is reserved and only a
   * small file may be read. `settle` then keeps what the file really took (nothing for a small one)
   * and returns its release; `cancel` gives the reservation back (the file did not fit).
   */
  reserve(maxBytes: number): Reservation {
    this.collectIfInTheWay(maxBytes);
    const { reserved, budgetBytes } = this.plan(maxBytes);
    const over = this.held + reserved + this.buffers.idleBytes + pendingReclaim() - this.limit;
    if (over > 0) {
      // Evicted buffers stay resident until collected: collect before the new read allocates, so
      // the budget bounds resident memory, not only what reads in flight hold.
      this.buffers.evict(over);
      collectNow();
    }
    this.held += reserved;
    return {
      budgetBytes,
      cancel: () => this.give(reserved),
      settle: (size: number) => {
        const keep = size <= SMALL_READ_BYTES ? 0 : size;
        this.held += keep - reserved;
        if (keep < reserved) this.notify();
        let released = keep === 0;
        return () => {
          if (released) return;
          released = true;
          this.give(keep);
        };
      },
    };
  }

  /** Whether a file of `size` bytes can be held now (what `reserve(size)` would let it read). */
  canHold(size: number): boolean {
    this.collectIfInTheWay(size);
    const { budgetBytes } = this.plan(size);
    return budgetBytes === 0 || budgetBytes >= size;
  }

  /** Buffers let go but not yet collected standing between `bytes` and the room: collect them now. */
  private collectIfInTheWay(bytes: number): void {
    const pending = pendingReclaim();
    if (pending > 0 && this.limit - this.held - pending < Math.min(bytes, this.limit - this.held)) collectNow();
  }

  private plan(maxBytes: number): { reserved: number; budgetBytes: number } {
    const room = this.limit - this.held - pendingReclaim();
    if (this.held === 0 && maxBytes > this.limit) return { reserved: maxBytes, budgetBytes: 0 };
    if (Math.min(maxBytes, room) >= SMALL_READ_BYTES) return { reserved: Math.min(maxBytes, room), budgetBytes: Math.min(maxBytes, room) };
    return { reserved: 0, budgetBytes: SMALL_READ_BYTES };
  }

  private give(bytes: number): void {
    // Giving back nothing wakes nobody: a waiter that finds the budget still too small cancels its
    // empty reservation, and waking every other waiter for that would have them spin on each
    // other without ever yielding to the event loop.
    if (bytes === 0) return;
    this.held -= bytes;
    this.notify();
  }

  private notify(): void {
    for (const w of this.releaseWaiters.splice(0)) w();
  }

  /** Resolves at the next release, or after `ms`. */
  released(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.releaseWaiters = this.releaseWaiters.filter((w) => w !== done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this.releaseWaiters.push(done);
    });
  }
}
