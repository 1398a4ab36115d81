// Races against the resolver and the reader: a directory swapped for an escaping symlink while
// reads run, files replaced by rename and rewritten in place while reads run, and descriptor
// accounting over many operations. None of these may ever yield an outside byte or a hash that
// does not describe the body.
import { spawn, type ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ExportView, type Containment } from '../../src/export/export-view.js';
import { Refusal } from '../../src/codes.js';
import type * as native from '../../src/addon/export.js';
import { reap } from '../helpers/cleanup.js';
import { raceSwaps, racesTimeout, raceUntil, sawAll } from '../helpers/race.js';
import { heldDirectory, RESOLVERS } from '../helpers/resolvers.js';
import { fdCount, makeTree, scratch } from '../helpers/tree.js';
import { listEntries } from '../helpers/body.js';
import { sha256Hex } from '../helpers/http.js';

const SECRET = 'OUTSIDE-SECRET-BYTES';

function viewOf(fd: number, containment: Containment, resolver: native.ResolverKind, maxBytes = 1 << 20): ExportView {
  return new ExportView({ plane: 'files', workdirFd: () => fd, root: 'out', maxBytes, containment, resolver });
}

async function openView(dir: string, containment: Containment, resolver: native.ResolverKind, maxBytes = 1 << 20): Promise<ExportView> {
  return viewOf((await heldDirectory(dir)).fd, containment, resolver, maxBytes);
}

describe.each(RESOLVERS)('symlink-swap race (%s)', (resolver) => {
  it.for(['sealed', 'scoped'] as Containment[])(
    'never reads outside while mid/ and an escaping link trade places (%s)',
    racesTimeout(2),
    async (containment, ctx) => {
      const dir = scratch();
      const outside = scratch([`f.txt: ${SECRET}`, `deep/f.txt: ${SECRET}`]);
      makeTree(dir, [
        'out/mid/f.txt: inside bytes',
        'out/mid/deep/f.txt: inside bytes',
        `out/swap -> ${outside}`,
        'out/swap-rel -> ../outside',
        `outside/f.txt: ${SECRET}`,
        `outside/deep/f.txt: ${SECRET}`,
      ]);
      const v = await openView(dir, containment, resolver);
      for (const [a, b] of [
        ['out/mid', 'out/swap'],
        ['out/mid', 'out/swap-rel'],
      ] as const) {
        let turn = 0;
        const seen = await raceSwaps(ctx, `${dir}/${a}`, `${dir}/${b}`, {
          step: async () => {
            const rel = turn++ % 2 ? 'mid/deep/f.txt' : 'mid/f.txt';
            try {
              const r = await v.read(rel);
              expect(r.bytes.toString()).toBe('inside bytes');
              expect(r.sha256).toBe(sha256Hex(r.bytes));
              return 'ok';
            } catch (error) {
              if (!(error instanceof Refusal)) throw error;
              expect(['outside_root', 'not_found', 'symlink_refused']).toContain(error.code);
              return error.code;
            }
          },
          // Both states observed, so the reads really did interleave with the swaps.
          enough: (m) => sawAll(500, 'ok')(m) && m.size > 1,
        });
        expect(seen.get('ok') ?? 0).toBeGreaterThan(0);
        expect(seen.size).toBeGreaterThan(1);
      }
    },
  );
});

function churn(script: string, dir: string): ChildProcess {
  return reap(spawn(process.execPath, ['-e', script, dir], { stdio: 'ignore' }));
}

// Each version is one repeated character at a length that varies, so a torn body is detectable.
const RENAME_WRITER = `
const fs = require('fs'); const dir = process.argv[1]; let i = 0;
for (;;) { const c = String.fromCharCode(97 + (i % 26)); const len = 1000 + (i * 7919) % 200000;
  fs.writeFileSync(dir + '/out/.tmp', c.repeat(len)); fs.renameSync(dir + '/out/.tmp', dir + '/out/f.txt'); i++; }`;
const INPLACE_WRITER = `
const fs = require('fs'); const dir = process.argv[1]; let i = 0;
for (;;) { const c = String.fromCharCode(97 + (i % 26)); const len = 1000 + (i * 7919) % 200000;
  fs.writeFileSync(dir + '/out/f.txt', c.repeat(len)); i++; }`;

