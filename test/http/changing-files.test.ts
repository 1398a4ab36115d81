import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { rawGet, sha256Hex } from '../helpers/http.js';
import { racesTimeout, raceUntil, sawAll } from '../helpers/race.js';
import { RESOLVERS } from '../helpers/resolvers.js';
import { scratch } from '../helpers/tree.js';
import { child, codeOf, up } from '../helpers/adversary.js';

// ── 9. Files that change during a read ─────────────────────────────────────────────────────────

describe.each(RESOLVERS)('files that shrink and grow during reads (%s)', (resolver) => {
  it('truncate-to-zero / sparse-extend churn: the etag always describes the body; never above the ceiling', racesTimeout(1), async (ctx) => {
    const work = scratch(['out/f: start']);
    const srv = await up(work, { resolver, maxBytes: 300_000 });
    // Alternates: truncate to 0, write 'b' * n, extend sparsely past the ceiling, shrink.
    const script = `const fs=require('fs');const fd=fs.openSync(process.argv[1],'r+');const end=Date.now()+120000;let i=0;
while(Date.now()<end){fs.ftruncateSync(fd,0);fs.writeSync(fd,Buffer.alloc(1000+(i*7919)%250000,98),0,undefined,0);
if(i%3===0)fs.ftruncateSync(fd,400000);if(i%5===0)fs.ftruncateSync(fd,10);i++;}`;
    const writer = child(process.execPath, ['-e', script, join(work, 'out/f')]);
    // At least 300 reads, and until they met the churn both ways (a churned body served, and a
    // version past the ceiling refused): reads that only ever saw 'start' raced nothing.
    const seen = await raceUntil(ctx, {
      step: async () => {
        const res = await rawGet(srv.url, '/resources/files/f');
        const code = codeOf(res);
        expect(['ok', 'too_large']).toContain(code);
        if (code === 'ok') {
          expect(res.body.length).toBeLessThanOrEqual(300_000);
          expect(res.header('etag')).toBe(`"sha256:${sha256Hex(res.body)}"`);
          for (const byte of new Set(res.body)) expect([0, 98, 115, 116, 97, 114]).toContain(byte);
          return res.body.toString() === 'start' ? 'ok:start' : 'ok:churned';
        }
        return code;
      },
      enough: sawAll(300, 'ok:churned', 'too_large'),
    });
    writer.kill('SIGKILL');
    expect(seen.has('ok:churned')).toBe(true);
  });
});
