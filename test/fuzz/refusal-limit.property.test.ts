// Round three: the refusal limit (SPEC 8 and 10: refusals are traced one by one only while the
// client's bucket and the server-wide bucket both allow it; past either they are counted and
// summarised in `refusals_suppressed` lines, at most NAMED_SUMMARIES named clients per flush and one
// line for the rest). The limiter runs on a clock the test drives (nothing sleeps), with small
// generated rates, against refusals from a few clients, bursts of fresh addresses (past
// MAX_TRACKED_CLIENTS, so clients are forgotten), clock steps forward and back, and flushes at
// generated points. Checked:
// - nothing is lost: refusals traced + every summary's `suppressed` = refusals made;
// - the token-bucket envelopes: in any interval, a client still tracked is traced at most
//   burst + rate x interval times, and all clients together at most the server's burst + rate x
//   interval (a clock stepped back earns nothing);
// - the model's exact decision: traced exactly when both buckets hold a token, and a refusal the
//   server-wide bucket stops does not spend the client's token;
// - each flush: at most NAMED_SUMMARIES named lines plus one `client: null` line, the named ones
//   those with the most suppressed, each `since_ms` the time of that client's first suppressed
//   refusal since the last flush, `clients` counting what the null line folds.
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import { MAX_TRACKED_CLIENTS, NAMED_SUMMARIES } from '../../src/limits.js';
import { RefusalLimiter, type SummaryFields } from '../../src/trace/refusal-limit.js';
import { fuzzIt, guardSync } from './runner.js';

type Step = { kind: 'refuse'; client: number; count: number } | { kind: 'rotate'; fresh: number } | { kind: 'advance'; ms: number } | { kind: 'flush' };

const CLIENTS = 24; // more than NAMED_SUMMARIES, so a flush has clients to fold

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('refuse' as const), client: fc.nat(CLIENTS - 1), count: fc.integer({ min: 1, max: 12 }) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('rotate' as const),
      fresh: fc.oneof({ weight: 12, arbitrary: fc.integer({ min: 1, max: 40 }) }, { weight: 1, arbitrary: fc.constant(MAX_TRACKED_CLIENTS + 5) }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.oneof(fc.integer({ min: 0, max: 3000 }), fc.integer({ min: -2000, max: -1 })) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('flush' as const) }) },
);

const caseArb = fc.record({
  burst: fc.integer({ min: 1, max: 6 }),
  perSecond: fc.integer({ min: 0, max: 8 }),
  serverBurst: fc.integer({ min: 1, max: 20 }),
  serverPerSecond: fc.integer({ min: 0, max: 20 }),
  steps: fc.array(stepArb, { minLength: 1, maxLength: 60 }),
});

interface ModelBucket {
  tokens: number;
  at: number;
  suppressed: number;
  since: number | null;
  /** Times of this client's traced refusals since it was last (re)created. */
  traced: number[];
}

/** The model's bucket: t is the latest time the clock has shown, so it never goes back. */
function refill(b: { tokens: number; at: number }, t: number, burst: number, perSecond: number): void {
  b.tokens = Math.min(burst, b.tokens + ((t - b.at) / 1000) * perSecond);
  b.at = t;
}

/**
 * The most refusals a bucket may let through in [t_i, t_j] is its burst plus what it earns there:
 * j - i + 1 <= burst + rate x (t_j - t_i). With f(k) = k - rate x t_k that is f(j) - f(i) + 1 <=
 * burst for every i <= j, checked in one pass with the running minimum of f.
 */
function envelopeHolds(times: number[], burst: number, perSecond: number): boolean {
  let least = Infinity;
  for (let k = 0; k < times.length; k++) {
    const f = k - (times[k]! / 1000) * perSecond;
    least = Math.min(least, f);
    // 1e-9: the bucket's float arithmetic; a whole token more is a real overrun.
    if (f - least + 1 > burst + 1e-9) return false;
  }
  return true;
}

