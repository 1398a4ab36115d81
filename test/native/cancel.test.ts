// Listings that end (issue 9, item 1): the native hash loop asks a cancel token and a deadline
// before every chunk, so a listing of a 1 TiB sparse file (free for a capsule to make, many
// minutes to hash) stops as soon as its client is gone or its time budget is spent, and gives its
// pool thread back. The bounds asserted here are seconds against minutes: a worker that did not
// notice would keep hashing for the whole 1 TiB.
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { renderHttp } from '../../src/codes.js';
import { refusalFromNative } from '../../src/export/export-view.js';
import * as native from '../../src/addon/export.js';
import { listForTests } from '../../src/addon/for-tests.js';
import { skipRace, until } from '../helpers/race.js';
import { removeTree, tempDir } from '../helpers/tree.js';

/** Far below the time a 1 TiB hash takes (minutes), far above any scheduling noise. */
const SETTLES_WITHIN_MS = 15_000;

let workdir: string;
let workdirFd: number;
const opts = (): native.ResolveOptions => ({ refuseSymlinks: false, resolver: native.chooseResolver() });

beforeAll(async () => {
  workdir = tempDir('rp-cancel-');
  mkdirSync(join(workdir, 'huge'));
  execFileSync('truncate', ['-s', '1T', join(workdir, 'huge', 'sparse')]);
  mkdirSync(join(workdir, 'small'));
  writeFileSync(join(workdir, 'small', 'a'), 'a');
  workdirFd = await native.openDirectory(workdir);
});

afterAll(() => {
  native.closeFd(workdirFd);
  removeTree(workdir);
});

/** Resolves with how long `p` took to settle after this call, and how it settled. */
async function settle<T>(p: Promise<T>): Promise<{ ms: number; error?: native.NativeError; value?: T }> {
  const t0 = performance.now();
  try {
    const value = await p;
    return { ms: performance.now() - t0, value };
  } catch (error) {
    return { ms: performance.now() - t0, error: error as native.NativeError };
  }
}

/**
 * Waits (bounded) until `n` more whole-file hashes began than at `s0`; if they never did, stops the
 * listings (`stop`) and skips loudly: a cancel that lands before the hash proves nothing here.
 */
async function hashing(ctx: TestContext, s0: native.DigestCacheStats, n: number, stop: () => Promise<unknown>): Promise<void> {
  if (!(await until(() => native.digestCacheStats().hashes - s0.hashes >= n))) {
    await stop();
    skipRace(ctx, `${n} listing(s) never started hashing, so no cancel could land mid-hash`);
  }
}

/** True if `p` is still pending after `ms`. */
async function pendingAfter(p: Promise<unknown>, ms: number): Promise<boolean> {
  const marker = Symbol('pending');
  const first = await Promise.race([
    p.then(
      () => null,
      () => null,
    ),
    sleep(ms).then(() => marker),
  ]);
  return first === marker;
}