describe.each(RESOLVERS)('content churn (%s)', (resolver) => {
  it('rename-into-place: every body is one whole version and its hash describes it', async () => {
    const dir = scratch(['out/f.txt: a']);
    const v = await openView(dir, 'sealed', resolver);
    churn(RENAME_WRITER, dir);
    const versions = new Set<string>();
    // At least 2,000 reads and until two versions were seen (the writer may start late on a busy machine).
    const deadline = Date.now() + 120_000;
    for (let i = 0; i < 2000 || (versions.size < 2 && Date.now() < deadline); i++) {
      const r = await v.read('f.txt');
      expect(r.sha256).toBe(sha256Hex(r.bytes));
      const text = r.bytes.toString();
      expect(text.length).toBeGreaterThan(0);
      expect(text).toBe(text[0]!.repeat(text.length));
      versions.add(text[0]!);
    }
    expect(versions.size).toBeGreaterThan(1);
  });

  it('in-place rewrite: the hash always describes exactly the bytes returned', racesTimeout(1), async (ctx) => {
    const dir = scratch(['out/f.txt: a']);
    const v = await openView(dir, 'sealed', resolver);
    churn(INPLACE_WRITER, dir);
    // At least 2,000 reads, and until the reads met the writer (more than one version, or a body
    // caught mid-rewrite): a writer that starts after the last read leaves nothing checked.
    await raceUntil(ctx, {
      step: async () => {
        const r = await v.read('f.txt');
        expect(r.sha256).toBe(sha256Hex(r.bytes));
        const text = r.bytes.toString();
        return text.length === 0 ? 'empty' : text === text[0]!.repeat(text.length) ? text[0]! : 'torn';
      },
      enough: (m) => sawAll(2000)(m) && m.size > 1,
    });
  });

  it('a file that grows past the ceiling between fstat and read is refused, not truncated', racesTimeout(1), async (ctx) => {
    const dir = scratch(['out/f.txt: a']);
    const v = await openView(dir, 'sealed', resolver, 150_000);
    churn(INPLACE_WRITER, dir);
    // At least 2,000 reads, and until both answers were met: versions past the ceiling are
    // written, so reads that never saw one never raced the writer.
    await raceUntil(ctx, {
      step: async () => {
        try {
          const r = await v.read('f.txt');
          expect(r.bytes.length).toBeLessThanOrEqual(150_000);
          expect(r.sha256).toBe(sha256Hex(r.bytes));
          return 'ok';
        } catch (error) {
          expect((error as Refusal).code).toBe('too_large');
          return 'too_large';
        }
      },
      enough: sawAll(2000, 'ok', 'too_large'),
    });
  });
});

describe('descriptor accounting', () => {
  it.each(RESOLVERS)('10,000 operations leave no descriptor behind (%s)', async (resolver) => {
    const dir = scratch([
      'out/a.txt: a',
      'out/sub/b.txt: b',
      'out/link -> a.txt',
      'out/esc -> ../x',
      'out/fifo |',
      'out/big @ 4k',
      'out/sub/l2 -> ../sub/b.txt',
    ]);
    const before = fdCount();
    const workdirs = [await heldDirectory(dir), await heldDirectory(dir)];
    const v = viewOf(workdirs[0]!.fd, 'sealed', resolver, 1024);
    const scoped = viewOf(workdirs[1]!.fd, 'scoped', resolver, 1024);
    const ops = [
      () => v.read('a.txt'),
      () => v.read('link'),
      () => v.read('esc'),
      () => v.read('fifo'),
      () => v.read('big'),
      () => v.read('missing'),
      () => v.read('sub/l2'),
      () => v.stat('sub/b.txt'),
      () => listEntries(v),
      () => scoped.read('link'),
    ];
    for (let i = 0; i < 10_000; i += ops.length) {
      await Promise.all(ops.map((op) => op().catch(() => undefined)));
    }
    for (const w of workdirs) w.close(); // the two workdir descriptors are the test's own
    expect(fdCount()).toBe(before);
  });
});
