// The memory budget of reads in flight: bytes a read or a redeem holds from the moment its buffer
// is read until its response closes (sent, cut or abandoned). A request that cannot get its share
// within a short wait is refused (503 over_capacity) instead of queueing without bound, so a crowd
// of clients that never drain cannot pin more than the budget (plus the reads the thread pool is
// running at that moment, each at most max_bytes).

export const DEFAULT_MEMORY_BUDGET_BYTES = 256 * 1024 * 1024;
/** How long a read waits for its share before it is refused. */
export const DEFAULT_BUDGET_WAIT_MS = 2_000;

export class ByteBudget {
  private held = 0;
  private waiters: Array<{ bytes: number; grant: (ok: boolean) => void }> = [];

  constructor(readonly limit: number = DEFAULT_MEMORY_BUDGET_BYTES, readonly waitMs: number = DEFAULT_BUDGET_WAIT_MS) {}

  get inUse(): number {
    return this.held;
  }

  /**
   * Takes `bytes` of the budget; resolves with a release function, or null if the share did not
   * become free within the wait. A request larger than the whole budget is given it when nothing
   * else holds any, so one large file is never refused forever.
   */
  async acquire(bytes: number): Promise<(() => void) | null> {
    if (this.fits(bytes) && this.waiters.length === 0) return this.take(bytes);
    const ok = await new Promise<boolean>((resolve) => {
      const waiter = {
        bytes,
        grant: (granted: boolean) => {
          clearTimeout(timer);
          resolve(granted);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve(false);
        this.wake();
      }, this.waitMs);
      this.waiters.push(waiter);
    });
    return ok ? this.take(bytes, true) : null;
  }

  private fits(bytes: number): boolean {
    return this.held + bytes <= this.limit || this.held === 0;
  }

  private take(bytes: number, reserved = false): () => void {
    if (!reserved) this.held += bytes;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.held -= bytes;
      this.wake();
    };
  }

  /** Grants waiters in order while they fit (first come, first served: no starvation of large reads). */
  private wake(): void {
    while (this.waiters.length > 0 && this.fits(this.waiters[0]!.bytes)) {
      const w = this.waiters.shift()!;
      this.held += w.bytes;
      w.grant(true);
    }
  }
}
