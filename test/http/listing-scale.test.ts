// Listings of whole exports (issue 38, items 1 and 2): the walk decides per filesystem whether the
// digest cache may stand in for hashing (a mount point changes st_dev, and so does a bind-mounted
// file), the order is the contract's (paths in UTF-8 byte order, whatever directories they are in),
// and a digest cache smaller than the tree evicts, counts it in /metrics, and never answers a wrong
// digest. `--digest-cache-entries` is validated like every other flag.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import * as native from '../../src/addon/export.js';
import { prepareSession } from '../../src/session/open-session.js';
import { capsule, filesManifest } from '../helpers/capsule.js';
import { defer } from '../helpers/cleanup.js';
import { runCli, startServe } from '../helpers/cli.js';
import { rawGet, sha256Hex } from '../helpers/http.js';
import { mappedWrite } from '../helpers/leases.js';
import { mountTmpfs, unmount } from '../helpers/live.js';
import { scratch } from '../helpers/tree.js';

/** The racy-entry margin of native/digest_cache.h plus slack: older files are stored by the cache. */
const SETTLE_MS = 2_300;
/** Large enough that a listing asks the digest cache for it (limits.h, kListingCachedMinBytes). */
const CACHED = native.LIMITS.listingCachedMinBytes + 4096;

interface Listed {
  path: string;
  size_bytes: number;
  sha256: string;
}

async function listing(url: string): Promise<Listed[]> {
  const res = await rawGet(url, '/resources/files');
  expect(res.status).toBe(200);
  return (res.json() as { entries: Listed[] }).entries;
}

/** Every entry's size and digest are those of the file's bytes now. */
function expectTrue(entries: Listed[], root: string): void {
  for (const e of entries) {
    const bytes = readFileSync(join(root, e.path));
    expect({ path: e.path, size: e.size_bytes, sha256: e.sha256 }).toEqual({ path: e.path, size: bytes.length, sha256: sha256Hex(bytes) });
  }
}

const delta = (before: native.DigestCacheStats, after: native.DigestCacheStats) =>
  Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - (before[k as keyof native.DigestCacheStats] ?? 0)])) as native.DigestCacheStats;

