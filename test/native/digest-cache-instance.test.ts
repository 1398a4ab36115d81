// The digest cache knows the filesystem instance (SPEC section 10, a live workdir): its key holds
// statx's unique mount id, so a filesystem image unmounted and another mounted on the same loop
// device (same st_dev), presenting the same inode number, size and times with other bytes, is never
// served under the digest cached for the first. Needs root (mount, losetup); skipped otherwise.
import { copyFileSync, mkdirSync, openSync, closeSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import * as native from '../../src/addon/export.js';
import { capsule, filesManifest } from '../helpers/capsule.js';
import { defer } from '../helpers/cleanup.js';
import { rawGet, sha256Hex } from '../helpers/http.js';
import { attachLoop, unmount } from '../helpers/live.js';
import { scratch } from '../helpers/tree.js';

const MiB = 1024 * 1024;

function run(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

describe('a filesystem image swapped under the export on the same loop device', () => {
  it('is never served under the digest cached for the image before it', async (ctx) => {
    const dir = scratch();
    const first = join(dir, 'first.img');
    const second = join(dir, 'second.img');
    const workdir = join(dir, 'work');
    const out = join(workdir, 'out');
    mkdirSync(out, { recursive: true });
    if (spawnSync('mkfs.ext4', ['-V'], { stdio: 'ignore' }).status !== 0) return ctx.skip('mkfs.ext4 is not installed');
    run('truncate', ['-s', '16M', first]);
    run('mkfs.ext4', ['-q', '-F', first]);
    const attached = attachLoop(first);
    if ('refused' in attached) return ctx.skip(attached.refused);
    const { device } = attached;
    const mounted = spawnSync('mount', [device, out], { encoding: 'utf8' });
    if (mounted.status !== 0) return ctx.skip(`mount was refused here: ${mounted.stderr.trim()}`);
    defer(() => unmount(out));
    writeFileSync(join(out, 'f'), Buffer.alloc(MiB, 'a'));
    run('sync', []);
    const before = statSync(join(out, 'f'));
    // The second image: the first, byte for byte, but with the file's data blocks rewritten behind
    // the filesystem's back, so the inode (number, size, times, birth, generation) is the same.
    unmount(out);
    copyFileSync(first, second);
    const blockSize = Number(/Block size:\s+(\d+)/.exec(run('dumpe2fs', ['-h', second]))![1]);
    const blocks = run('debugfs', ['-R', 'blocks /f', second]).trim().split(/\s+/).map(Number);
    expect(blocks.length * blockSize).toBeGreaterThanOrEqual(MiB);
    const fd = openSync(second, 'r+');
    for (const block of blocks) writeSync(fd, Buffer.alloc(blockSize, 'b'), 0, blockSize, block * blockSize);
    closeSync(fd);
    run('mount', [device, out]);

    // Past the racy margin, the first image's file is hashed once and then found in the cache.
    await new Promise((resolve) => setTimeout(resolve, 2_300));
    const c = await capsule({ yaml: filesManifest('out/', 64 * MiB), workdir });
    const a = Buffer.alloc(MiB, 'a');
    expect((await rawGet(c.url, '/resources/files/f')).body.equals(a)).toBe(true);
    const hits = native.digestCacheStats().hits;
    const cached = await rawGet(c.url, '/resources/files/f');
    expect(cached.body.equals(a)).toBe(true);
    if (native.digestCacheStats().hits === hits) return ctx.skip('no digest was cached here (no lease, or the kernel names no unique mount id)');

    // The swap: same device, same st_dev, same inode and times; other bytes.
    unmount(out);
    run('losetup', ['-d', device]);
    run('losetup', [device, second]);
    run('mount', [device, out]);
    const after = statSync(join(out, 'f'));
    expect([after.dev, after.ino, after.size, after.mtimeMs, after.ctimeMs]).toEqual([before.dev, before.ino, before.size, before.mtimeMs, before.ctimeMs]);
    const swapped = await rawGet(c.url, '/resources/files/f');
    expect(swapped.status).toBe(200);
    expect(swapped.body.equals(Buffer.alloc(MiB, 'b'))).toBe(true);
    expect(swapped.header('etag')).toBe(`"sha256:${sha256Hex(swapped.body)}"`);
    await c.close();
  });
});
