// Refusals are traced, and a refusal costs a client nothing but a request: without a limit, a client
// could grow the host-side trace as fast as it can send. Each client address has a token bucket of
// traced refusals, and one server-wide bucket bounds them all together: any local process can bind
// any address in 127.0.0.0/8 (and a NAT puts many clients behind one), so a per-address bucket
// alone is reset by rotating addresses. Past either, refusals are still answered (they carry no
// file bytes) but not traced one by one: `refusals_suppressed` summaries say how many were left
// out, and they are bounded too (a few named clients per interval, the rest in one line). Every
// byte that leaves still has its event first: only refusals are ever summarised.
import {
  MAX_TRACKED_CLIENTS,
  NAMED_SUMMARIES,
  REFUSAL_BURST,
  REFUSALS_PER_SECOND,
  SERVER_REFUSAL_BURST,
  SERVER_REFUSALS_PER_SECOND,
  SUMMARY_INTERVAL_MS,
} from '../limits.js';

interface Bucket {
  tokens: number;
  at: number;
  suppressed: number;
  since: number | null;
}

/** A summary line: `client` null for the line that counts the clients not named one by one. */
export interface SummaryFields {
  client: string | null;
  suppressed: number;
  since_ms: number;
  /** Client addresses the line counts (one forgotten and seen again counts again). */
  clients: number;
}

export type SummaryWriter = (fields: SummaryFields) => Promise<void>;

export interface RefusalRate {
  burst: number;
  perSecond: number;
}

export class RefusalLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly server: Bucket;
  /** Suppressed refusals of clients not named in a summary (forgotten, or past NAMED_SUMMARIES). */
  private others = { suppressed: 0, since: null as number | null, clients: 0 };
  private timer: NodeJS.Timeout | null = null;
  /** The latest time the clock has shown: a wall clock stepped back must not earn the step again. */
  private latest: number;

  constructor(
    private readonly write: SummaryWriter,
    private readonly burst = REFUSAL_BURST,
    private readonly perSecond = REFUSALS_PER_SECOND,
    private readonly now: () => number = Date.now,
    private readonly serverRate: RefusalRate = { burst: SERVER_REFUSAL_BURST, perSecond: SERVER_REFUSALS_PER_SECOND },
  ) {
    this.latest = now();
    this.server = { tokens: serverRate.burst, at: this.latest, suppressed: 0, since: null };
  }

  /** True when this client's refusal is to be traced; false when it is only counted. */
  allow(client: string): boolean {
    // Time never runs backwards here: had the buckets followed the wall clock back and forward
    // again, they would have earned the same interval twice.
    const t = (this.latest = Math.max(this.latest, this.now()));
    let b = this.buckets.get(client);
    if (b === undefined) {
      if (this.buckets.size >= MAX_TRACKED_CLIENTS) this.forgetOldest();
      b = { tokens: this.burst, at: t, suppressed: 0, since: null };
    } else {
      this.buckets.delete(client); // re-inserted below: the map's order is recency
      refill(b, t, this.burst, this.perSecond);
    }
    this.buckets.set(client, b);
    refill(this.server, t, this.serverRate.burst, this.serverRate.perSecond);
    // A token is spent only from both buckets at once: a refusal the server-wide bucket stops does
    // not use up the client's own allowance.
    if (b.tokens >= 1 && this.server.tokens >= 1) {
      b.tokens -= 1;
      this.server.tokens -= 1;
      return true;
    }
    b.suppressed += 1;
    b.since ??= t;
    this.schedule();
    return false;
  }

  /**
   * Writes the summaries and resets their counts: one line for each of the NAMED_SUMMARIES clients
   * with most suppressed, one line (`client: null`) for all the others.
   */
  async flush(): Promise<void> {
    const waiting = [...this.buckets].filter(([, b]) => b.suppressed > 0).sort(([, x], [, y]) => y.suppressed - x.suppressed);
    const lines: SummaryFields[] = [];
    for (const [client, b] of waiting) {
      if (lines.length < NAMED_SUMMARIES) lines.push({ client, suppressed: b.suppressed, since_ms: b.since!, clients: 1 });
      else this.fold(b);
      b.suppressed = 0;
      b.since = null;
    }
    if (this.others.suppressed > 0) {
      lines.push({ client: null, suppressed: this.others.suppressed, since_ms: this.others.since!, clients: this.others.clients });
      this.others = { suppressed: 0, since: null, clients: 0 };
    }
    await Promise.all(lines.map((fields) => this.write(fields).catch(() => undefined)));
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

  private fold(b: Bucket): void {
    this.others.suppressed += b.suppressed;
    this.others.since = Math.min(this.others.since ?? b.since!, b.since!);
    this.others.clients += 1;
  }

  /** A forgotten client's count joins the others' line: writing one line per forgotten client would let rotation grow the trace again. */
  private forgetOldest(): void {
    const oldest = this.buckets.keys().next().value;
    if (oldest === undefined) return;
    const b = this.buckets.get(oldest)!;
    if (b.suppressed > 0) this.fold(b);
    this.buckets.delete(oldest);
  }
}

function refill(b: Bucket, t: number, burst: number, perSecond: number): void {
  // t never goes back (allow() keeps the latest time), so an interval is earned once.
  b.tokens = Math.min(burst, b.tokens + ((t - b.at) / 1000) * perSecond);
  b.at = t;
}