describe('refusal limit (round three)', () => {
  fuzzIt({
    name: 'refusal-limit',
    file: import.meta.filename,
    runs: 120,
    timeoutMs: 60_000,
    examples: () => [
      // Forgetting: a client suppressed, then MAX_TRACKED_CLIENTS fresh addresses push it out.
      [
        {
          burst: 1,
          perSecond: 0,
          serverBurst: 20,
          serverPerSecond: 0,
          steps: [{ kind: 'refuse', client: 0, count: 3 }, { kind: 'rotate', fresh: MAX_TRACKED_CLIENTS + 5 }, { kind: 'flush' }],
        },
      ],
      // The server-wide bucket stops a client whose own bucket is full, without spending it.
      [
        {
          burst: 5,
          perSecond: 0,
          serverBurst: 2,
          serverPerSecond: 1,
          steps: [
            { kind: 'refuse', client: 1, count: 2 },
            { kind: 'refuse', client: 2, count: 3 },
            { kind: 'advance', ms: 1000 },
            { kind: 'refuse', client: 2, count: 1 },
            { kind: 'flush' },
          ],
        },
      ],
      // A clock stepped back earns nothing and takes nothing.
      [
        {
          burst: 2,
          perSecond: 4,
          serverBurst: 20,
          serverPerSecond: 20,
          steps: [
            { kind: 'refuse', client: 3, count: 2 },
            { kind: 'advance', ms: -1500 },
            { kind: 'refuse', client: 3, count: 1 },
            { kind: 'advance', ms: 2000 },
            { kind: 'refuse', client: 3, count: 3 },
            { kind: 'flush' },
          ],
        },
      ],
      // More suppressed clients than NAMED_SUMMARIES in one flush.
      [
        {
          burst: 1,
          perSecond: 0,
          serverBurst: 1,
          serverPerSecond: 0,
          steps: Array.from({ length: CLIENTS }, (_, c) => ({ kind: 'refuse' as const, client: c, count: 1 + (c % 5) })).concat([{ kind: 'flush' } as never]),
        },
      ],
    ],
    property: () =>
      fc.property(
        caseArb,
        guardSync(({ burst, perSecond, serverBurst, serverPerSecond, steps }) => {
          let now = 1_000_000;
          let seen = now; // the latest time the limiter has read from its clock
          const lines: SummaryFields[][] = [];
          let pending: SummaryFields[] = [];
          const limiter = new RefusalLimiter(
            async (f) => void pending.push(f),
            burst,
            perSecond,
            () => now,
            { burst: serverBurst, perSecond: serverPerSecond },
          );
          // The model: buckets in recency order, the server bucket, the folded others.
          const buckets = new Map<string, ModelBucket>();
          const server = { tokens: serverBurst, at: now };
          let others = { suppressed: 0, since: null as number | null, clients: 0 };
          const serverTraced: number[] = [];
          let made = 0;
          let traced = 0;
          let fresh = 0;
          const fold = (b: ModelBucket) => {
            others.suppressed += b.suppressed;
            others.since = Math.min(others.since ?? b.since!, b.since!);
            others.clients += 1;
          };
          const refuse = (client: string) => {
            seen = Math.max(seen, now);
            let b = buckets.get(client);
            if (b === undefined) {
              if (buckets.size >= MAX_TRACKED_CLIENTS) {
                const [oldest, ob] = buckets.entries().next().value as [string, ModelBucket];
                expect(envelopeHolds(ob.traced, burst, perSecond), `${oldest}'s bucket overrun`).toBe(true);
                if (ob.suppressed > 0) fold(ob);
                buckets.delete(oldest);
              }
              b = { tokens: burst, at: seen, suppressed: 0, since: null, traced: [] };
            } else {
              buckets.delete(client);
              refill(b, seen, burst, perSecond);
            }
            buckets.set(client, b);
            refill(server, seen, serverBurst, serverPerSecond);
            const predicted = b.tokens >= 1 && server.tokens >= 1;
            if (predicted) {
              b.tokens -= 1;
              server.tokens -= 1;
              b.traced.push(seen);
              serverTraced.push(seen);
            } else {
              b.suppressed += 1;
              b.since ??= seen;
            }
            made += 1;
            const allowed = limiter.allow(client);
            expect(allowed, `refusal ${made} from ${client} at ${now} (latest ${seen}): traced`).toBe(predicted);
            if (allowed) traced += 1;
          };
          const flush = () => {
            pending = [];
            void limiter.flush();
            const waiting = [...buckets].filter(([, b]) => b.suppressed > 0).sort(([, x], [, y]) => y.suppressed - x.suppressed);
            const expected: SummaryFields[] = [];
            for (const [client, b] of waiting) {
              if (expected.length < NAMED_SUMMARIES) expected.push({ client, suppressed: b.suppressed, since_ms: b.since!, clients: 1 });
              else fold(b);
              b.suppressed = 0;
              b.since = null;
            }
            if (others.suppressed > 0) {
              expected.push({ client: null, suppressed: others.suppressed, since_ms: others.since!, clients: others.clients });
              others = { suppressed: 0, since: null, clients: 0 };
            }
            const got = pending;
            expect(got.filter((l) => l.client !== null).length).toBeLessThanOrEqual(NAMED_SUMMARIES);
            expect(got.filter((l) => l.client === null).length).toBeLessThanOrEqual(1);
            // The named lines are those with the most suppressed: none folded had more than any named.
            const named = got.filter((l) => l.client !== null);
            const least = Math.min(...named.map((l) => l.suppressed));
            const foldedMost = Math.max(0, ...waiting.slice(NAMED_SUMMARIES).map(([, b]) => b.suppressed));
            if (named.length === NAMED_SUMMARIES) expect(foldedMost).toBeLessThanOrEqual(least);
            expect(got).toEqual(expected);
            lines.push(got);
          };
          for (const step of steps) {
            if (step.kind === 'refuse') for (let i = 0; i < step.count; i++) refuse(`127.0.0.${step.client + 1}`);
            else if (step.kind === 'rotate') for (let i = 0; i < step.fresh; i++) refuse(`10.${(fresh >> 16) & 255}.${(fresh >> 8) & 255}.${fresh++ & 255}`);
            else if (step.kind === 'advance') {
              now += step.ms;
            } else flush();
          }
          // The envelopes, on the latest time the limiter had read at each traced refusal.
          expect(envelopeHolds(serverTraced, serverBurst, serverPerSecond), 'server-wide bucket overrun').toBe(true);
          for (const [client, b] of buckets) expect(envelopeHolds(b.traced, burst, perSecond), `${client}'s bucket overrun`).toBe(true);
          // session_end flushes what is left: nothing is lost.
          pending = [];
          void limiter.close();
          lines.push(pending);
          const summarised = lines.flat().reduce((n, l) => n + l.suppressed, 0);
          expect(traced + summarised, 'refusals traced + summarised').toBe(made);
        }),
      ),
  });
});
