// The digest cache is used only on filesystems known to update a file's times on a write through a
// shared mapping (issue 18, finding 1; native/digest_cache.h). On tmpfs a process that maps a file
// read-write, reads a page (a read fault) and then writes to it changes the bytes without a write
// fault, so neither mtime nor ctime moves; once the mapping is gone the read lease is granted
// again and a (stat + lease) key would match bytes that changed. Here that happens for real on
// /dev/shm, over HTTP: the etag, the listing's sha256 and the trace must name the new bytes. On the
// filesystem of the temp directory (ext4, xfs or btrfs), the same reads are still answered from
// the cache.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import * as native from '../../src/addon/export.js';
import { capsule, filesManifest } from '../helpers/capsule.js';
import { defer } from '../helpers/cleanup.js';
import { rawGet, readTrace, sha256Hex } from '../helpers/http.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { leasesWork, mappedWrite } from '../helpers/leases.js';

const TMPFS_MAGIC = 0x01021994;
/** The allowlist of native/digest_cache.cc: ext2/3/4, xfs, btrfs. */
const TIMES_ON_MAPPED_WRITES = new Set([0xef53, 0x58465342, 0x9123683e]);
const onTmpfs = existsSync('/dev/shm') && statfsSync('/dev/shm').type === TMPFS_MAGIC;
/** The racy-entry margin of native/digest_cache.h plus slack: older files are stored by the cache. */
const SETTLE_MS = 2_300;
const BIG = 1024 * 1024; // above kCachedReadMinBytes (read.h): a read of it uses the cache

const delta = (before: native.DigestCacheStats, after: native.DigestCacheStats) =>
  Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - (before[k as keyof native.DigestCacheStats] ?? 0)])) as native.DigestCacheStats;

/** A workdir in `base` holding out/big.bin (1 MiB) and out/small.txt (34 bytes), old enough to be cached. */
async function settledTree(base: string): Promise<{ dir: string; big: string; small: string }> {
  const dir = realpathSync(mkdtempSync(join(base, 'rp-digest-fs-')));
  defer(() => removeTree(dir));
  mkdirSync(join(dir, 'out'));
  const big = join(dir, 'out', 'big.bin');
  const small = join(dir, 'out', 'small.txt');
  writeFileSync(big, Buffer.alloc(BIG, 'a'));
  writeFileSync(small, 'thirty-four bytes of listed text!\n');
  await sleep(SETTLE_MS);
  return { dir, big, small };
}

async function readOver(url: string, name: string): Promise<{ body: Buffer; etag: string | undefined }> {
  const res = await rawGet(url, `/resources/files/${name}`);
  expect(res.status).toBe(200);
  return { body: res.body, etag: res.header('etag') };
}

async function listOver(url: string): Promise<Map<string, string>> {
  const res = await rawGet(url, '/resources/files');
  expect(res.status).toBe(200);
  return new Map((res.json().entries as Array<{ path: string; sha256: string }>).map((e) => [e.path, e.sha256]));
}

describe('the digest cache on a filesystem whose mapped writes leave the times alone', () => {
  it.skipIf(!onTmpfs)('serves the digest of the new bytes on /dev/shm after a mapped write that followed a read fault', async () => {
    const { dir, big, small } = await settledTree('/dev/shm');
    const c = await capsule({ yaml: filesManifest('out/'), workdir: dir });
    const s0 = native.digestCacheStats();

    // First the old bytes, read and listed twice: today's cache would store them and then hit.
    for (let i = 0; i < 2; i++) {
      const first = await readOver(c.url, 'big.bin');
      expect(first.etag).toBe(`"sha256:${sha256Hex(Buffer.alloc(BIG, 'a'))}"`);
      expect((await listOver(c.url)).get('small.txt')).toBe(sha256Hex('thirty-four bytes of listed text!\n'));
    }

    const before = { big: statSync(big, { bigint: true }), small: statSync(small, { bigint: true }) };
    mappedWrite(big, 'NEW');
    mappedWrite(small, 'NEW');
    // The case itself: the bytes changed, no time did (tmpfs never takes the write fault).
    for (const [path, st] of [
      [big, before.big],
      [small, before.small],
    ] as const) {
      const after = statSync(path, { bigint: true });
      expect(after.ctimeNs).toBe(st.ctimeNs);
      expect(after.mtimeNs).toBe(st.mtimeNs);
      expect(readFileSync(path).subarray(0, 3).toString()).toBe('NEW');
    }

    const read = await readOver(c.url, 'big.bin');
    expect(read.body.equals(readFileSync(big))).toBe(true);
    expect(read.etag).toBe(`"sha256:${sha256Hex(readFileSync(big))}"`);
    const listed = await listOver(c.url);
    expect(listed.get('small.txt')).toBe(sha256Hex(readFileSync(small)));
    expect(listed.get('big.bin')).toBe(sha256Hex(readFileSync(big)));
    const traced = readTrace(c.tracePath).filter((e) => e.event_type === 'resource_read' && e.path === 'big.bin');
    expect(traced.at(-1)).toMatchObject({ outcome: 'ok', sha256: sha256Hex(readFileSync(big)) });

    // Nothing on tmpfs was stored or answered from the cache: every file was hashed.
    expect(delta(s0, native.digestCacheStats())).toMatchObject({ hits: 0, stores: 0 });
    expect(delta(s0, native.digestCacheStats()).fsUncached).toBeGreaterThanOrEqual(7);
  });
});

describe("the digest cache on the temp directory's filesystem", () => {
  const dir = tempDir('rp-digest-fs-probe-');
  const type = statfsSync(dir).type;
  const allowed = TIMES_ON_MAPPED_WRITES.has(type) && leasesWork(dir);
  removeTree(dir);

  it.runIf(allowed)('still answers repeat reads and listings from the cache (ext4, xfs, btrfs)', async () => {
    const { dir: workdir, big } = await settledTree(tmpdir());
    const c = await capsule({ yaml: filesManifest('out/'), workdir });
    await readOver(c.url, 'big.bin');
    await listOver(c.url);
    const s0 = native.digestCacheStats();
    const read = await readOver(c.url, 'big.bin');
    const listed = await listOver(c.url);
    // big.bin's read and listing entry from the cache; small.txt (34 bytes, below the listing's
    // LIMITS.listingCachedMinBytes) hashed from one read, which costs less than the lease.
    expect(delta(s0, native.digestCacheStats())).toMatchObject({ hits: 2, hashes: 1, belowMin: 1, fsUncached: 0 });
    expect(read.etag).toBe(`"sha256:${sha256Hex(readFileSync(big))}"`);
    expect(listed.get('big.bin')).toBe(sha256Hex(readFileSync(big)));
  });

  it.runIf(allowed)('and a mapped write there moves the times, so the cached digest is not used', async () => {
    const { dir: workdir, big } = await settledTree(tmpdir());
    const c = await capsule({ yaml: filesManifest('out/'), workdir });
    await readOver(c.url, 'big.bin');
    const before = statSync(big, { bigint: true });
    mappedWrite(big, 'NEW');
    expect(statSync(big, { bigint: true }).ctimeNs).not.toBe(before.ctimeNs);
    const read = await readOver(c.url, 'big.bin');
    expect(read.etag).toBe(`"sha256:${sha256Hex(readFileSync(big))}"`);
    expect(read.body.subarray(0, 3).toString()).toBe('NEW');
  });
});
