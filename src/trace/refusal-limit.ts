// Refusals are traced, and a refusal costs a client nothing but a request: without a limit, a client
// could grow the host-side trace as fast as it can send. Each client address has a token bucket of
// traced refusals; past it, refusals are still answered (they carry no file bytes) but not traced
// one by one: a `refusals_suppressed` summary per client says how many were left out. Every byte that
// leaves still has its event first: only refusals are ever summarised.

/** Traced refusals a client may burst. */
export const REFUSAL_BURST = 1000;
/** Traced refusals a client earns per second after the burst. */
export const REFUSALS_PER_SECOND = 100;
/** How often summaries of suppressed refusals are written. */
export const SUMMARY_INTERVAL_MS = 10_000;
/** Clients tracked at once; the oldest is forgotten (it starts again with a full bucket). */
const MAX_CLIENTS = 4096;

interface Bucket {
  tokens: number;
  at: number;
  suppressed: number;
  since: number | null;
}

export type SummaryWriter = (fields: { client: string; suppressed: number; since_ms: number }) => Promise<void>;

export class RefusalLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly write: SummaryWriter,
    private readonly burst = REFUSAL_BURST,
    private readonly perSecond = REFUSALS_PER_SECOND,
    private readonly now: () => number = Date.now,
  ) {}

  /** True when this client's refusal is to be traced; false when it is only counted. */
  allow(client: string): boolean {
    const t = this.now();
    let b = this.buckets.get(client);
    if (b === undefined) {
      if (this.buckets.size >= MAX_CLIENTS) this.evictOldest();
      b = { tokens: this.burst, at: t, suppressed: 0, since: null };
    } else {
      this.buckets.delete(client); // re-inserted below: the map's order is recency
      b.tokens = Math.min(this.burst, b.tokens + ((t - b.at) / 1000) * this.perSecond);
      b.at = t;
    }
    this.buckets.set(client, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return true;
    }
    b.suppressed += 1;
    b.since ??= t;
    this.schedule();
    return false;
  }

  /** Writes one summary per client with suppressed refusals, and resets their counts. */
  async flush(): Promise<void> {
    const pending: Array<Promise<void>> = [];
    for (const [client, b] of this.buckets) {
      if (b.suppressed === 0) continue;
      pending.push(this.write({ client, suppressed: b.suppressed, since_ms: b.since! }).catch(() => undefined));
      b.suppressed = 0;
      b.since = null;
    }
    await Promise.all(pending);
  }

  /** Flushes and stops the timer (session end). */
  async close(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.flush();
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush();
    }, SUMMARY_INTERVAL_MS);
    this.timer.unref();
  }

  private evictOldest(): void {
    const oldest = this.buckets.keys().next().value;
    if (oldest === undefined) return;
    const b = this.buckets.get(oldest)!;
    if (b.suppressed > 0) void this.write({ client: oldest, suppressed: b.suppressed, since_ms: b.since! }).catch(() => undefined);
    this.buckets.delete(oldest);
  }
}
