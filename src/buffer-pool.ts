// Read buffers reused across responses. A large read into a fresh buffer costs page faults on every
// page, an munmap, and V8 collections driven by the churn (a third of a 4 MiB read's time in the
// profile); a buffer whose response was fully handed to the kernel is kept here for the next one.
// Only a response that finished gives its buffer back: one that was cut may still have a write
// queued on it, so its buffer is left to the collector. Idle buffers are dropped after a while.

/** Capacities are rounded up to this, so files of nearby sizes share buffers. */
const GRANULE = 64 * 1024;
/** Pooled buffers are dropped once no read took one for this long. */
export const POOL_IDLE_MS = 5_000;

export class BufferPool {
  private free: Buffer[] = [];
  private pooledBytes = 0;
  private lastTake = 0;
  private timer: NodeJS.Timeout | null = null;

  /** `limit`: most bytes kept idle; a buffer larger than it is never pooled. */
  constructor(readonly limit: number) {}

  /** Bytes held idle now. */
  get idleBytes(): number {
    return this.pooledBytes;
  }

  /**
   * A buffer of at least `length` bytes, exclusively the caller's until it gives it back: a pooled
   * one no more than twice as long, else a new one. Null when it could never be pooled (the caller
   * lets the addon allocate).
   */
  take(length: number): Buffer | null {
    const capacity = Math.ceil(length / GRANULE) * GRANULE;
    if (length <= 0 || capacity > this.limit) return null;
    this.lastTake = Date.now();
    let best = -1;
    for (let i = 0; i < this.free.length; i++) {
      const size = this.free[i]!.length;
      if (size >= length && size <= 2 * capacity && (best < 0 || size < this.free[best]!.length)) best = i;
    }
    if (best < 0) return Buffer.allocUnsafeSlow(capacity);
    const [buffer] = this.free.splice(best, 1);
    this.pooledBytes -= buffer!.length;
    return buffer!;
  }

  /** Takes back a buffer from take() whose every use is over (its response finished). */
  give(buffer: Buffer): boolean {
    if (this.pooledBytes + buffer.length > this.limit) return false;
    this.free.push(buffer);
    this.pooledBytes += buffer.length;
    this.scheduleTrim();
    return true;
  }

  /** Drops every idle buffer. */
  clear(): void {
    this.free = [];
    this.pooledBytes = 0;
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