describe('a listing across mount points inside the export', () => {
  it('lists in byte order across them and never answers a tmpfs file (a mounted directory, a bind-mounted file) from the cache', async (ctx) => {
    const base = scratch([], 'rp-listing-mount-');
    const workdir = join(base, 'work');
    const out = join(workdir, 'out');
    mkdirSync(join(out, 'm'), { recursive: true });
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    // On the temp directory's filesystem: the digest cache applies there (where it is ext4, xfs, btrfs).
    writeFileSync(join(out, 'a.bin'), randomBytes(CACHED));
    writeFileSync(join(out, 'm-x'), 'sorts before m/ (0x2d)');
    writeFileSync(join(out, 'm.txt'), 'sorts before m/ too (0x2e)');
    writeFileSync(join(out, 'm0'), 'sorts after m/ (0x30)');
    writeFileSync(join(out, 'bound.bin'), 'replaced by the bind mount');
    // out/m: a tmpfs mounted inside the export; out/bound.bin: a tmpfs file bind-mounted over a file.
    const refused = mountTmpfs(join(out, 'm'), '4m');
    if (refused) return ctx.skip(refused);
    const side = join(base, 'side');
    mkdirSync(side);
    const sideRefused = mountTmpfs(side, '1m');
    if (sideRefused) return ctx.skip(sideRefused);
    mkdirSync(join(out, 'm', 'inner'));
    writeFileSync(join(out, 'm', 'big.bin'), randomBytes(CACHED));
    writeFileSync(join(out, 'm', 'inner', 's.txt'), 'small, on tmpfs');
    writeFileSync(join(side, 'file.bin'), randomBytes(CACHED));
    const bound = spawnSync('mount', ['--bind', join(side, 'file.bin'), join(out, 'bound.bin')], { encoding: 'utf8' });
    if (bound.status !== 0) return ctx.skip(`mount --bind was refused here: ${bound.stderr.trim()}`);
    defer(() => unmount(join(out, 'bound.bin')));
    expect(statSync(join(out, 'm')).dev).not.toBe(statSync(out).dev);
    expect(statSync(join(out, 'bound.bin')).dev).not.toBe(statSync(out).dev);
    await sleep(SETTLE_MS); // every file settled: the cache would store any of them it was allowed to

    const c = await capsule({ yaml: filesManifest('out/'), workdir });
    const s0 = native.digestCacheStats();
    const first = await listing(c.url);
    const s1 = native.digestCacheStats();
    // The contract's order: by path in UTF-8 byte order, not directory by directory.
    expect(first.map((e) => e.path)).toEqual(['a.bin', 'bound.bin', 'm-x', 'm.txt', 'm/big.bin', 'm/inner/s.txt', 'm0']);
    expectTrue(first, out);
    // The three tmpfs files (m/big.bin, m/inner/s.txt, bound.bin) were hashed without the cache.
    expect(delta(s0, s1).fsUncached).toBe(3);

    // Their bytes change and no time does; a cached digest keyed on them would now lie.
    for (const path of [join(out, 'm', 'big.bin'), join(out, 'bound.bin')]) {
      const before = statSync(path, { bigint: true });
      mappedWrite(path, 'NEW');
      const after = statSync(path, { bigint: true });
      expect([after.ctimeNs, after.mtimeNs]).toEqual([before.ctimeNs, before.mtimeNs]);
    }
    const second = await listing(c.url);
    const s2 = native.digestCacheStats();
    expectTrue(second, out);
    expect(second.find((e) => e.path === 'm/big.bin')!.sha256).not.toBe(first.find((e) => e.path === 'm/big.bin')!.sha256);
    expect(second.find((e) => e.path === 'bound.bin')!.sha256).not.toBe(first.find((e) => e.path === 'bound.bin')!.sha256);
    expect(delta(s1, s2).fsUncached).toBe(3);
    // Beside them, the ext4 (xfs, btrfs) file still came from the cache, where leases are granted here.
    if (delta(s0, s1).stores >= 1) expect(delta(s1, s2).hits).toBeGreaterThanOrEqual(1);
  });
});

describe('a digest cache smaller than the tree', () => {
  it('evicts, counts it in /metrics, and every listing still gives every file its digest', async () => {
    const base = scratch([], 'rp-listing-small-cache-');
    const workdir = join(base, 'work');
    const out = join(workdir, 'out');
    for (let d = 0; d < 4; d++) {
      mkdirSync(join(out, `d${d}`), { recursive: true });
      for (let f = 0; f < 10; f++) writeFileSync(join(out, `d${d}`, `f${f}.bin`), randomBytes(CACHED));
    }
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    await sleep(SETTLE_MS);
    const s = await startServe(['--workdir', workdir, '--trace', join(base, 'trace.jsonl'), '--metrics', '--digest-cache-entries', '8']);
    defer(async () => {
      s.child.kill('SIGTERM');
      await s.exited;
    });
    const metric = async (name: string) => {
      const text = (await rawGet(s.ready.url, '/metrics')).body.toString();
      const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(text);
      expect(m, name).not.toBeNull();
      return Number(m![1]);
    };
    for (let round = 0; round < 3; round++) {
      const entries = await listing(s.ready.url);
      expect(entries).toHaveLength(40);
      expectTrue(entries, out);
      if (round === 1) writeFileSync(join(out, 'd2', 'f3.bin'), randomBytes(CACHED)); // changed: hashed again
    }
    expect(await metric('resource_plane_digest_cache_capacity_entries')).toBe(8);
    const stores = await metric('resource_plane_digest_cache_stores_total');
    const evictions = await metric('resource_plane_digest_cache_evictions_total');
    const entries = await metric('resource_plane_digest_cache_entries');
    if (stores === 0) return; // no read leases here (not the owner, leases off): nothing to evict
    expect(entries).toBe(8);
    // Each digest stored past the eighth pushed one out.
    expect(evictions).toBe(stores - entries);
    expect(evictions).toBeGreaterThanOrEqual(40 - 8);
    expect(await metric('resource_plane_digest_cache_hashes_total')).toBeGreaterThanOrEqual(40);
    expect(await metric('resource_plane_digest_cache_hits_total')).toBeGreaterThanOrEqual(0);
    expect(await metric('resource_plane_digest_cache_bytes')).toBeGreaterThan(0);
  });
});

