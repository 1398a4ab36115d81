// Every size threshold the read and list paths have, read from where the code defines it, so that a
// threshold that moves moves the generated sizes with it: the synchronous small read
// (SYNC_READ_BYTES), the memory budget's counting limit (SMALL_READ_BYTES), the digest cache's size
// limit for reads (kCachedReadMinBytes in native/read.h, not exported to JS), and a per-file
// max_bytes above all of them. Generators take sizes on both sides of each (n - 1, n, n + 1) as a
// fixed prefix of every run, and random sizes around them after.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { SMALL_READ_BYTES } from '../../src/export/budget.js';
import { SYNC_READ_BYTES } from '../../src/export/export-view.js';

function nativeConstant(file: string, name: string): number {
  const text = readFileSync(join(import.meta.dirname, '../../native', file), 'utf8');
  const m = new RegExp(`${name}\\s*=\\s*([0-9 *<()]+);`).exec(text);
  if (!m) throw new Error(`test/fuzz/thresholds.ts: ${name} not found in native/${file}`);
  // Only digits, spaces, '*', '<<' and parentheses: a product or shift of literals.
  const value = Function(`"use strict"; return (${m[1]});`)() as number;
  if (!Number.isSafeInteger(value) || value <= 0) throw new Error(`${name} = ${m[1]} is not a size`);
  return value;
}

export const CACHED_READ_MIN_BYTES = nativeConstant('read.h', 'kCachedReadMinBytes');

/** A max_bytes above every other threshold, so each is crossed by a servable file. */
export const BIG_MAX_BYTES = Math.max(SYNC_READ_BYTES, SMALL_READ_BYTES, CACHED_READ_MIN_BYTES) + 40_000;

export const THRESHOLDS: ReadonlyArray<{ name: string; bytes: number }> = [
  { name: 'SYNC_READ_BYTES', bytes: SYNC_READ_BYTES },
  { name: 'SMALL_READ_BYTES', bytes: SMALL_READ_BYTES },
  { name: 'kCachedReadMinBytes', bytes: CACHED_READ_MIN_BYTES },
  { name: 'max_bytes', bytes: BIG_MAX_BYTES },
];

/** 0, 1, and n - 1, n, n + 1 for every threshold (max_bytes + 1 is the first refused size). */
export const EDGE_SIZES: readonly number[] = [
  0, 1, ...new Set(THRESHOLDS.flatMap(({ bytes }) => [bytes - 1, bytes, bytes + 1])),
].sort((a, b) => a - b);

/** Sizes: an edge, or anywhere near one. */
export const sizeArb: fc.Arbitrary<number> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...EDGE_SIZES) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom(...THRESHOLDS.map((t) => t.bytes)), fc.integer({ min: -64, max: 64 })).map(([b, d]) => Math.max(0, b + d)) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: BIG_MAX_BYTES + 2 }) },
);
