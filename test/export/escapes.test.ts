// The foundation's escape table replayed against resolve (stat), read and list, in both resolver
// modes and every containment class, on a real tree with secrets planted beside the root.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExportView, type Containment } from '../../src/export/export-view.js';
import { Refusal, renderHttp } from '../../src/codes.js';
import * as native from '../../src/addon/export.js';
import { buildEscapeTree, ESCAPE_CASES, LISTED_FOLLOW, LISTED_SCOPED, MAX_BYTES, SECRET } from '../helpers/escape-cases.js';
import { heldDirectory, RESOLVERS } from '../helpers/resolvers.js';
import { makeTree, removeTree, scratch, tempDir } from '../helpers/tree.js';
import { listEntries } from '../helpers/body.js';
import { assertNoSecret } from '../helpers/secrets.js';

const CLASSES: Containment[] = ['sealed', 'advisory', 'scoped'];

let workdir: string;
let listWorkdir: string;
let workdirFd: number;
let listWorkdirFd: number;

beforeAll(async () => {
  workdir = tempDir();
  buildEscapeTree(workdir);
  listWorkdir = tempDir();
  buildEscapeTree(listWorkdir, { sparse: false });
  workdirFd = await native.openDirectory(workdir);
  listWorkdirFd = await native.openDirectory(listWorkdir);
});

afterAll(() => {
  native.closeFd(workdirFd);
  native.closeFd(listWorkdirFd);
  removeTree(workdir);
  removeTree(listWorkdir);
});

function view(fd: number, containment: Containment, resolver: native.ResolverKind, root = 'out/'): ExportView {
  return new ExportView({ plane: 'files', workdirFd: () => fd, root, maxBytes: MAX_BYTES, containment, resolver });
}

async function outcome<T>(run: () => Promise<T>): Promise<{ code: string; value?: T }> {
  try {
    return { code: 'ok', value: await run() };
  } catch (error) {
    if (error instanceof Refusal) return { code: error.code };
    throw error;
  }
}

const noSecret = (value: unknown) => assertNoSecret(value, 'an escape case', { mark: SECRET, contents: [SECRET] });

describe.each(RESOLVERS)('resolver %s', (resolver) => {
  describe.each(CLASSES)('class %s', (containment) => {
    it.each(ESCAPE_CASES)('read $raw', async (c) => {
      const expected = containment === 'scoped' ? c.scoped : c.follow;
      const v = view(workdirFd, containment, resolver);
      const result = await outcome(async () => v.read(v.lower(c.raw, 'url')));
      expect(result.code).toBe(expected);
      if (expected === 'ok') {
        const bytes = result.value!.bytes;
        expect(bytes.toString()).toBe(c.body);
        expect(result.value!.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
      }
      noSecret(result);
    });

    it.each(ESCAPE_CASES)('resolve $raw', async (c) => {
      const expected = containment === 'scoped' ? c.scoped : c.follow;
      const v = view(workdirFd, containment, resolver);
      const result = await outcome(async () => v.stat(v.lower(c.raw, 'url')));
      // stat applies no size ceiling: a too-large file resolves fine and is refused on read.
      expect(result.code).toBe(expected === 'too_large' ? 'ok' : expected);
      noSecret(result);
    });

    it('lists regular files beneath the root only, sorted by bytes, per the class', async () => {
      const entries = await listEntries(view(listWorkdirFd, containment, resolver));
      expect(entries.map((e) => e.path)).toEqual(containment === 'scoped' ? LISTED_SCOPED : LISTED_FOLLOW);
      for (const e of entries) {
        expect(e.sha256).toMatch(/^[0-9a-f]{64}$/);
        expect(e.mtimeMs).toBeGreaterThan(1_600_000_000_000);
      }
      const report = entries.find((e) => e.path === 'report.md')!;
      expect(report.size).toBe('hello report'.length);
      expect(report.sha256).toBe(createHash('sha256').update('hello report').digest('hex'));
      // big.bin is listed with its real size even though a read of it is refused
      expect(entries.find((e) => e.path === 'big.bin')!.size).toBe(2048);
      noSecret(entries);
    });

    it('a root that does not exist yet lists empty, reads not_found, and is served once created', async () => {
      const dir = scratch();
      const { fd } = await heldDirectory(dir);
      const v = view(fd, containment, resolver, 'later/');
      expect(await listEntries(v)).toEqual([]);
      expect((await outcome(() => v.read('x.txt'))).code).toBe('not_found');
      makeTree(dir, ['later/x.txt: arrived']);
      expect((await listEntries(v)).map((e) => e.path)).toEqual(['x.txt']);
      expect((await v.read('x.txt')).bytes.toString()).toBe('arrived');
    });

    it('a root that is a symlink inside the workdir is followed; one pointing out is outside_root', async () => {
      const dir = scratch();
      const outside = scratch([`s.txt: ${SECRET}`]);
      makeTree(dir, ['real/r.txt: real', 'alias -> real', `away -> ${outside}`, 'away-rel -> ../', 'file-root: x']);
      const { fd } = await heldDirectory(dir);
      expect((await view(fd, containment, resolver, 'alias/').read('r.txt')).bytes.toString()).toBe('real');
      expect((await outcome(() => view(fd, containment, resolver, 'away/').read('s.txt'))).code).toBe('outside_root');
      expect((await outcome(() => listEntries(view(fd, containment, resolver, 'away/')))).code).toBe('outside_root');
      expect((await outcome(() => listEntries(view(fd, containment, resolver, 'away-rel/')))).code).toBe('outside_root');
      expect((await outcome(() => view(fd, containment, resolver, 'file-root').read('x'))).code).toBe('not_found');
      expect(await listEntries(view(fd, containment, resolver, 'file-root'))).toEqual([]);
    });
  });
});

describe('the read ceiling', () => {
  it.each(RESOLVERS)('refuses a file above max_bytes before reading and serves one at exactly max_bytes (%s)', async (resolver) => {
    const v = view(workdirFd, 'sealed', resolver);
    const err = await outcome(() => v.read('big.bin'));
    expect(err.code).toBe('too_large');
    const exact = await v.read('exact.bin');
    expect(exact.bytes.length).toBe(MAX_BYTES);
  });

  it('refuses as too_large, rendered with the declared ceiling in the message', async () => {
    try {
      await view(workdirFd, 'sealed', RESOLVERS[0]!).read('big.bin');
      expect.unreachable();
    } catch (error) {
      expect((error as Refusal).code).toBe('too_large');
      expect(renderHttp('files', error as Refusal, { maxBytes: MAX_BYTES }).message).toBe(
        `file exceeds the declared exports.files.max_bytes of ${MAX_BYTES} bytes`,
      );
    }
  });
});
