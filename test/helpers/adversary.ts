// What the adversarial suites share (test/export/adversarial.test.ts, test/http/*, test/cli/hostile-listing.test.ts):
// the planted secret they must never leak, a files plane over a tree, child processes reaped when
// the test ends, and an inotify watcher that proves whether the server opened a file.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { expect } from 'vitest';
import type { Containment } from '../../src/manifest/model.js';
import type * as native from '../../src/addon/export.js';
import { capsule, filesManifest, type Capsule } from './capsule.js';
import { reap } from './cleanup.js';
import { sha256Hex, type RawResponse } from './http.js';
import { until } from './race.js';

export const SECRET = 'ADVERSARY-OUTSIDE-SECRET-7f3a';
export const SECRET_SHA = sha256Hex(SECRET);
export const INSIDE = 'inside bytes';

// ── Plumbing ────────────────────────────────────────────────────────────────────────────────────

/** The files plane over `workdir` (sealed unless said otherwise), closed when the test finishes. */
export function up(
  workdir: string,
  opts: { containment?: Containment; resolver?: native.ResolverKind; maxBytes?: number; root?: string } = {},
): Promise<Capsule> {
  return capsule({
    workdir,
    yaml: filesManifest(opts.root ?? 'out/', opts.maxBytes),
    containment: opts.containment ?? 'sealed',
    resolver: opts.resolver,
  });
}

/**
 * A child process killed (by its own pid) when the test ends. Helpers are not what is under test:
 * they start without the sanitizer runtime the ASan suite preloads (python starts slowly under it).
 */
export function child(cmd: string, args: string[]): ChildProcess {
  const env = { ...process.env };
  for (const name of ['LD_PRELOAD', 'ASAN_OPTIONS', 'UBSAN_OPTIONS']) delete env[name];
  return reap(spawn(cmd, args, { stdio: ['ignore', 'pipe', 'ignore'], env }));
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whatever the answer, it never carries the planted secret or its hash. */
export function expectNoSecret(res: RawResponse): void {
  const text = res.raw.toString('latin1');
  expect(text).not.toContain(SECRET);
  expect(text).not.toContain(SECRET_SHA);
}

export function codeOf(res: RawResponse): string {
  if (res.status === 200) return 'ok';
  try {
    return String(res.json().error);
  } catch {
    return `http_${res.status}`;
  }
}

/** Reads `/resources/files/<rel>` and lists, over fresh connections, until `done()` (bounded). */
/** One request of a race: checks that nothing outside leaked, and names the outcome `list:code`/`read:code`. */

/** A Python inotify watcher that prints one `open` line per IN_OPEN on the watched paths. */
const WATCH_OPENS = `
import ctypes, os, struct, sys, select
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
for p in sys.argv[1:]:
    if libc.inotify_add_watch(fd, p.encode(), 0x20) < 0: sys.exit(3)
print('ready', flush=True)
for _ in range(600):
    r, _, _ = select.select([fd], [], [], 0.1)
    if not r: continue
    data = os.read(fd, 4096); off = 0
    while off < len(data):
        wd, mask, cookie, ln = struct.unpack_from('iIII', data, off)
        print('open', flush=True); off += 16 + ln
`;

export async function watchOpens(paths: string[]): Promise<() => number> {
  const w = child('python3', ['-c', WATCH_OPENS, ...paths]);
  let out = '';
  w.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const deadline = Date.now() + 5000;
  while (!out.includes('ready')) {
    if (Date.now() > deadline) throw new Error('inotify watcher did not start');
    await sleep(10);
  }
  return () => out.split('\n').filter((l) => l === 'open').length;
}

/**
 * The IN_OPEN events on `node` caused before this call, read in order rather than after a guessed
 * delay: opens `node` itself and waits (bounded) for that open to be reported, so every earlier one
 * has been too (inotify reports in order); a watcher that never reports fails, never passes.
 */
export async function opensBefore(opens: () => number, node: string): Promise<number> {
  const before = opens();
  closeSync(openSync(node, 'r'));
  await until(() => opens() > before, 10_000);
  expect(opens(), 'the watcher reported the canary open').toBeGreaterThan(before);
  return opens() - 1;
}