describe('cancelling a listing', () => {
  it('stops a listing in the middle of hashing a 1 TiB sparse file', async () => {
    const token = native.cancelToken();
    const listing = listForTests(workdirFd, 'huge', { ...opts(), cancel: token });
    expect(await pendingAfter(listing, 300), 'the listing was still hashing').toBe(true);
    token.cancel();
    expect(token.cancelled).toBe(true);
    const out = await settle(listing);
    expect(out.error).toBeInstanceOf(native.NativeError);
    expect(out.error).toMatchObject({ code: 'CANCELLED', detail: 'the listing was cancelled' });
    expect(out.ms).toBeLessThan(SETTLES_WITHIN_MS);
  });

  it('gives the pool back: after four cancelled listings a read is answered', async (ctx) => {
    // libuv's pool has four threads; four listings that kept hashing would hold all of them.
    const s0 = native.digestCacheStats();
    const tokens = Array.from({ length: 4 }, () => native.cancelToken());
    const listings = tokens.map((cancel) => settle(listForTests(workdirFd, 'huge', { ...opts(), cancel })));
    // Cancelled before they ran, the listings would never have held a thread: wait until every one
    // the pool can run at once is hashing.
    await hashing(ctx, s0, Math.min(4, Number(process.env.UV_THREADPOOL_SIZE ?? 4)), () => {
      for (const t of tokens) t.cancel();
      return Promise.all(listings);
    });
    for (const t of tokens) t.cancel();
    const read = await settle(native.readFile(workdirFd, 'small', 'a', 10, opts()));
    expect(read.value?.bytes.toString()).toBe('a');
    for (const l of await Promise.all(listings)) expect(l.error?.code).toBe('CANCELLED');
  });

  it('follows an AbortSignal, and a token cancelled before the call stops it at once', async (ctx) => {
    const controller = new AbortController();
    const s0 = native.digestCacheStats();
    const listing = settle(listForTests(workdirFd, 'huge', { ...opts(), cancel: native.cancelToken(controller.signal) }));
    // The abort lands mid-hash, not before the listing looked at its token.
    await hashing(ctx, s0, 1, () => (controller.abort(), listing));
    controller.abort();
    expect((await listing).error?.code).toBe('CANCELLED');

    const early = native.cancelToken(AbortSignal.abort());
    expect(early.cancelled).toBe(true);
    expect((await settle(listForTests(workdirFd, 'small', { ...opts(), cancel: early }))).error?.code).toBe('CANCELLED');
    expect((await settle(native.readFile(workdirFd, 'small', 'a', 10, { ...opts(), cancel: early }))).error).toMatchObject({
      code: 'CANCELLED',
      detail: 'the read was cancelled',
    });
  });

  it('changes nothing for an operation that is never cancelled', async () => {
    const token = native.cancelToken();
    const listed = await listForTests(workdirFd, 'small', { ...opts(), cancel: token, timeBudgetMs: 60_000 });
    expect(listed.entries.map((e) => e.path)).toEqual(['a']);
    expect((await native.readFile(workdirFd, 'small', 'a', 10, { ...opts(), cancel: token })).bytes.toString()).toBe('a');
    token.cancel(); // after the fact: nothing to stop
  });

  it('accepts only its own tokens and sane budgets', () => {
    const fake = { cancel() {}, cancelled: false } as native.CancelToken;
    expect(() => listForTests(workdirFd, 'small', { ...opts(), cancel: fake })).toThrow(/CancelToken/);
    for (const bad of [0, -1, 1.5, Number.NaN, 2 ** 31]) {
      expect(() => listForTests(workdirFd, 'small', { ...opts(), timeBudgetMs: bad }), String(bad)).toThrow(/timeBudgetMs/);
    }
  });
});

describe('a listing time budget', () => {
  it('ends the listing of a 1 TiB sparse file with TIME_BUDGET, read as io_error saying so', async () => {
    const out = await settle(listForTests(workdirFd, 'huge', { ...opts(), timeBudgetMs: 200 }));
    expect(out.error).toMatchObject({ code: 'TIME_BUDGET', detail: 'the listing exceeded its time budget of 200 ms' });
    expect(out.ms).toBeLessThan(SETTLES_WITHIN_MS);
    const refusal = renderHttp('files', refusalFromNative(out.error));
    expect(refusal.code).toBe('io_error');
    expect(refusal.status).toBe(500);
    expect(refusal.message).toBe('read failed: the listing exceeded its time budget of 200 ms');
  });

  it('maps a cancelled listing to io_error with a detail that says so', async () => {
    const token = native.cancelToken();
    token.cancel();
    const out = await settle(listForTests(workdirFd, 'huge', { ...opts(), cancel: token }));
    const refusal = renderHttp('files', refusalFromNative(out.error));
    expect(refusal.code).toBe('io_error');
    expect(refusal.message).toBe('read failed: the listing was cancelled');
  });
});
