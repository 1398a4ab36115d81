// The listing's digest cache (issue 9, item 1; native/digest_cache.h), on real files and real
// writer processes: a repeat listing of an unchanged tree takes its digests from the cache; a
// changed file is rehashed; a file changed in the last 2 s is never stored (git's racy-entry
// rule); and a file that someone could be writing (open for writing, or mapped MAP_SHARED and
// writable, even with its descriptor closed) is never answered from the cache, because the read
// lease that every use and store of a cached digest needs is refused. The mapping case is the one
// stat data cannot see: a second write through an already dirty page changes the bytes and no
// timestamp (STACK.md), so without the lease the second listing below would report the old digest.
// On tmpfs the cache is not used at all (its mapped writes never move a time; issue 18).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, readdirSync, realpathSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { createInterface, type Interface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as native from '../../src/addon/export.js';
import { listForTests, setListingCacheMinBytesForTests } from '../../src/addon/for-tests.js';
import { skipRace, until } from '../helpers/race.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { sha256Hex } from '../helpers/http.js';
import { leasesWork } from '../helpers/leases.js';

/** The racy-entry margin of native/digest_cache.h, plus slack for the clock's coarse tick. */
const SETTLE_MS = 2_300;
const TMPFS_MAGIC = 0x01021994;
const onTmpfs = existsSync('/dev/shm') && statfsSync('/dev/shm').type === TMPFS_MAGIC;

/** Whether this process may take a read lease on a file it owns (fs.leases-enable, the fs). */
function leasesWorkHere(): boolean {
  const dir = tempDir('rp-lease-probe-');
  try {
    return leasesWork(dir, 'digest-cache');
  } finally {
    removeTree(dir);
  }
}
const LEASES = leasesWorkHere();
/** /proc/sys/fs/lease-break-time: how long the kernel lets a lease holder keep a writer waiting. */
const LEASE_BREAK_MS = Number(readFileSync('/proc/sys/fs/lease-break-time', 'utf8')) * 1000;

// A writer that stays alive: `fd` opens the file O_WRONLY and keeps it; `map` maps it MAP_SHARED
// with PROT_WRITE through libc (Python's own mmap keeps a dup of the descriptor), closes the
// descriptor, and writes one byte through the mapping so the page is dirty from the start.
// Then it answers `write <offset> <char>` (through the descriptor or the mapping) and `open?`.
const WRITER = String.raw`
import ctypes, mmap, os, sys
mode, path = sys.argv[1], sys.argv[2]
size = os.stat(path).st_size
if mode == 'map':
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    fd = os.open(path, os.O_RDWR)
    addr = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    os.close(fd)
    view = (ctypes.c_char * size).from_address(addr)
    def write(off, ch): view[off] = ch
    write(0, b'b')
else:
    fd = os.open(path, os.O_WRONLY)
    def write(off, ch): os.pwrite(fd, ch, off)
print('ready', flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == 'write':
        write(int(cmd[1]), cmd[2].encode())
        print('ok', flush=True)
    elif cmd[0] == 'exit':
        break
`;

class Writer {
  readonly child: ChildProcessWithoutNullStreams;
  private readonly lines: Interface;
  private readonly queue: string[] = [];
  private waiting: ((line: string) => void) | null = null;

  constructor(mode: 'fd' | 'map', path: string) {
    this.child = spawn('python3', ['-c', WRITER, mode, path]);
    this.lines = createInterface({ input: this.child.stdout });
    this.lines.on('line', (line) => {
      if (this.waiting) {
        const w = this.waiting;
        this.waiting = null;
        w(line);
      } else this.queue.push(line);
    });
  }

  next(): Promise<string> {
    const line = this.queue.shift();
    if (line !== undefined) return Promise.resolve(line);
    return new Promise((resolve) => (this.waiting = resolve));
  }

  async write(offset: number, ch: string): Promise<void> {
    this.child.stdin.write(`write ${offset} ${ch}\n`);
    expect(await this.next()).toBe('ok');
  }

  async exit(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const done = new Promise((r) => this.child.once('exit', r));
    this.child.stdin.write('exit\n');
    await done;
  }

  /** Whether the writer process holds a descriptor on `path`. */
  holdsDescriptorOn(path: string): boolean {
    const dir = `/proc/${this.child.pid}/fd`;
    return readdirSync(dir).some((fd) => {
      try {
        return readlinkSync(`${dir}/${fd}`) === path;
      } catch {
        return false;
      }
    });
  }
}

const opts = (): native.ResolveOptions => ({ refuseSymlinks: false, resolver: native.chooseResolver() });

