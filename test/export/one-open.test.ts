// One open per read (SPEC section 10, a live workdir): the addon resolves a served path once and
// everything after (the tier, the digest, the body) comes from that one descriptor. Counted here
// by the addon's own tally of resolutions, for a read of every tier: small (read on the JS thread),
// medium (read whole on the pool), large (streamed), and large while written (a snapshot). Then a
// race: the path is exchanged with another file of another size while it is read, and every body
// is one inode's bytes under that inode's etag.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { exportResolutionsForTests } from '../../src/addon/for-tests.js';
import { capsule, filesManifest } from '../helpers/capsule.js';
import { rawGet, sha256Hex } from '../helpers/http.js';
import { raceSwaps, racesTimeout, sawAll } from '../helpers/race.js';
import { scratch } from '../helpers/tree.js';

const KiB = 1024;
const MiB = 1024 * KiB;

describe('a read resolves its path once', () => {
  it('one resolution for a read of every size, whatever path its body takes', async () => {
    const workdir = scratch(['out/']);
    const sizes = { small: KiB, medium: 300 * KiB, large: 4 * MiB, fresh: 4 * MiB };
    for (const [name, size] of Object.entries(sizes)) if (name !== 'fresh') writeFileSync(join(workdir, 'out', name), Buffer.alloc(size, name.charCodeAt(0)));
    // Past the racy margin (native/digest_cache.h): `large` is settled and streams; `fresh`, just
    // written, is a snapshot.
    await new Promise((resolve) => setTimeout(resolve, 2_300));
    writeFileSync(join(workdir, 'out', 'fresh'), Buffer.alloc(sizes.fresh, 'f'));
    const c = await capsule({ yaml: filesManifest('out/', 64 * MiB), workdir });
    for (const name of Object.keys(sizes)) {
      const before = exportResolutionsForTests();
      const r = await rawGet(c.url, `/resources/files/${name}`);
      expect(r.status).toBe(200);
      expect(r.body.length).toBe(sizes[name as keyof typeof sizes]);
      expect(exportResolutionsForTests() - before, name).toBe(1);
    }
  });
});

describe('a path exchanged with another file while it is read', () => {
  it("serves one inode whole: every body is one file, under that file's etag", racesTimeout(1), async (ctx) => {
    const workdir = scratch(['out/']);
    // Different sizes on different tiers: a second walk would decide the tier on one and read another.
    const a = Buffer.alloc(2 * MiB, 'a');
    const b = Buffer.alloc(10 * KiB, 'b');
    writeFileSync(join(workdir, 'out', 'f'), a);
    writeFileSync(join(workdir, 'out', 'g'), b);
    const c = await capsule({ yaml: filesManifest('out/', 64 * MiB), workdir });
    await raceSwaps(ctx, join(workdir, 'out', 'f'), join(workdir, 'out', 'g'), {
      step: async () => {
        const r = await rawGet(c.url, '/resources/files/f');
        expect(r.status).toBe(200);
        expect(r.header('etag')).toBe(`"sha256:${sha256Hex(r.body)}"`);
        if (r.body.equals(a)) return 'a';
        expect(r.body.equals(b), `a body of ${r.body.length} bytes that is neither file`).toBe(true);
        return 'b';
      },
      enough: sawAll(60, 'a', 'b'),
    });
  });
});
