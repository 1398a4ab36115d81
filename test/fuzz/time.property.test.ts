// Time, against a clock the test controls (Session.now; nothing sleeps). A handle minted through
// the share-file tool at clock time t with a requested ttl expires at exactly t + min(ttl, max_ttl)
// seconds, in Unix ms (SPEC 6: "clamps the TTL down to max_ttl (absent: max_ttl)", `exp` in Unix
// ms); it redeems, over real HTTP and in process, exactly while `exp` is in the future (`exp > now`:
// at exp itself it is expired), whatever the clock says: around the boundary to the millisecond
// and the second, around the ttl, and far from the wall clock.
import { createHash } from 'node:crypto';
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { verifyTokenForTests } from '../../src/handle/token.js';
import { callTool } from '../../src/tools/index.js';
import { rawGet } from '../helpers/http.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, TestClock, type Served } from './capsules.js';
import { fuzzIt, guard } from './runner.js';

const MAX_TTL_SECS = 600;
const CONTENT = Buffer.from('the bytes a handle names\n');

let base: string;
let clock: TestClock;
let sharer: Served;
let peer: Served;

beforeAll(async () => {
  base = tempDir('rp-fuzz-time-');
  const traceDir = join(base, 'traces');
  const sharerDir = join(base, 'sharer');
  const peerDir = join(base, 'peer');
  mkdirSync(join(sharerDir, 'out'), { recursive: true });
  mkdirSync(peerDir);
  writeFileSync(join(sharerDir, 'out', 'report.md'), CONTENT);
  clock = new TestClock();
  peer = await serveCapsule({ workdir: peerDir, traceDir, yaml: 'name: Reader\nversion: "1"\n' });
  sharer = await serveCapsule({
    workdir: sharerDir,
    traceDir,
    clock,
    yaml: `name: sharer\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: ${MAX_TTL_SECS}s\n    max_bytes: 1Ki\ncapabilities:\n  network:\n    allow: [127.0.0.1]\n`,
  });
});

afterAll(async () => {
  await sharer?.close();
  await peer?.close();
  removeTree(base);
});

// ── The model ────────────────────────────────────────────────────────────────────────────────────

/** SPEC 2's duration grammar, in seconds: trimmed digits, optional lowercase s/m/h/d, > 0, no overflow. */
function durationSecs(text: string): number | null {
  const m = /^([0-9]+)([smhd])?$/.exec(text.trim());
  if (!m) return null;
  const v = BigInt(m[1]!) * { s: 1n, m: 60n, h: 3600n, d: 86400n, '': 1n }[m[2] ?? '']!;
  return v === 0n || v > BigInt(Number.MAX_SAFE_INTEGER) ? null : Number(v);
}

/** The expiry a mint at `now` gets: the requested ttl clamped down to max_ttl (absent: max_ttl). */
function modelExpiry(now: number, ttl: string | undefined): number | 'invalid_ttl' {
  if (ttl === undefined) return now + MAX_TTL_SECS * 1000;
  const secs = durationSecs(ttl);
  if (secs === null) return 'invalid_ttl';
  return now + Math.min(secs, MAX_TTL_SECS) * 1000;
}

/** SPEC 6: `exp` in the future, else expired. */
const modelLive = (exp: number, now: number) => exp > now;

// ── Generators ───────────────────────────────────────────────────────────────────────────────────

/** Requested ttls on both sides of the ceiling, in every unit, and a few that do not parse. */
const ttlArb: fc.Arbitrary<string | undefined> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  {
    weight: 8,
    arbitrary: fc
      .tuple(
        fc.oneof(
          fc.constantFrom(1, 2, 9, 10, 11, 59, 60, 61, MAX_TTL_SECS - 1, MAX_TTL_SECS, MAX_TTL_SECS + 1, 3600, 86400),
          fc.integer({ min: 1, max: 10 * MAX_TTL_SECS }),
        ),
        fc.constantFrom('', 's', 'm', 'h', 'd'),
        fc.constantFrom('', '', '', ' '),
      )
      .map(([n, unit, pad]) => `${pad}${n}${unit}${pad}`),
  },
  { weight: 1, arbitrary: fc.constantFrom('0', '0s', '-1', '5 minutes', '30S', '10M', '1.5', '', ' ', '99999999999999999999d', '1e3', 'ten') },
);

