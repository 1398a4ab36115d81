// An operation holds the workdir it was called with until it is done (issue 26, finding 7; issue
// 24: native/workdir.h). When a session closes its workdir while a listing or a read is still
// queued or running, and another session opens another workdir, the kernel hands out the lowest
// free number: a worker that took the number as it finds it when it runs would list or read the
// other capsule's files. A session's workdir is a counted native Workdir, so its descriptor stays
// open (its number taken) until the last operation on it is done; a number passed by a caller is
// duplicated for the operation. Both are shown here: with every pool thread held and the number
// reused, and with a session closed under a listing that is hashing.
import { closeSync, constants, openSync, readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Refusal } from '../../src/codes.js';
import { ExportView } from '../../src/export/export-view.js';
import { openSession, type Session } from '../../src/index.js';
import { parseManifest } from '../../src/manifest/model.js';
import * as native from '../../src/addon/export.js';
import { listForTests } from '../../src/addon/for-tests.js';
import { drain, listEntries } from '../helpers/body.js';
import { defer } from '../helpers/cleanup.js';
import { holdPool } from '../helpers/pool.js';
import { skipRace, until } from '../helpers/race.js';
import { fdCount, scratch } from '../helpers/tree.js';

describe('a queued operation keeps the workdir it was called with', () => {
  it('a listing, a whole read, a stream and a stat queued before the workdir closed never see the directory that got its number', async (ctx) => {
    const first = scratch(['out/a.txt: first', 'out/mid.bin @ 100k', 'out/big.bin @ 600k']);
    const second = scratch(['out/a.txt: SECOND CAPSULE', 'out/mid.bin: SECOND', 'out/big.bin: SECOND', 'out/second-only.txt: second']);
    const fifos = scratch([]);
    const fdA = await native.openDirectory(first);
    const view = new ExportView({ workdirFd: () => fdA, root: 'out', maxBytes: 64 << 20, containment: 'sealed', resolver: native.chooseResolver() });
    const pool = holdPool(fifos);
    defer(pool.release);
    if (!(await until(() => pool.parked() >= pool.threads, 10_000))) skipRace(ctx, `only ${pool.parked()} of ${pool.threads} pool threads were held`);

    // Queued behind the held pool: each has only the number so far, and no thread to run on.
    const listing = listEntries(view);
    const whole = view.read('mid.bin');
    const streamed = view.read('big.bin');
    const stat = view.stat('a.txt');
    await new Promise((resolve) => setImmediate(resolve));
    native.closeFd(fdA);
    // Another capsule's workdir, opened on this thread (the pool is held): the lowest free number.
    const fdB = openSync(second, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_CLOEXEC);
    defer(() => closeSync(fdB));
    if (fdB !== fdA) skipRace(ctx, `the second workdir got descriptor ${fdB}, not the first's ${fdA}`);
    await pool.release();

    expect((await listing).map((e) => e.path).sort()).toEqual(['a.txt', 'big.bin', 'mid.bin']);
    const mid = await whole;
    expect(mid.size).toBe(100 * 1024);
    expect((await drain(mid))!.equals(Buffer.alloc(100 * 1024))).toBe(true);
    const big = await streamed;
    // Written moments ago, it goes as a snapshot; had the pool taken 2 s, as a settled stream.
    expect(['snapshot', 'stream']).toContain(big.kind);
    expect((await drain(big))!.equals(Buffer.alloc(600 * 1024))).toBe(true);
    expect((await stat).size).toBe('first'.length);
  });

  it('the same, given a Workdir: closed while they are queued, its number stays taken until the last of them is done', async (ctx) => {
    const first = scratch(['out/a.txt: first', 'out/mid.bin @ 100k', 'out/big.bin @ 600k']);
    const second = scratch(['out/a.txt: SECOND CAPSULE', 'out/mid.bin: SECOND', 'out/big.bin: SECOND', 'out/second-only.txt: second']);
    const fifos = scratch([]);
    const before = fdCount();
    const workdir = native.adoptWorkdir(await native.openDirectory(first));
    const [numberA] = descriptorsOn(first);
    const view = new ExportView({ workdirFd: () => workdir, root: 'out', maxBytes: 64 << 20, containment: 'sealed', resolver: native.chooseResolver() });
    const pool = holdPool(fifos);
    defer(pool.release);
    if (!(await until(() => pool.parked() >= pool.threads, 10_000))) skipRace(ctx, `only ${pool.parked()} of ${pool.threads} pool threads were held`);

    const listing = listEntries(view);
    const whole = view.read('mid.bin');
    const streamed = view.read('big.bin');
    const stat = view.stat('a.txt');
    await new Promise((resolve) => setImmediate(resolve));
    workdir.close();
    // Queued, they hold the descriptor: the next open cannot get its number.
    expect(descriptorsOn(first)).toEqual([numberA]);
    const fdB = openSync(second, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_CLOEXEC);
    let openB = true;
    defer(() => openB && closeSync(fdB));
    expect(fdB).not.toBe(numberA);
    const late = view.stat('a.txt').then(
      () => null,
      (error: unknown) => error,
    );
    await pool.release();
    // Called after the close: refused.
    expect(await late).toMatchObject({ code: 'io_error', detail: 'the workdir is closed' });

    expect((await listing).map((e) => e.path).sort()).toEqual(['a.txt', 'big.bin', 'mid.bin']);
    expect((await drain(await whole))!.equals(Buffer.alloc(100 * 1024))).toBe(true);
    expect((await drain(await streamed))!.equals(Buffer.alloc(600 * 1024))).toBe(true);
    expect((await stat).size).toBe('first'.length);
    expect(descriptorsOn(first)).toEqual([]);
    closeSync(fdB);
    openB = false;
    expect(fdCount()).toBe(before);
  });
});