describe('a listing body larger than the memory budget', () => {
  it('is served whole under --memory-budget 16Mi (alone, as one request larger than the budget is), and the budget is free again after', async () => {
    const base = scratch([], 'rp-listing-budget-');
    const workdir = join(base, 'work');
    // 8,300 files in a directory 3.5 KB deep: each entry ~3.6 KB of JSON, a ~30 MB body.
    const deep = join('deep', ...Array.from({ length: 14 }, (_, i) => `${String(i).padStart(2, '0')}${'d'.repeat(248)}`));
    mkdirSync(join(workdir, 'out', deep), { recursive: true });
    for (let i = 0; i < 8300; i++) writeFileSync(join(workdir, 'out', deep, `f${i}`), `${i}`);
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    const s = await startServe(['--workdir', workdir, '--trace', join(base, 'trace.jsonl'), '--metrics', '--memory-budget', '16Mi']);
    defer(async () => {
      s.child.kill('SIGTERM');
      await s.exited;
    });
    const res = await rawGet(s.ready.url, '/resources/files');
    expect(res.status).toBe(200);
    expect(res.body.length).toBeGreaterThan(30_000_000);
    const entries = (res.json() as { entries: Listed[] }).entries;
    expect(entries).toHaveLength(8300);
    expect(entries.filter((e) => e.sha256 !== sha256Hex(Buffer.from(e.path.slice(e.path.lastIndexOf('/') + 2))))).toEqual([]);
    const text = (await rawGet(s.ready.url, '/metrics')).body.toString();
    expect(/^resource_plane_memory_budget_in_use_bytes (\d+)$/m.exec(text)?.[1]).toBe('0');
  });
});

describe('--digest-cache-entries', () => {
  it.each(['abc', '-1', '1.5', '16777217', '1e3', ''])('refuses %j with one line naming the range', (value) => {
    const r = runCli(['serve', '--workdir', join(scratch([]), 'none'), '--digest-cache-entries', value]);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      `error: --digest-cache-entries must be a whole number of entries from 0 (no cache) to 16777216 (got '${value}') (see resource-plane serve --help)\n`,
    );
  });

  it('is the session option digestCacheEntries, refused the same way before anything is created', async () => {
    const workdir = join(scratch([]), 'never-made');
    await expect(prepareSession({ workdir, digestCacheEntries: -1 })).rejects.toThrow(
      "digestCacheEntries must be a whole number of entries from 0 (no cache) to 16777216 (got '-1')",
    );
    await expect(prepareSession({ workdir, digestCacheEntries: 2 ** 24 + 1 })).rejects.toThrow(/digestCacheEntries must be/);
    expect(() => statSync(workdir)).toThrow();
  });

  it("sets the capacity of the process's cache when the session opens", async () => {
    const { capacity } = native.digestCacheStats();
    try {
      const workdir = scratch(['out/a: a']);
      writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
      await capsule({ yaml: filesManifest('out/'), workdir, digestCacheEntries: 1234 });
      expect(native.digestCacheStats().capacity).toBe(1234);
    } finally {
      native.setDigestCacheCapacity(capacity);
    }
  });
});
