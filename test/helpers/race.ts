// Races a renameat2 swapper (test/helpers/swapper.c) against operations until enough interleavings
// were observed. Nothing here counts how much work fits in a fixed time: a slow or busy machine only
// makes a race take longer, and if even a generous wall-clock cap passes first the test is skipped
// loudly rather than failed.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, type TestContext } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));

export function swapperBinary(): string {
  const src = join(here, 'swapper.c');
  const out = join(here, '..', '..', 'build', 'test-swapper');
  if (!existsSync(out) || statSync(out).mtimeMs < statSync(src).mtimeMs) {
    mkdirSync(dirname(out), { recursive: true });
    execFileSync('cc', ['-O2', '-o', `${out}.tmp`, src]);
    execFileSync('mv', ['-f', `${out}.tmp`, out]);
  }
  return out;
}

export interface Swapper {
  /** Stops the swapper; resolves with the number of exchanges that succeeded and that failed. */
  stop(): Promise<{ swaps: number; failures: number }>;
}

/** Starts exchanging `a` and `b` until stopped. */
export function startSwapper(a: string, b: string): Swapper {
  const child = spawn(swapperBinary(), [a, b], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<{ swaps: number; failures: number }>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (code !== 0) return reject(new Error(`swapper exited ${code ?? signal}`));
      const [swaps, failures] = out.trim().split(' ').map(Number);
      resolve({ swaps: swaps!, failures: failures! });
    });
  });
  return {
    stop: () => {
      child.kill('SIGTERM');
      return exited;
    },
  };
}

/** The default wall-clock cap of one race; a test running n races needs a timeout above n times it. */
export const RACE_CAP_MS = 40_000;
/** A test timeout for `n` races in one test. */
export const racesTimeout = (n: number) => ({ timeout: n * RACE_CAP_MS + 30_000 });

export interface RaceOptions {
  /** One operation against the system under test; returns the outcome to tally. */
  step: () => Promise<string>;
  /** True once the tally shows enough interleavings for the test to mean something. */
  enough: (seen: Map<string, number>) => boolean;
  workers?: number;
  /** Wall-clock cap after which the race is skipped (loudly), never failed. */
  capMs?: number;
}

/**
 * Runs `step` from several workers while `a` and `b` trade places, until `enough` holds. Every
 * assertion inside `step` still applies to every operation; only the stopping rule is count-based.
 */
export async function raceSwaps(ctx: TestContext, a: string, b: string, opts: RaceOptions): Promise<Map<string, number>> {
  const swapper = startSwapper(a, b);
  try {
    return await raceUntil(ctx, { ...opts, workers: opts.workers ?? 4 });
  } finally {
    const { swaps } = await swapper.stop();
    expect(swaps, 'the swapper made no exchange at all').toBeGreaterThan(0);
  }
}

/**
 * Skips the test, loudly: the interleaving it exists for did not happen, so passing would claim
 * something it never checked. Assertions already made still stand (a failure before this fails).
 */
export function skipRace(ctx: TestContext, what: string): never {
  const note = `race skipped: ${what}`;
  console.warn(`\n*** ${ctx.task.name}: ${note}\n`);
  return ctx.skip(note); // throws: nothing after a skip runs
}

/** Skips the test loudly unless the interesting outcome named `what` was seen at least `min` times. */
export function requireSeen(ctx: TestContext, what: string, seen: number, min = 1): void {
  if (seen < min) skipRace(ctx, `${what}: seen ${seen} time(s), wanted at least ${min}`);
}

/**
 * Polls `cond` until it holds or `capMs` passes; true if it held. For waiting until a race is set
 * up (a hash under way, a writer parked) instead of sleeping a guessed time and hoping.
 */
export async function until(cond: () => boolean, capMs = RACE_CAP_MS, stepMs = 5): Promise<boolean> {
  const deadline = Date.now() + capMs;
  for (;;) {
    if (cond()) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export interface TallyOptions {
  /** One operation; returns the outcome to tally (assertions inside apply to every operation). */
  step: () => Promise<string> | string;
  /** True once the tally shows enough interleavings for the test to mean something. */
  enough: (seen: Map<string, number>) => boolean;
  /** Wall-clock cap after which the test is skipped (loudly), never failed. */
  capMs?: number;
  workers?: number;
}

/**
 * raceSwaps without the swapper: runs `step` (from `workers` loops) against a race the test set up
 * itself (a writer process, a churn child) until `enough` holds, or skips loudly at the cap.
 */
export async function raceUntil(ctx: TestContext, opts: TallyOptions): Promise<Map<string, number>> {
  const seen = new Map<string, number>();
  const deadline = Date.now() + (opts.capMs ?? RACE_CAP_MS);
  let finished = false;
  const worker = async () => {
    while (!finished && Date.now() < deadline) {
      const key = await opts.step();
      seen.set(key, (seen.get(key) ?? 0) + 1);
      if (opts.enough(seen)) finished = true;
    }
  };
  await Promise.all(Array.from({ length: opts.workers ?? 1 }, worker));
  if (!finished) skipRace(ctx, `the cap passed before enough interleavings were seen (${JSON.stringify([...seen])})`);
  return seen;
}

/** At least `min` operations in all, and at least one of each listed outcome. */
export function sawAll(min: number, ...keys: Array<string | ((k: string) => boolean)>) {
  return (seen: Map<string, number>): boolean => {
    let total = 0;
    for (const n of seen.values()) total += n;
    if (total < min) return false;
    return keys.every((k) => (typeof k === 'string' ? (seen.get(k) ?? 0) > 0 : [...seen.keys()].some(k)));
  };
}
