// `node bench/listing-threshold.mjs [DIR]`: where a listing's digest cache starts to pay (issue 38;
// native/limits.h, kListingCachedMinBytes). For each file size, a tree of 1,000 files (in DIR, an
// ext4/xfs/btrfs directory, default the OS temp directory; removed after), listed repeatedly in
// process with the cache asked for every file (setListingCacheMinBytesForTests(0): each file a hit under its
// read lease) and for none (each file hashed from one read), interleaved, median of 11 each.
// SIZES=4096,8192,... picks the sizes. Prints a Markdown table. Not part of `npm run bench`.
import * as native from '../dist/addon/export.js';
import { listForTests, setListingCacheMinBytesForTests } from '../dist/addon/for-tests.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { mkdirSync, existsSync, writeFileSync, openSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
const base = mkdtempSync(join(process.argv[2] ?? tmpdir(), 'rp-threshold-'));
process.on('exit', () => rmSync(base, { recursive: true, force: true }));
const SIZES = (process.env.SIZES ?? '4096,8192,16384,24576,32768,65536').split(',').map(Number);
const N = 1000,
  ROUNDS = 11;
for (const size of SIZES) {
  const dir = join(base, `s${size}`);
  if (!existsSync(dir))
    for (let i = 0; i < N; i++) {
      const d = join(dir, 'out', `d${Math.floor(i / 100)}`);
      if (i % 100 === 0) mkdirSync(d, { recursive: true });
      writeFileSync(join(d, `f${i}`), randomBytes(size));
    }
}
await new Promise((r) => setTimeout(r, 2500));
const opts = { refuseSymlinks: false, resolver: 'openat2' };
const med = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s[s.length >> 1];
};
console.log('| file size | hashed again (ms / 1000 files) | cached digest under the lease (ms / 1000 files) | cached / hashed |');
console.log('|---:|---:|---:|---:|');
for (const size of SIZES) {
  const wfd = openSync(join(base, `s${size}`), 'r');
  setListingCacheMinBytesForTests(0);
  await listForTests(wfd, 'out', opts); // fills the cache
  const t = { hash: [], cache: [] };
  for (let r = 0; r < ROUNDS; r++)
    for (const mode of r % 2 ? ['hash', 'cache'] : ['cache', 'hash']) {
      setListingCacheMinBytesForTests(mode === 'cache' ? 0 : Number.MAX_SAFE_INTEGER);
      const s0 = native.digestCacheStats();
      const t0 = performance.now();
      await listForTests(wfd, 'out', opts);
      t[mode].push(performance.now() - t0);
      const s1 = native.digestCacheStats();
      if (mode === 'cache' && s1.hits - s0.hits !== N) throw new Error(`expected ${N} hits, got ${s1.hits - s0.hits}`);
    }
  console.log(`| ${size / 1024} KiB | ${med(t.hash).toFixed(1)} | ${med(t.cache).toFixed(1)} | ${(med(t.cache) / med(t.hash)).toFixed(2)} |`);
}
