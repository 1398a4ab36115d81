// The one memory budget: every byte the server holds for a client, from the moment it is taken until
// the response that holds it closes (sent, cut or abandoned). What is counted:
//   - a body read whole (above the synchronous size, at most the streaming threshold): its size;
//   - a streaming window: two chunks, whatever the file's size (a streamed body is never held whole);
//   - a listing body, before it is sent;
//   - bodies read synchronously (at most LIMITS.syncReadMaxBytes), counted but never refused: one per
//     connection (admission answers one response at a time), so at most the connection cap times that;
//   - idle pooled buffers whose pages are still resident.
// A request that cannot get its share within `waitMs` is refused (503 over_capacity). Nothing here
// waits for, or asks for, a garbage collection: the pooled buffers are all one size (a stream
// chunk), so any idle one fits any request, and an idle buffer whose room is needed gives its pages
// back at once (madvise, native.releasePages) instead of being dropped for V8 to collect someday.
import { Refusal } from '../codes.js';
import { LIMITS, releasePages } from '../addon/export.js';
import { DEFAULT_BUDGET_WAIT_MS, DEFAULT_MEMORY_BUDGET_BYTES, POOL_IDLE_MS } from '../limits.js';

/** Gives a share back; idempotent. */
export type Release = () => void;

export class MemoryBudget {
  /** Bytes held for responses now (idle pooled buffers are not in it). */
  private held = 0;
  private waiters: Array<() => void> = [];
  /** Idle pooled buffers: `warm` ones still have their pages (counted), `cold` ones gave them back. */
  private warm: Buffer[] = [];
  private cold: Buffer[] = [];
  private lastTake = 0;
  private trimTimer: NodeJS.Timeout | null = null;
  readonly bufferBytes = LIMITS.streamChunkBytes;

  constructor(
    readonly limit: number = DEFAULT_MEMORY_BUDGET_BYTES,
    readonly waitMs: number = DEFAULT_BUDGET_WAIT_MS,
  ) {}

  /** Bytes held for responses (what `--metrics` reports and tests wait to see back at 0). */
  get inUse(): number {
    return this.held;
  }

  /** Resident idle pooled buffers, counted against the limit too. */
  get idleBytes(): number {
    return this.warm.length * this.bufferBytes;
  }

  /**
   * Waits until `bytes` fit (or nothing else is held: one request larger than the whole budget
   * still runs alone), then holds them. Past the wait: over_capacity. An aborted `signal` gives up
   * the wait the same way.
   */
  async acquire(bytes: number, signal?: AbortSignal): Promise<Release> {
    const deadline = Date.now() + this.waitMs;
    while (!this.fits(bytes)) {
      const left = deadline - Date.now();
      if (left <= 0 || signal?.aborted) throw new Refusal('over_capacity');
      await this.released(left, signal);
    }
    return this.take(bytes);
  }

  /** Holds `bytes` without waiting (a synchronous small body: bounded by the connection cap). */
  count(bytes: number): Release {
    return this.take(bytes);
  }

  /**
   * A body buffer of `bufferBytes`, for a response that already holds room for it: an idle pooled
   * one when there is one (its bytes are whatever its last user left), else a new one. Given back
   * with `recycle` once nothing uses it.
   */
  buffer(): Buffer {
    this.lastTake = Date.now();
    const buffer = this.warm.pop() ?? this.cold.pop();
    return buffer ?? Buffer.allocUnsafeSlow(this.bufferBytes);
  }

  /** Takes back a buffer from buffer() that no write uses any more (its write completed or its response closed). */
  recycle(buffer: Buffer): void {
    if (buffer.length !== this.bufferBytes || this.warm.includes(buffer) || this.cold.includes(buffer)) return;
    if (this.held + this.idleBytes + buffer.length > this.limit) {
      releasePages(buffer);
      this.cold.push(buffer);
    } else {
      this.warm.push(buffer);
    }
    this.scheduleTrim();
  }

  private fits(bytes: number): boolean {
    // One request larger than the whole budget still runs when nothing else is held.
    if (this.held > 0 && this.held + bytes > this.limit) return false;
    // Room taken by idle buffers is given back (their pages, at once) before anyone waits for it.
    while (this.warm.length > 0 && this.held + this.idleBytes + bytes > this.limit) this.cool(this.warm.pop()!);
    return true;
  }

  private take(bytes: number): Release {
    this.held += bytes;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.held -= bytes;
      if (bytes > 0) for (const w of this.waiters.splice(0)) w();
    };
  }

  private cool(buffer: Buffer): void {
    releasePages(buffer);
    this.cold.push(buffer);
  }

  private released(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        this.waiters = this.waiters.filter((w) => w !== done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      signal?.addEventListener('abort', done, { once: true });
      this.waiters.push(done);
    });
  }

  /** Once no buffer was taken for POOL_IDLE_MS, every idle buffer gives its pages back. */
  private scheduleTrim(): void {
    if (this.trimTimer) return;
    const check = () => {
      const idle = Date.now() - this.lastTake;
      if (idle >= POOL_IDLE_MS) {
        this.trimTimer = null;
        while (this.warm.length > 0) this.cool(this.warm.pop()!);
        return;
      }
      this.trimTimer = setTimeout(check, POOL_IDLE_MS - idle);
      this.trimTimer.unref();
    };
    this.trimTimer = setTimeout(check, POOL_IDLE_MS);
    this.trimTimer.unref();
  }

  /** Every idle buffer gives its pages back now (the session is closing). */
  clear(): void {
    while (this.warm.length > 0) this.cool(this.warm.pop()!);
    if (this.trimTimer) clearTimeout(this.trimTimer);
    this.trimTimer = null;
  }
}
