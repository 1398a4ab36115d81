// Read buffers reused across responses. A large read into a fresh buffer costs page faults on every
// page, an munmap, and V8 collections driven by the churn (a third of a 4 MiB read's time in the
// profile); a buffer whose response has closed is kept here for the next read of exactly its
// length. Reuse after the response's 'close' is safe because by then no write can still use the
// buffer: 'close' follows either 'finish' (every write of the response completed, so the kernel
// holds its own copy) or the socket's handle closing (libuv completes or cancels every queued
// write before it reports the close). The memory budget counts idle buffers as held and evicts
// them when a read needs the room (src/export/budget.ts); idle buffers are also dropped after a while.
import { noteReleased } from './reclaim.js';

/** Pooled buffers are dropped once no read took one for this long. */
export const POOL_IDLE_MS = 5_000;

export class BufferPool {
  private free: Buffer[] = []; // oldest first
  private pooledBytes = 0;
  private lastTake = 0;
  private timer: NodeJS.Timeout | null = null;

  /** `limit`: most bytes kept idle; a buffer longer than it is never pooled. */
  constructor(readonly limit: number) {}

  /** Bytes held idle now. */
  get idleBytes(): number {
    return this.pooledBytes;
  }

  /**
   * A buffer of exactly `length` bytes, exclusively the caller's until it gives it back: a pooled
   * one, else a new one (its bytes are whatever the last user left). Exact, so that the budget
   * can count what a read holds without slack. Null when it could never be pooled (the caller
   * lets the addon allocate).
   */
  take(length: number): Buffer | null {
    if (length <= 0 || length > this.limit) return null;
    this.lastTake = Date.now();
    for (let i = this.free.length - 1; i >= 0; i--) {
      if (this.free[i]!.length !== length) continue;
      const [buffer] = this.free.splice(i, 1);
      this.pooledBytes -= length;
      return buffer!;
    }
    return Buffer.allocUnsafeSlow(length);
  }

  /** Takes back a buffer from take() once nothing uses it any more (its response closed). */
  give(buffer: Buffer): boolean {
    // Twice would hand one buffer to two reads: refused, whatever the caller's bug.
    if (this.free.includes(buffer)) return false;
    if (this.pooledBytes + buffer.length > this.limit) return false;
    this.free.push(buffer);
    this.pooledBytes += buffer.length;
    this.scheduleTrim();
    return true;
  }

  /** Drops idle buffers, oldest first, until at least `bytes` are let go (or none is left). */
  evict(bytes: number): number {
    let dropped = 0;
    while (dropped < bytes && this.free.length > 0) dropped += this.free.shift()!.length;
    this.pooledBytes -= dropped;
    if (dropped > 0) noteReleased(dropped);
    return dropped;
  }

  /** Drops every idle buffer. */
  clear(): void {
    this.evict(Infinity);
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private scheduleTrim(): void {
    if (this.timer) return;
    const check = () => {
      const idle = Date.now() - this.lastTake;
      if (idle >= POOL_IDLE_MS) {
        this.timer = null;
        this.clear();
        return;
      }
      this.timer = setTimeout(check, POOL_IDLE_MS - idle);
      this.timer.unref();
    };
    this.timer = setTimeout(check, POOL_IDLE_MS);
    this.timer.unref();
  }
}
