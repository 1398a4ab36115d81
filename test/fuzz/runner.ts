// How every property in test/fuzz runs: counted in runs (never in time), with a seed that is always
// chosen here and printed on failure together with fast-check's counterexample path and the one
// command that replays exactly that case. Environment:
//   FUZZ_SEED      the seed (default: fresh per property and per run)
//   FUZZ_PATH      a counterexample path to replay (with FUZZ_SEED and FUZZ_PROPERTY)
//   FUZZ_PROPERTY  run only the property of that name (the others are skipped)
//   FUZZ_SKIP      skip these properties (comma-separated names), e.g. one failing on an open bug
//   FUZZ_SCALE     multiply every property's run count (npm run fuzz uses this; default 1)
//   FUZZ_RUNS      force one run count for every property
//   FUZZ_LOG       append one JSON line per property run (seed, runs, outcome) to this file
//   FUZZ_SHRINK_SECONDS  how long shrinking may run after the first failure (default 120)
//   FUZZ_DEBUG     the HTTP properties print each request's time and status
import { appendFileSync } from 'node:fs';
import { relative } from 'node:path';
import fc from 'fast-check';
import { it } from 'vitest';

const env = process.env;

export const FUZZ_SCALE = env.FUZZ_SCALE ? Number(env.FUZZ_SCALE) : 1;
if (!(FUZZ_SCALE > 0)) throw new Error(`FUZZ_SCALE must be a positive number, not '${env.FUZZ_SCALE}'`);

function freshSeed(): number {
  // The same shape fast-check uses for its own default seed: a 32-bit integer.
  return (Date.now() ^ Math.floor(Math.random() * 0x100000000)) | 0;
}

function parseSeed(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n)) throw new Error(`FUZZ_SEED must be an integer, not '${text}'`);
  return n | 0;
}

function quote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** The command that replays one failing case. */
export function replayCommand(property: string, file: string, seed: number, path: string | null): string {
  const parts = [`FUZZ_PROPERTY=${quote(property)}`, `FUZZ_SEED=${seed}`];
  if (path) parts.push(`FUZZ_PATH=${quote(path)}`);
  parts.push('npx vitest run', relative(process.cwd(), file) || file);
  return parts.join(' ');
}

/**
 * The state of the property being checked, for guard(): the first failure (printed at once, and
 * kept for the report even when shrinking changes what fails) and the shrink deadline.
 */
const current = { firstFailure: null as string | null, shrinkDeadline: Infinity };

/** Seconds shrinking may take after the first failure (FUZZ_SHRINK_SECONDS, default 120). */
const SHRINK_MS = Number(env.FUZZ_SHRINK_SECONDS ?? 120) * 1000;

function noteFailure(args: unknown[], error: unknown): void {
  // fc.pre() skips a case by throwing; that is not a failure.
  if (current.firstFailure !== null || fc.PreconditionFailure.isFailure(error)) return;
  const message = error instanceof Error ? error.message : String(error);
  current.firstFailure = `${message}\non ${fc.stringify(args).slice(0, 4000)}`;
  current.shrinkDeadline = Date.now() + SHRINK_MS;
  console.error(`first failure (before shrinking):\n${current.firstFailure}`);
}

/**
 * Wraps a property's predicate: records the first failure, and once shrinking has run past its
 * budget answers every further candidate as passing, so fast-check stops at the smallest failing
 * case found so far (whose path still replays) instead of shrinking an HTTP case for an hour.
 */
export function guard<A extends unknown[]>(fn: (...args: A) => Promise<unknown>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    if (Date.now() > current.shrinkDeadline) return;
    try {
      await fn(...args);
    } catch (error) {
      noteFailure(args, error);
      throw error;
    }
  };
}

/** guard() for synchronous properties. */
export function guardSync<A extends unknown[]>(fn: (...args: A) => unknown): (...args: A) => void {
  return (...args: A) => {
    if (Date.now() > current.shrinkDeadline) return;
    try {
      fn(...args);
    } catch (error) {
      noteFailure(args, error);
      throw error;
    }
  };
}

export interface FuzzSpec<Ts> {
  /** Unique across test/fuzz: FUZZ_PROPERTY selects by it. */
  name: string;
  /** import.meta.filename of the test file, for the replay command. */
  file: string;
  /** Runs in the bounded run of `npm test`; multiplied by FUZZ_SCALE. */
  runs: number;
  property: () => fc.IAsyncProperty<Ts> | fc.IProperty<Ts>;
  /** Per-test timeout in the bounded run (scaled with the runs). */
  timeoutMs?: number;
  /**
   * Fixed cases run first in every run, whatever the seed (fast-check's `examples`), so that every
   * run reaches every threshold and every kind of entry; the random runs come after, `runs` of them.
   */
  examples?: () => Ts[];
}

/** Runs the property once with explicit parameters; throws a report naming seed, path and replay. */
export async function checkProperty<Ts>(spec: FuzzSpec<Ts>): Promise<void> {
  const seed = env.FUZZ_SEED ? parseSeed(env.FUZZ_SEED) : freshSeed();
  const path = env.FUZZ_PATH || undefined;
  const numRuns = env.FUZZ_RUNS ? Number(env.FUZZ_RUNS) : Math.max(1, Math.round(spec.runs * FUZZ_SCALE));
  const started = Date.now();
  current.firstFailure = null;
  current.shrinkDeadline = Infinity;
  const examples = spec.examples?.() ?? [];
  // Replaying a path runs that case as it is: no further shrinking.
  const details = await fc.check(spec.property() as fc.IAsyncProperty<Ts>, {
    seed,
    path,
    numRuns: numRuns + examples.length,
    examples,
    endOnFailure: path !== undefined,
  });
  if (env.FUZZ_LOG) {
    appendFileSync(
      env.FUZZ_LOG,
      `${JSON.stringify({
        property: spec.name,
        seed,
        runs: details.numRuns,
        shrinks: details.numShrinks,
        ms: Date.now() - started,
        failed: details.failed,
        path: details.counterexamplePath,
      })}\n`,
    );
  }
  if (!details.failed) return;
  const replay = replayCommand(spec.name, spec.file, details.seed, details.counterexamplePath);
  const report = fc.defaultReportMessage(details) ?? 'property failed';
  const cause = details.errorInstance instanceof Error ? (details.errorInstance.stack ?? details.errorInstance.message) : String(details.errorInstance);
  const header = `fuzz property '${spec.name}' failed: seed ${details.seed}, path ${details.counterexamplePath ?? '(none)'}\nreplay: ${replay}`;
  // Printed at once as well, so that a long run's log holds it even if the runner truncates errors.
  console.error(header);
  const first = current.firstFailure ? `\n\nfirst failure, before shrinking:\n${current.firstFailure}` : '';
  throw new Error(`${header}\n\n${report}\n\nerror on the shrunk case:\n${cause}${first}`);
}

/** Declares a vitest test for a property; skipped when FUZZ_PROPERTY names another one. */
export function fuzzIt<Ts>(spec: FuzzSpec<Ts>): void {
  const only = env.FUZZ_PROPERTY;
  const skipped = (env.FUZZ_SKIP ?? '')
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean);
  // Shrinking an HTTP counterexample can take minutes: failing runs get a long timeout.
  const timeout = Math.round((spec.timeoutMs ?? 60_000) * Math.max(1, FUZZ_SCALE)) + (env.FUZZ_RUNS || env.FUZZ_PATH ? 30 * 60_000 : 0);
  it.skipIf((only !== undefined && only !== '' && only !== spec.name) || skipped.includes(spec.name))(spec.name, () => checkProperty(spec), timeout);
}