/** A streamed body's opening as the read path takes it: one resolution, then the body (snapshots refused). */
async function openStream(fd: number, root: string, relpath: string, maxBytes: number) {
  const first = native.readSmall(fd, root, relpath, maxBytes, 0, opts());
  if (!('file' in first)) throw new Error(`${relpath}: read whole, not opened`);
  try {
    const opened = await native.openBody(first.file, maxBytes, false);
    if (!opened.settled) throw new Error(`${relpath}: not settled`);
    return opened;
  } finally {
    first.file.close();
  }
}
const delta = (before: native.DigestCacheStats, after: native.DigestCacheStats) =>
  Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - before[k as keyof native.DigestCacheStats]])) as native.DigestCacheStats;

interface Place {
  name: string;
  dir: string;
  fd: number;
  mapper: Writer;
}

const places: Place[] = [];
let ext: Place;
let fdWriter: Writer;
const PAGE = 4096;

async function listing(place: Place, root: string): Promise<Map<string, native.ListEntry>> {
  const listed = await listForTests(place.fd, root, opts());
  return new Map(listed.entries.map((e) => [e.path, e]));
}

beforeAll(async () => {
  // These files are a few bytes to a page: a listing asks the cache only from
  // LIMITS.listingCachedMinBytes (16 KiB) up, so here every file asks it, and the rules under test
  // (lease, racy margin, filesystem, capacity) are the ones a larger file meets.
  setListingCacheMinBytesForTests(0);
  const bases = [{ name: 'tmpdir', dir: tempDir('rp-digest-') }];
  if (onTmpfs) bases.push({ name: 'tmpfs', dir: realpathSync(mkdtempSync('/dev/shm/rp-digest-')) });
  for (const { name, dir } of bases) {
    mkdirSync(join(dir, 'mapped'));
    writeFileSync(join(dir, 'mapped', 'm'), Buffer.alloc(PAGE, 'a'));
    const mapper = new Writer('map', join(dir, 'mapped', 'm'));
    expect(await mapper.next()).toBe('ready');
    places.push({ name, dir, fd: await native.openDirectory(dir), mapper });
  }
  ext = places[0]!;
  mkdirSync(join(ext.dir, 'same'));
  for (const f of ['a', 'b', 'c']) writeFileSync(join(ext.dir, 'same', f), `contents of ${f}\n`);
  mkdirSync(join(ext.dir, 'many'));
  for (let i = 0; i < 5; i++) writeFileSync(join(ext.dir, 'many', `f${i}`), `file ${i}`);
  mkdirSync(join(ext.dir, 'open'));
  writeFileSync(join(ext.dir, 'open', 'w'), 'written by nobody yet');
  fdWriter = new Writer('fd', join(ext.dir, 'open', 'w'));
  expect(await fdWriter.next()).toBe('ready');
  mkdirSync(join(ext.dir, 'streamed'));
  writeFileSync(join(ext.dir, 'streamed', 'big'), Buffer.alloc(300 * 1024, 's'));
  mkdirSync(join(ext.dir, 'huge'));
  execFileSync('truncate', ['-s', '1T', join(ext.dir, 'huge', 'sparse')]);
  // Every file above is now older than the racy-entry margin by the time it is listed.
  await sleep(SETTLE_MS);
});

afterAll(async () => {
  setListingCacheMinBytesForTests(native.LIMITS.listingCachedMinBytes);
  await fdWriter?.exit();
  for (const p of places) {
    await p.mapper.exit();
    native.closeFd(p.fd);
    removeTree(p.dir);
  }
});

