// Adversarial: files that change during a read. An attacker's attempts against the README's Security model and SPEC
// sections 3-4, on real trees and real sockets (127.0.0.1 only). Comments marked "Was a WEAKNESS" say
// what an earlier version got wrong, so a regression reads as the attack it re-opens. Every loop is
// bounded by a count or a deadline. (Shared plumbing: test/helpers/adversary.ts.)
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import {
  closeSync, existsSync, linkSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync,
  symlinkSync, writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { list as clientList } from '../../src/cli/client.js';
import type { Containment } from '../../src/manifest/model.js';
import { mintToken, randomNonceHex } from '../../src/handle/token.js';
import { capsule, filesManifest, openCapsule, type Capsule } from '../helpers/capsule.js';
import { defer, reap } from '../helpers/cleanup.js';
import { rawExchange, rawGet, rawRequest, readTrace, sha256Hex, type RawResponse } from '../helpers/http.js';
import { raceSwaps, racesTimeout, raceUntil, sawAll, skipRace, until } from '../helpers/race.js';
import { bothResolvers, RESOLVERS } from '../helpers/resolvers.js';
import { fdCount, makeTree, removeTree, scratch, tempDir } from '../helpers/tree.js';
import { child, codeOf, expectNoSecret, INSIDE, opensBefore, SECRET, SECRET_SHA, sleep, up, watchOpens } from '../helpers/adversary.js';

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