/** Where the clock stands when the handle is presented, relative to its exp. */
const offsetArb = (ttlMs: number): fc.Arbitrary<number> =>
  fc.oneof(fc.constantFrom(-1000, -1, 0, 1, 999, 1000, 1001, -ttlMs, -ttlMs + 1, -ttlMs - 1), fc.integer({ min: -2 * ttlMs - 5000, max: 2 * ttlMs + 5000 }));

/** Mint times: near the wall clock, and anywhere from the epoch to far ahead (exp stays a safe integer). */
const mintTimeArb = fc.oneof(
  fc.integer({ min: -86_400_000, max: 86_400_000 }).map((d) => Date.now() + d),
  fc.integer({ min: 0, max: 2 ** 45 }),
  fc.constantFrom(0, 1, 999, 1000),
);

describe('handle expiry against the session clock', () => {
  fuzzIt({
    name: 'time-expiry',
    file: import.meta.filename,
    runs: 30,
    timeoutMs: 120_000,
    // Invariant: a handle minted at t with ttl r has exp = t + min(r, max_ttl)*1000 and redeems iff exp > now.
    property: () =>
      fc.asyncProperty(
        mintTimeArb,
        ttlArb,
        fc.array(fc.nat(), { minLength: 1, maxLength: 4 }),
        guard(async (mintAt, ttl, picks) => {
          clock.t = mintAt;
          const expected = modelExpiry(mintAt, ttl);
          const args: Record<string, unknown> = { path: 'report.md', peer: peer.address };
          if (ttl !== undefined) args.ttl = ttl;
          let result: Record<string, unknown>;
          try {
            result = await callTool(sharer.launched.session, 'share-file', args);
          } catch (error) {
            expect((error as { code?: string }).code, `share-file ttl ${JSON.stringify(ttl)} at ${mintAt}`).toBe(expected);
            return;
          }
          const label = `share-file ttl ${JSON.stringify(ttl)} at ${mintAt}`;
          expect(expected, `${label}: minted where the model refuses`).not.toBe('invalid_ttl');
          const exp = expected as number;
          expect(result.expires_at_ms, label).toBe(exp);
          expect(result.audience, label).toBe(peer.audience);
          const token = String(result.handle);
          // The payload carries the same exp the result reports.
          const payload = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as { exp: number };
          expect(payload.exp, label).toBe(exp);
          const ttlMs = exp - mintAt;
          // Every boundary in every case (at exp, a millisecond and a second either side, and
          // around the mint itself), then a few anywhere.
          const boundaries = [-1000, -1, 0, 1, 1000, -ttlMs, -ttlMs + 1];
          const sampled = picks.map((pick) => fc.sample(offsetArb(ttlMs), { seed: pick, numRuns: 1 })[0]!);
          for (const offset of [...boundaries, ...sampled]) {
            const now = exp + offset;
            const live = modelLive(exp, now);
            const at = `${label}: presented at exp${now - exp >= 0 ? '+' : ''}${now - exp} ms`;
            // In process: the verifier with the clock passed in.
            const v = verifyTokenForTests(sharer.launched.session.key!, token, peer.audience, sharer.launched.session.sessionId, now);
            expect(v.ok ? 'ok' : v.reason, at).toBe(live ? 'ok' : 'expired');
            // Over HTTP: the redeem reads the session's clock.
            clock.t = now;
            const res = await rawGet(sharer.url, `/resources/peer/${token}`, [['x-murmur-audience', peer.audience]]);
            expect(res.status, at).toBe(live ? 200 : 410);
            if (live) {
              expect(res.body.equals(CONTENT), at).toBe(true);
              expect(res.header('etag'), at).toBe(`"sha256:${createHash('sha256').update(CONTENT).digest('hex')}"`);
            } else {
              expect(res.json().error, at).toBe('handle_expired');
            }
          }
        }),
      ),
  });
});
