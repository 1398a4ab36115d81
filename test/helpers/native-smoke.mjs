// Every native operation once, through the package's own loader (dist/native.js, which loads the
// addon with node-gyp-build from the package root), on a fresh temp tree, with the results checked
// against node:fs and node:crypto. Plain JavaScript so that any Node binary can run it: the arm64
// prebuild test runs it with an arm64 node under qemu-user. Prints one JSON line; exits 1 on the
// first wrong answer.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as native from '../../dist/addon/export.js';
import { listForTests } from '../../dist/addon/for-tests.js';
import { Landing } from '../../dist/addon/landing.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const sha256 = (b) => createHash('sha256').update(b).digest('hex');
const dir = mkdtempSync(join(tmpdir(), 'rp-native-smoke-'));
try {
  mkdirSync(join(dir, 'out', 'sub'), { recursive: true });
  const small = Buffer.from('hello from the capsule\n');
  const big = Buffer.alloc(3 * 1024 * 1024 + 17, 0x5a);
  writeFileSync(join(dir, 'out', 'a.txt'), small);
  writeFileSync(join(dir, 'out', 'sub', 'big.bin'), big);
  writeFileSync(join(dir, 'secret.txt'), 'outside the export');
  symlinkSync('a.txt', join(dir, 'out', 'link'));
  const fd = await native.openDirectory(dir);

  const resolvers = native.openat2Available() ? ['openat2', 'walk'] : ['walk'];
  for (const resolver of resolvers) {
    const opts = { refuseSymlinks: true, resolver };
    const read = await native.readFile(fd, 'out', 'sub/big.bin', 1 << 30, opts);
    assert.equal(read.sha256, sha256(big), `${resolver}: read digest`);
    assert.ok(read.bytes.equals(big), `${resolver}: read bytes`);
    const stat = await native.statFile(fd, 'out', 'a.txt', opts);
    assert.equal(stat.size, small.length, `${resolver}: stat size`);
    const listing = await listForTests(fd, 'out', opts);
    assert.deepEqual(
      listing.entries.map((e) => [e.path, e.size, e.sha256]).sort(),
      [['a.txt', small.length, sha256(small)], ['sub/big.bin', big.length, sha256(big)]],
      `${resolver}: listing`,
    );
    const refusal = (p) => native.readFile(fd, 'out', p, 1 << 20, opts).then(() => 'read', (e) => e.code);
    assert.equal(await refusal('link'), 'SYMLINK_REFUSED', `${resolver}: symlink`);
    assert.equal(await refusal('missing'), 'NOT_FOUND', `${resolver}: missing`);
    assert.equal(await native.checkRoot(fd, 'nowhere', resolver), false, `${resolver}: checkRoot`);
  }

  // A cancelled token stops a listing: the shared flag crosses from JS to the worker thread.
  const token = native.cancelToken();
  token.cancel();
  const cancelled = await listForTests(fd, 'out', { refuseSymlinks: true, resolver: 'walk', cancel: token }).then(() => 'listed', (e) => e.code);
  assert.equal(cancelled, 'CANCELLED');

  // A landing: exclusive temporary file, written, committed under its final name.
  const landing = await Landing.open(fd, 'peer-in');
  await landing.write(small);
  await landing.commit('landed.txt');
  await landing.close();
  assert.ok(readFileSync(join(dir, 'peer-in', 'landed.txt')).equals(small), 'landing');

  // A C++ exception across the boundary: the addon throws a TypeError for a wrong argument type.
  assert.throws(() => native.readFile('not a descriptor', 'out', 'a.txt', 10, { refuseSymlinks: true, resolver: 'walk' }), TypeError);

  native.closeFd(fd);
  const loaded = createRequire(import.meta.url)('node-gyp-build').path(root);
  console.log(JSON.stringify({ arch: process.arch, loaded, resolvers, codes: native.NATIVE_CODES.length }));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
