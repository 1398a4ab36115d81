// An operation queued for the pool holds a workdir descriptor of its own (native/fd.h, duplicate;
// issue 26, finding 7). The workdir descriptor travels to the addon as a number; when a session
// closes its descriptor while a listing or a read is still queued, and another session opens
// another workdir, the kernel hands out the same number again. A worker that took the number as it
// finds it when it runs would list or read the other capsule's files. Here every pool thread is
// held, the operations are queued, the first workdir is closed and a second one opened under the
// same number, and the pool released: the queued operations see the first workdir only.
import { closeSync, constants, openSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ExportView } from '../../src/export/export-view.js';
import * as native from '../../src/native.js';
import { drain, listEntries } from '../helpers/body.js';
import { defer } from '../helpers/cleanup.js';
import { holdPool } from '../helpers/pool.js';
import { skipRace, until } from '../helpers/race.js';
import { scratch } from '../helpers/tree.js';

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
    expect(big.kind).toBe('stream');
    expect((await drain(big))!.equals(Buffer.alloc(600 * 1024))).toBe(true);
    expect((await stat).size).toBe('first'.length);
  });
});
