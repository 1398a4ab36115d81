// One table of path shapes, replayed against resolve, read and list in both resolver modes and
// every containment class, and over HTTP by the plane tests. Each case gives the raw relpath as it
// would appear after `/resources/files/` and the outcome per class: 'ok' or a wire code.
import { writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { makeTree } from './tree.js';

export const SECRET = 'TOPSECRET-do-not-serve';
export const SECRET_SHA = createHash('sha256').update(SECRET).digest('hex');
export const MAX_BYTES = 1024;

export type Outcome = 'ok' | 'not_found' | 'outside_root' | 'symlink_refused' | 'not_a_regular_file' | 'too_large';

export interface EscapeCase {
  raw: string;
  /** outcome under sealed and advisory */
  follow: Outcome;
  /** outcome under scoped */
  scoped: Outcome;
  /** when ok, the bytes expected */
  body?: string;
}

/**
 * Builds the fixture: a workdir with `out/` as the root, secrets beside it. `sparse` adds the
 * 8 GiB sparse file; listings hash files whole, so listing fixtures leave it out to stay fast.
 */
export function buildEscapeTree(workdir: string, opts: { sparse: boolean } = { sparse: true }): void {
  makeTree(workdir, [
    `secret.txt: ${SECRET}`,
    `out-evil/secret.txt: ${SECRET}`,
    'out/report.md: hello report',
    'out/.hidden: hidden bytes',
    'out/sub/a.txt: in sub',
    'out/sub/deeper/b.txt: deeper',
    'out/sub dir/x.md: spaced',
    'out/link-file -> report.md',
    'out/link-dir -> sub',
    'out/dotdot-inside -> sub/../report.md',
    `out/abs-inside -> ${join(workdir, 'out/report.md')}`,
    'out/escape -> ../secret.txt',
    'out/escape-dir -> ..',
    'out/sibling -> ../out-evil/secret.txt',
    'out/sub/up-escape -> ../../secret.txt',
    'out/loop-a -> loop-b',
    'out/loop-b -> loop-a',
    'out/magic -> /proc/self/root/etc/passwd',
    'out/magic-rel -> ../../../../../../../../../../proc/self/root/etc/passwd',
    'out/dangling -> nowhere.txt',
    'out/fifo |',
    'out/sock =',
    'out/big.bin @ 2k',
    ...(opts.sparse ? ['out/sparse.bin @ 8g'] : []),
  ]);
  writeFileSync(join(workdir, 'out/exact.bin'), Buffer.alloc(MAX_BYTES, 0x61));
}

const ok = (body: string): Pick<EscapeCase, 'follow' | 'scoped' | 'body'> => ({ follow: 'ok', scoped: 'ok', body });
const all = (o: Outcome): Pick<EscapeCase, 'follow' | 'scoped'> => ({ follow: o, scoped: o });
const link = (follow: Outcome, body?: string): Pick<EscapeCase, 'follow' | 'scoped' | 'body'> => ({ follow, scoped: 'symlink_refused', body });

export const ESCAPE_CASES: EscapeCase[] = [
  { raw: 'report.md', ...ok('hello report') },
  { raw: '.hidden', ...ok('hidden bytes') },
  { raw: 'sub/a.txt', ...ok('in sub') },
  { raw: 'sub/deeper/b.txt', ...ok('deeper') },
  { raw: 'sub%20dir/x.md', ...ok('spaced') },
  { raw: 'sub%2Fa.txt', ...ok('in sub') },
  { raw: 'report.md/', ...ok('hello report') },
  { raw: 'exact.bin', ...ok('a'.repeat(MAX_BYTES)) },
  // `..` in every position, raw and encoded
  { raw: '..', ...all('outside_root') },
  { raw: '../secret.txt', ...all('outside_root') },
  { raw: 'sub/../report.md', ...all('outside_root') },
  { raw: 'sub/../../secret.txt', ...all('outside_root') },
  { raw: 'sub/..', ...all('outside_root') },
  { raw: '../out-evil/secret.txt', ...all('outside_root') },
  { raw: '%2e%2e%2fsecret.txt', ...all('outside_root') },
  { raw: '%2E%2E/secret.txt', ...all('outside_root') },
  { raw: 'sub%2F..%2F..%2Fsecret.txt', ...all('outside_root') },
  { raw: '%2e%2e', ...all('outside_root') },
  // absolute, empty segments, dots
  { raw: '/etc/passwd', ...all('outside_root') },
  { raw: '%2Fetc%2Fpasswd', ...all('outside_root') },
  { raw: '//etc/passwd', ...all('outside_root') },
  { raw: 'sub//a.txt', ...all('outside_root') },
  { raw: 'report.md//', ...all('outside_root') },
  { raw: '.', ...all('outside_root') },
  { raw: './report.md', ...all('outside_root') },
  { raw: 'sub/./a.txt', ...all('outside_root') },
  { raw: '%2e/report.md', ...all('outside_root') },
  // bytes that never name a file
  { raw: 'report.md%00', ...all('outside_root') },
  { raw: 'a%00/../secret.txt', ...all('outside_root') },
  { raw: '%ff%fe', ...all('outside_root') },
  { raw: '%C0%AE%C0%AE/secret.txt', ...all('outside_root') },
  { raw: '%ED%A0%80', ...all('outside_root') },
  // symlinks
  { raw: 'link-file', ...link('ok', 'hello report') },
  { raw: 'link-file/', ...link('ok', 'hello report') },
  { raw: 'link-dir/a.txt', ...link('ok', 'in sub') },
  { raw: 'link-dir/', ...link('not_a_regular_file') },
  { raw: 'dotdot-inside', ...link('ok', 'hello report') },
  { raw: 'abs-inside', ...link('outside_root') },
  { raw: 'escape', ...link('outside_root') },
  { raw: 'escape/', ...link('outside_root') },
  { raw: 'escape-dir/secret.txt', ...link('outside_root') },
  { raw: 'escape-dir/out/report.md', ...link('outside_root') },
  { raw: 'sibling', ...link('outside_root') },
  { raw: 'sub/up-escape', ...link('outside_root') },
  { raw: 'loop-a', ...link('not_found') },
  { raw: 'magic', ...link('outside_root') },
  { raw: 'magic-rel', ...link('outside_root') },
  { raw: 'dangling', ...link('not_found') },
  // things that are not regular files, or too big
  { raw: 'missing.txt', ...all('not_found') },
  { raw: 'report.md/x', ...all('not_found') },
  { raw: 'sub', ...all('not_a_regular_file') },
  { raw: 'sub/', ...all('not_a_regular_file') },
  { raw: 'fifo', ...all('not_a_regular_file') },
  { raw: 'sock', ...all('not_a_regular_file') },
  { raw: 'big.bin', ...all('too_large') },
  { raw: 'sparse.bin', ...all('too_large') },
];

/** What the listing of a tree built with `sparse: false` must hold, per class, in order. */
export const LISTED_FOLLOW = ['.hidden', 'big.bin', 'dotdot-inside', 'exact.bin', 'link-file', 'report.md', 'sub dir/x.md', 'sub/a.txt', 'sub/deeper/b.txt'];
export const LISTED_SCOPED = LISTED_FOLLOW.filter((p) => p !== 'link-file' && p !== 'dotdot-inside');