describe('the digest cache', () => {
  it.runIf(LEASES)('answers a repeat listing of an unchanged tree without hashing', async () => {
    const s0 = native.digestCacheStats();
    const first = await listing(ext, 'same');
    const s1 = native.digestCacheStats();
    const second = await listing(ext, 'same');
    const s2 = native.digestCacheStats();
    expect(delta(s0, s1)).toMatchObject({ hashes: 3, stores: 3, hits: 0 });
    expect(delta(s1, s2)).toMatchObject({ hashes: 0, stores: 0, hits: 3 });
    expect([...second.values()]).toEqual([...first.values()]);
    for (const f of ['a', 'b', 'c']) expect(second.get(f)!.sha256).toBe(sha256Hex(`contents of ${f}\n`));
  });

  it.runIf(LEASES)('rehashes a file rewritten with a different size, or the same size', async () => {
    await listing(ext, 'same'); // all three cached
    writeFileSync(join(ext.dir, 'same', 'b'), 'b is longer now\n');
    writeFileSync(join(ext.dir, 'same', 'c'), 'CONTENTS OF C\n'); // same length as before
    const s0 = native.digestCacheStats();
    const after = await listing(ext, 'same');
    const s1 = native.digestCacheStats();
    expect(delta(s0, s1)).toMatchObject({ hashes: 2, hits: 1 });
    expect(after.get('b')).toMatchObject({ size: 16, sha256: sha256Hex('b is longer now\n') });
    expect(after.get('c')).toMatchObject({ size: 14, sha256: sha256Hex('CONTENTS OF C\n') });
    expect(after.get('a')!.sha256).toBe(sha256Hex('contents of a\n'));
  });

  it.runIf(LEASES)('never stores a file that changed within the racy-entry margin', async () => {
    mkdirSync(join(ext.dir, 'fresh'));
    writeFileSync(join(ext.dir, 'fresh', 'x'), 'just written');
    const s0 = native.digestCacheStats();
    await listing(ext, 'fresh');
    const second = await listing(ext, 'fresh');
    const s1 = native.digestCacheStats();
    expect(delta(s0, s1)).toMatchObject({ hashes: 2, stores: 0, hits: 0, racy: 2 });
    expect(second.get('x')!.sha256).toBe(sha256Hex('just written'));
  });

  it('hashes a file another process holds open for writing on every listing', async () => {
    const path = join(ext.dir, 'open', 'w');
    const s0 = native.digestCacheStats();
    await listing(ext, 'open');
    await listing(ext, 'open');
    const s1 = native.digestCacheStats();
    expect(delta(s0, s1)).toMatchObject({ hashes: 2, stores: 0, hits: 0, leaseRefused: 2 });
    await fdWriter.write(0, 'W');
    const after = await listing(ext, 'open');
    expect(after.get('w')!.sha256).toBe(sha256Hex(readFileSync(path)));
    expect(readFileSync(path, 'utf8')).toBe('Written by nobody yet');
  });

  it.runIf(LEASES)('takes a streamed body through it once: hashed under the lease and stored, then sent from it under the lease', async () => {
    const s0 = native.digestCacheStats();
    const first = await openStream(ext.fd, 'streamed', 'big', 1 << 20);
    first.stream.close();
    const s1 = native.digestCacheStats();
    const second = await openStream(ext.fd, 'streamed', 'big', 1 << 20);
    second.stream.close();
    const s2 = native.digestCacheStats();
    expect(delta(s0, s1)).toMatchObject({ hashes: 1, stores: 1, hits: 0, leaseRefused: 0, leaseBroken: 0, racy: 0 });
    expect(first).toMatchObject({ digestCached: false, size: 300 * 1024, sha256: sha256Hex(Buffer.alloc(300 * 1024, 's')) });
    expect(first.stream.leased).toBe(false);
    expect(delta(s1, s2)).toMatchObject({ hashes: 0, stores: 0, hits: 1, leaseRefused: 0 });
    expect(second).toMatchObject({ digestCached: true, size: first.size, sha256: first.sha256, mtimeMs: first.mtimeMs });
    expect(second.stream.leased).toBe(true);
  });

  it('counts a streamed body whose lease is refused once, and hashes it', async () => {
    const path = join(ext.dir, 'open', 'w');
    const s0 = native.digestCacheStats();
    const opened = await openStream(ext.fd, 'open', 'w', 1 << 20);
    opened.stream.close();
    expect(delta(s0, native.digestCacheStats())).toMatchObject({ hashes: 1, stores: 0, hits: 0, leaseRefused: 1 });
    expect(opened).toMatchObject({ digestCached: false, sha256: sha256Hex(readFileSync(path)) });
  });

  it.runIf(LEASES)('is bounded: at most its capacity', async () => {
    const { capacity } = native.digestCacheStats();
    try {
      native.setDigestCacheCapacity(2);
      expect(native.digestCacheStats()).toMatchObject({ capacity: 2 });
      expect(native.digestCacheStats().entries).toBeLessThanOrEqual(2);
      const s0 = native.digestCacheStats();
      const listed = await listing(ext, 'many');
      const s1 = native.digestCacheStats();
      expect(listed.size).toBe(5);
      expect(delta(s0, s1)).toMatchObject({ stores: 5 });
      expect(s1.entries).toBe(2);
      expect(delta(s0, s1).evictions).toBeGreaterThanOrEqual(3);
      await listing(ext, 'many');
      expect(native.digestCacheStats().entries).toBe(2);
      native.setDigestCacheCapacity(0);
      expect(native.digestCacheStats().entries).toBe(0);
      const s2 = native.digestCacheStats();
      await listing(ext, 'many');
      expect(delta(s2, native.digestCacheStats())).toMatchObject({ hits: 0, stores: 0, hashes: 5 });
      expect(() => native.setDigestCacheCapacity(-1)).toThrow(RangeError);
      expect(() => native.setDigestCacheCapacity(1.5)).toThrow(RangeError);
    } finally {
      native.setDigestCacheCapacity(capacity);
    }
    expect(native.digestCacheStats().capacity).toBe(native.DEFAULT_DIGEST_CACHE_ENTRIES);
  });

  // (A lease-break-time of 10 s or less leaves nothing to tell the poll from the kernel apart.)
  it.runIf(LEASES && LEASE_BREAK_MS > 10_000)('lets a writer through within a chunk, and stores nothing, when it arrives mid-hash', async (ctx) => {
    const path = join(ext.dir, 'huge', 'sparse');
    const s0 = native.digestCacheStats();
    const cancel = native.cancelToken();
    const listed = listForTests(ext.fd, 'huge', { ...opts(), cancel }).catch((e: native.NativeError) => e);
    // Hashing 1 TiB under its lease: counted once the lease is taken, before the first chunk.
    if (!(await until(() => native.digestCacheStats().hashes > s0.hashes))) {
      cancel.cancel();
      await listed;
      skipRace(ctx, 'the listing never started hashing, so no writer could arrive mid-hash');
    }
    // Without the poll the open would wait for the whole hash or the kernel's 45 s break time;
    // and had the break been signalled with SIGIO, this very process would have died.
    const t0 = performance.now();
    execFileSync('python3', ['-c', 'import os, sys; os.close(os.open(sys.argv[1], os.O_WRONLY))', path]);
    const openMs = performance.now() - t0;
    cancel.cancel();
    expect(((await listed) as native.NativeError).code).toBe('CANCELLED');
    // Not a speed limit: without the poll only the kernel's own lease-break-time (after which it
    // revokes the lease) would let the open through, so it must return well before that.
    expect(openMs).toBeLessThan(LEASE_BREAK_MS - 5_000);
    expect(delta(s0, native.digestCacheStats())).toMatchObject({ leaseBroken: 1, stores: 0 });
  });
});

