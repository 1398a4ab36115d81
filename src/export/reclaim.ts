// Returning read buffers to the system once clients are done with them. A read's bytes live in
// native memory owned by a Node Buffer and are freed only when V8 collects that Buffer; V8 collects
// when JS allocates, and a server whose clients just left allocates nothing, so hundreds of MiB of
// dead buffers could stay resident indefinitely. When a large amount of buffer memory has been let go
// (the memory budget says so), a collection is asked for, at most once per interval.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** Buffer memory released since the last collection that makes another one worth it. */
export const RECLAIM_AFTER_BYTES = 32 * 1024 * 1024;
const MIN_INTERVAL_MS = 500;

let gc: (() => void) | null | undefined;

function collector(): (() => void) | null {
  if (gc !== undefined) return gc;
  try {
    // The documented way to reach V8's collector without starting node with --expose-gc.
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  } catch {
    gc = null;
  }
  return gc;
}

let released = 0;
let timer: NodeJS.Timeout | null = null;
let last = 0;

/**
 * Buffer memory let go but not yet collected: still resident, so the memory budget counts it as
 * held (src/export/budget.ts). Zero where the collector cannot be reached: then V8 alone decides.
 */
export function pendingReclaim(): number {
  return collector() ? released : 0;
}

/** Collects now (synchronously), so what was let go is really given back before more is taken. */
export function collectNow(): void {
  const collect = collector();
  if (!collect || released === 0) return;
  released = 0;
  last = Date.now();
  collect();
}

/** Notes `bytes` of buffer memory no longer needed; collects once enough has accumulated. */
export function noteReleased(bytes: number): void {
  released += bytes;
  if (released < RECLAIM_AFTER_BYTES || timer) return;
  const wait = Math.max(0, last + MIN_INTERVAL_MS - Date.now());
  timer = setTimeout(() => {
    timer = null;
    released = 0;
    last = Date.now();
    collector()?.();
  }, wait);
  timer.unref();
}
