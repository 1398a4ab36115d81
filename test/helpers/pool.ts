// Holding every libuv pool thread, so that native operations queue behind them: each thread is
// parked in the open of a FIFO that has no writer (the kernel's wait_for_partner), and released by
// opening the FIFOs for writing. A test that needs "queued, not yet run" uses this instead of a
// delay; `parked()` says whether it really happened.
import { execFileSync } from 'node:child_process';
import { closeSync, constants, openSync, readdirSync, readFileSync } from 'node:fs';
import { open as openAsync } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface HeldPool {
  /** Pool threads asleep in a FIFO open now. */
  parked(): number;
  /** Offers writers until every open has returned, then closes them. */
  release(): Promise<void>;
  threads: number;
}

/** Parks every pool thread (and two more opens queued behind them) on FIFOs made in `dir`. */
export function holdPool(dir: string): HeldPool {
  const threads = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
  const fifos = Array.from({ length: threads + 2 }, (_, i) => join(dir, `p${i}`));
  for (const p of fifos) execFileSync('mkfifo', [p]);
  const held = fifos.map((p) => openAsync(p, 'r'));
  const released = new Set<string>();
  return {
    threads,
    parked: () =>
      readdirSync('/proc/self/task').filter((t) => {
        try {
          return readFileSync(`/proc/self/task/${t}/wchan`, 'utf8') === 'wait_for_partner';
        } catch {
          return false;
        }
      }).length,
    // A FIFO's open returns once a writer comes; an open still queued for a thread has no reader
    // yet (ENXIO), so writers are offered until every open has returned.
    release: async () => {
      let settled = false;
      void Promise.allSettled(held).then(() => (settled = true));
      while (!settled) {
        for (const p of fifos) {
          if (released.has(p)) continue;
          try {
            closeSync(openSync(p, constants.O_WRONLY | constants.O_NONBLOCK));
            released.add(p);
          } catch {
            // not being opened yet
          }
        }
        await sleep(10);
      }
      for (const h of held)
        await h.then(
          (f) => f.close(),
          () => undefined,
        );
    },
  };
}