describe.each([{ fs: 'tmpdir' }, { fs: 'tmpfs' }])('a writable shared mapping on $fs', ({ fs }) => {
  it.skipIf(fs === 'tmpfs' && !onTmpfs)('never yields a stale digest, even with its descriptor closed', async () => {
    const place = places.find((p) => p.name === fs)!;
    const path = join(place.dir, 'mapped', 'm');
    const bytes = () => readFileSync(path);
    expect(place.mapper.holdsDescriptorOn(path), 'the mapper keeps only the mapping').toBe(false);

    const s0 = native.digestCacheStats();
    const first = await listing(place, 'mapped');
    expect(first.get('m')!.sha256).toBe(sha256Hex(Buffer.concat([Buffer.from('b'), Buffer.alloc(PAGE - 1, 'a')])));

    // The page is already dirty: this write changes the bytes and, as a rule, no timestamp.
    const before = statSync(path, { bigint: true });
    await place.mapper.write(0, 'c');
    const after = statSync(path, { bigint: true });
    if (fs === 'tmpfs') {
      // tmpfs never writes the page back, so the dangerous case is certain there.
      expect(after.ctimeNs).toBe(before.ctimeNs);
      expect(after.mtimeNs).toBe(before.mtimeNs);
    } else if (after.ctimeNs !== before.ctimeNs) {
      console.warn('[digest-cache] the page was written back between the two writes; the ext4 run did not hit the stale-stat case');
    }
    expect(after.size).toBe(before.size);

    const second = await listing(place, 'mapped');
    expect(second.get('m')!.sha256).toBe(sha256Hex(bytes()));
    expect(bytes().subarray(0, 1).toString()).toBe('c');
    // On ext4 the lease is refused while the mapping exists; tmpfs is off the cache's allowlist
    // (native/digest_cache.h), so no lease is even asked for there.
    expect(delta(s0, native.digestCacheStats())).toMatchObject(
      fs === 'tmpfs' ? { hits: 0, stores: 0, leaseRefused: 0, fsUncached: 2 } : { hits: 0, stores: 0, leaseRefused: 2, fsUncached: 0 },
    );

    // Once the mapping is gone, nobody can write: on ext4 the digest may be cached and served
    // again. On tmpfs it never is: a later mapping's writes would move no time at all
    // (test/native/digest-cache-tmpfs.test.ts).
    await place.mapper.exit();
    if (!LEASES) return;
    // Where the page was written back in between, the next write took a fault that moved ctime
    // just now: the racy rule then refuses to store until the margin has passed.
    if (statSync(path, { bigint: true }).ctimeNs !== before.ctimeNs) await sleep(SETTLE_MS);
    const s1 = native.digestCacheStats();
    await listing(place, 'mapped');
    const third = await listing(place, 'mapped');
    expect(delta(s1, native.digestCacheStats())).toMatchObject(
      fs === 'tmpfs' ? { stores: 0, hits: 0, hashes: 2, fsUncached: 2 } : { stores: 1, hits: 1, leaseRefused: 0 },
    );
    expect(third.get('m')!.sha256).toBe(sha256Hex(bytes()));
  });
});