/** The descriptors of this process open on exactly `dir`. */
function descriptorsOn(dir: string): number[] {
  return readdirSync('/proc/self/fd')
    .filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === dir;
      } catch {
        return false; // the directory listing's own descriptor, gone already
      }
    })
    .map(Number);
}

const MANIFEST = parseManifest('name: workdir-test\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n');

async function sessionOver(workdir: string, records: string, name: string): Promise<Session> {
  return openSession({ workdir, manifest: MANIFEST, tracePath: join(records, `${name}.jsonl`), containment: 'sealed' });
}

describe('a closed session lets go of its workdir only when the last operation on it is done', () => {
  it("a listing hashing while its session closes lists the old tree, never the next session's, and no descriptor is left", async (ctx) => {
    // Sparse files: cheap to make, hashed at full cost, so the listing is still hashing when the
    // session closes. Made fresh, they are too recent for the digest cache to answer.
    const big = Array.from({ length: 16 }, (_, i) => `out/old-${String(i).padStart(2, '0')}.bin @ 64m`);
    const small = Array.from({ length: 200 }, (_, i) => `out/d${i % 10}/old-${i}.txt: first ${i}`);
    const first = scratch([...big, ...small]);
    const second = scratch(['out/new-only.txt: SECOND CAPSULE', 'out/old-00.bin: SECOND', 'out/d0/old-0.txt: SECOND']);
    const records = scratch([]);
    const render = { head: '{"entries":[', tail: ']}' };
    // Once, so that whatever a first session opens for good (module state, the pool) is not counted.
    await (await sessionOver(second, records, 'warm-up')).close();
    const before = fdCount();

    const a = await sessionOver(first, records, 'a');
    const rootA = a.workdirDescriptor;
    const [numberA] = descriptorsOn(first);
    expect(descriptorsOn(first)).toEqual([numberA]);
    const s0 = native.digestCacheStats();
    // No signal: closing the session does not cancel it, so it runs on past the close.
    let settled = false;
    const listing = a
      .files!.list(undefined, render)
      .then(
        (l) => ({ ok: true as const, listing: l }),
        (error: unknown) => ({ ok: false as const, error }),
      )
      .finally(() => (settled = true));
    if (!(await until(() => native.digestCacheStats().hashes > s0.hashes || settled, 10_000)) || settled) {
      await listing;
      await a.close();
      skipRace(ctx, 'the listing ended before it could be caught hashing');
    }
    await a.close();
    expect(rootA.closed).toBe(true);
    // Closed for new work: the session refuses, and the addon refuses the Workdir itself.
    await expect(a.files!.list(undefined, render)).rejects.toMatchObject({ code: 'io_error' });
    await expect(listForTests(rootA, 'out', { refuseSymlinks: false, resolver: a.resolver })).rejects.toMatchObject({ code: 'IO_ERROR', errno: 9 });
    expect(() => native.readSmall(rootA, 'out', 'd0/old-0.txt', 100, 100, { refuseSymlinks: false, resolver: a.resolver })).toThrow(/IO_ERROR/);
    if (settled) skipRace(ctx, 'the listing ended while the session closed');
    // Still running: the listing's reference keeps the descriptor, so its number is not free.
    expect(descriptorsOn(first)).toEqual([numberA]);

    const b = await sessionOver(second, records, 'b');
    defer(() => b.close());
    const numbersB = descriptorsOn(second);
    expect(numbersB).toHaveLength(1);
    expect(numbersB[0]).not.toBe(numberA);
    expect((await listEntries(b.files!)).map((e) => e.path).sort()).toEqual(['d0/old-0.txt', 'new-only.txt', 'old-00.bin']);

    const outcome = await listing;
    if (outcome.ok) {
      outcome.listing.release();
      const parsed = JSON.parse(outcome.listing.body.toString('utf8')) as { entries: Array<{ path: string; size_bytes: number }> };
      const expected = [...big, ...small].map((line) => line.replace(/^out\//, '').replace(/( @ .*|: .*)$/, '')).sort();
      expect(parsed.entries.map((e) => e.path)).toEqual(expected);
      for (const e of parsed.entries) expect(e.size_bytes).toBe(e.path.endsWith('.bin') ? 64 << 20 : `first ${e.path.replace(/^.*old-|\.txt$/g, '')}`.length);
    } else {
      // Failing is allowed, cleanly: a Refusal, never a listing of the other tree.
      expect(outcome.error).toBeInstanceOf(Refusal);
    }
    // The last reference went with the listing: the descriptor is closed, nothing is left open.
    expect(descriptorsOn(first)).toEqual([]);
    await b.close();
    expect(descriptorsOn(second)).toEqual([]);
    expect(fdCount()).toBe(before);
  });
});
