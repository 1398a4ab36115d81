// Every size threshold the read and list paths have, read from where the code defines them (the
// addon's one table, native/limits.h, as native.LIMITS), so that a threshold that moves moves the
// generated sizes with it: the synchronous small read, the copy into V8 memory, the streaming
// threshold (a larger body is streamed under a verified etag), the digest cache's size limit for
// reads and for listings, and a per-file max_bytes above all of them. Generators take sizes on both sides of each
// (n - 1, n, n + 1) as a fixed prefix of every run, and random sizes around them after.
import fc from 'fast-check';
import { LIMITS } from '../../src/addon/export.js';

/**
 * How long after its last change a file counts as settled: the racy margin (native/digest_cache.h:
 * kRacyMarginNs, 2 s), plus slack for the clock's tick. Younger, a large read is a snapshot
 * (native/stream.cc) and no digest is stored; older, it streams and may be cached.
 */
export const SETTLED_AFTER_MS = 2_300;

/** Waits until something last changed at `changedAt` (ms since the epoch) has settled. */
export async function settledSince(changedAt: number): Promise<void> {
  const wait = changedAt + SETTLED_AFTER_MS - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
}

export const CACHED_READ_MIN_BYTES = LIMITS.cachedReadMinBytes;

/** A max_bytes above every other threshold, so each is crossed by a servable file. */
export const BIG_MAX_BYTES = Math.max(LIMITS.syncReadMaxBytes, LIMITS.copiedReadMaxBytes, LIMITS.streamThresholdBytes, CACHED_READ_MIN_BYTES) + 40_000;

export const THRESHOLDS: ReadonlyArray<{ name: string; bytes: number }> = [
  { name: 'syncReadMaxBytes', bytes: LIMITS.syncReadMaxBytes },
  { name: 'copiedReadMaxBytes', bytes: LIMITS.copiedReadMaxBytes },
  { name: 'streamThresholdBytes', bytes: LIMITS.streamThresholdBytes },
  { name: 'cachedReadMinBytes', bytes: CACHED_READ_MIN_BYTES },
  // A listing asks the digest cache (under a lease) only from this size: below it, it hashes.
  { name: 'listingCachedMinBytes', bytes: LIMITS.listingCachedMinBytes },
  { name: 'max_bytes', bytes: BIG_MAX_BYTES },
];

/** 0, 1, and n - 1, n, n + 1 for every threshold (max_bytes + 1 is the first refused size). */
export const EDGE_SIZES: readonly number[] = [0, 1, ...new Set(THRESHOLDS.flatMap(({ bytes }) => [bytes - 1, bytes, bytes + 1]))].sort((a, b) => a - b);

/** Sizes: an edge, or anywhere near one. */
export const sizeArb: fc.Arbitrary<number> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...EDGE_SIZES) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom(...THRESHOLDS.map((t) => t.bytes)), fc.integer({ min: -64, max: 64 })).map(([b, d]) => Math.max(0, b + d)) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: BIG_MAX_BYTES + 2 }) },
);
