// Adversarial: escaping the root (swapped roots, symlink chains, /proc, hard links, special files, hostile names, a redirected root). An attacker's attempts against the README's Security model and SPEC
// sections 3-4, on real trees and real sockets (127.0.0.1 only). Comments marked "Was a WEAKNESS" say
// what an earlier version got wrong, so a regression reads as the attack it re-opens. Every loop is
// bounded by a count or a deadline. (Shared plumbing: test/helpers/adversary.ts.)
import { execFileSync } from 'node:child_process';
import { existsSync, linkSync, readFileSync, readdirSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import type { Containment } from '../../src/manifest/model.js';
import { rawGet, rawRequest, sha256Hex } from '../helpers/http.js';
import { raceSwaps, racesTimeout, sawAll, skipRace, until } from '../helpers/race.js';
import { bothResolvers, RESOLVERS } from '../helpers/resolvers.js';
import { fdCount, makeTree, removeTree, scratch, tempDir } from '../helpers/tree.js';
import { child, codeOf, expectNoSecret, INSIDE, opensBefore, SECRET, SECRET_SHA, sleep, up, watchOpens } from '../helpers/adversary.js';

function hammerStep(url: string, targets: string[]): () => Promise<string> {
  let n = 0;
  return async () => {
    const target = targets[n++ % targets.length]!;
    const res = await rawGet(url, target);
    expectNoSecret(res);
    if (res.status === 200) {
      if (target.endsWith('/resources/files')) {
        for (const e of res.json().entries) {
          expect(e.sha256).not.toBe(SECRET_SHA);
        }
      } else {
        expect(res.body.toString()).toBe(INSIDE);
        expect(res.header('etag')).toBe(`"sha256:${sha256Hex(res.body)}"`);
      }
    }
    return `${target.endsWith('/resources/files') ? 'list' : 'read'}:${codeOf(res)}`;
  };
}

// ── 1. Swapping the export root (or an ancestor of it) for an escaping symlink ─────────────────────

describe.each(RESOLVERS)('export root swapped under load (%s)', (resolver) => {
  // The workdir is `work/`; `outside/` sits beside it holding the secret in the same shape as the
  // root, so an escape that "works" would find `f.txt` and serve it.
  const cases: Array<{ name: string; root: string; a: string; b: string }> = [
    { name: 'root <-> relative escaping link', root: 'out/', a: 'out', b: 'evil-rel' },
    { name: 'root <-> absolute link to the outside copy', root: 'out/', a: 'out', b: 'evil-abs' },
    { name: 'root <-> two-hop link chain that climbs out', root: 'out/', a: 'out', b: 'evil-hop' },
    { name: 'ancestor a/ of root a/b/out <-> escaping link', root: 'a/b/out/', a: 'a', b: 'evil-a' },
  ];
  it.for(cases)('$name: reads and listings never see an outside byte', racesTimeout(1), async ({ root, a, b }, ctx) => {
    const base = scratch([
      `outside/f.txt: ${SECRET}`,
      `outside/sub/f.txt: ${SECRET}`,
      `outside-a/b/out/f.txt: ${SECRET}`,
      `work/out/f.txt: ${INSIDE}`,
      `work/a/b/out/f.txt: ${INSIDE}`,
      'work/evil-rel -> ../outside',
      'work/hop -> ../outside',
      'work/evil-hop -> hop',
      'work/evil-a -> ../outside-a',
    ]);
    symlinkSync(join(base, 'outside'), join(base, 'work/evil-abs'));
    const work = join(base, 'work');
    const srv = await up(work, { resolver, root });
    const seen = await raceSwaps(ctx, join(work, a), join(work, b), {
      step: hammerStep(srv.url, ['/resources/files/f.txt', '/resources/files']),
      enough: sawAll(400, 'read:ok', (k) => k.startsWith('read:') && k !== 'read:ok'),
    });
    // Both states were met: the reads really interleaved with the swaps.
    expect(seen.get('read:ok') ?? 0).toBeGreaterThan(0);
    expect([...seen.keys()].some((k) => k.startsWith('read:') && k !== 'read:ok')).toBe(true);
    for (const key of seen.keys()) expect(['read:ok', 'read:outside_root', 'read:not_found', 'list:ok', 'list:outside_root']).toContain(key);
  });
});

describe.each(RESOLVERS)('listing while directories are swapped for links (%s)', (resolver) => {
  it.for(['sealed', 'scoped', 'advisory'] as Containment[])('never lists an outside file (%s)', racesTimeout(1), async (containment, ctx) => {
    const base = scratch([
      `outside/f.txt: ${SECRET}`,
      `outside/deep/g.txt: ${SECRET}`,
      `work/out/mid/f.txt: ${INSIDE}`,
      `work/out/mid/deep/g.txt: ${INSIDE}`,
      'work/out/mid/l -> f.txt',
      'work/out/mid/deep/up -> ../f.txt',
      'work/out/swap -> ../../outside',
    ]);
    const work = join(base, 'work');
    const srv = await up(work, { resolver, containment });
    const seen = await raceSwaps(ctx, join(work, 'out/mid'), join(work, 'out/swap'), {
      step: hammerStep(srv.url, ['/resources/files', '/resources/files/mid/deep/up', '/resources/files/mid/l']),
      enough: sawAll(300, 'list:ok'),
    });
    expect(seen.get('list:ok') ?? 0).toBeGreaterThan(0);
    for (const key of seen.keys()) {
      expect(['list:ok', 'read:ok', 'read:outside_root', 'read:not_found', 'read:symlink_refused']).toContain(key);
    }
  });
});

// ── 2. Symlink chains: limits, loops, `..` climbing through several hops ──────────────────────────

describe.each(RESOLVERS)('symlink chains (%s)', (resolver) => {
  let work: string;
  beforeAll(() => {
    work = tempDir('rp-adv-chain-');
    const lines = [`secret.txt: ${SECRET}`, `out/target.txt: ${INSIDE}`, `out/d1/d2/d3/leaf.txt: ${INSIDE}`];
    // chain40/0 -> chain40/1 -> ... -> chain40/39 -> ../target.txt : 40 links followed
    for (let i = 0; i < 40; i++) lines.push(`out/c40/${i} -> ${i === 39 ? '../target.txt' : String(i + 1)}`);
    for (let i = 0; i < 41; i++) lines.push(`out/c41/${i} -> ${i === 40 ? '../target.txt' : String(i + 1)}`);
    lines.push(
      // Each hop climbs one level; only the last one leaves the root.
      'out/d1/d2/d3/h1 -> ../h2',
      'out/d1/d2/h2 -> ../h3',
      'out/d1/h3 -> ../h4',
      'out/h4 -> ../secret.txt',
      // Climb above the root and come straight back in: still an escape (never normalised).
      'out/d1/back-in -> ../../out/target.txt',
      'out/d1/d2/back-in2 -> ../../h-up',
      'out/h-up -> ../out/target.txt',
      // Climb within the root through hops: fine.
      'out/d1/d2/d3/in1 -> ../in2',
      'out/d1/d2/in2 -> ../../target.txt',
      // `..` after a link to a directory is physical: link-dir/.. is d2, not out/.
      'out/dl -> d1/d2/d3',
      'out/via -> dl/../../../target.txt',
      'out/via-out -> dl/../../../../secret.txt',
      // An absolute hop in the middle of a relative chain.
      'out/abs-mid -> abs-hop',
      'out/self -> self',
      'out/pingdir -> pongdir/x',
      'out/pongdir -> pingdir/y',
      'out/dot-chain -> ./././d1/./d2/./d3/./leaf.txt',
      'out/slashes -> d1//d2///d3////leaf.txt',
      'out/trailing -> target.txt/',
      'out/empty-dots -> d1/../d1/../../secret.txt',
    );
    makeTree(work, lines);
    symlinkSync(join(work, 'out/target.txt'), join(work, 'out/abs-hop'));
  });
  afterAll(() => removeTree(work));

  const table: Array<[string, string, string?]> = [
    ['c40/0', 'ok', INSIDE],
    ['c41/0', 'not_found'],
    ['d1/d2/d3/h1', 'outside_root'],
    ['d1/back-in', 'outside_root'],
    ['d1/d2/back-in2', 'outside_root'],
    ['d1/d2/d3/in1', 'ok', INSIDE],
    ['via', 'ok', INSIDE],
    ['via-out', 'outside_root'],
    ['abs-mid', 'outside_root'],
    ['self', 'not_found'],
    ['pingdir', 'not_found'],
    ['dot-chain', 'ok', INSIDE],
    ['slashes', 'ok', INSIDE],
    ['trailing', 'not_found'],
    ['empty-dots', 'outside_root'],
  ];
  it.each(table)('%s -> %s (sealed), symlink_refused (scoped)', async (rel, code, body) => {
    for (const containment of ['sealed', 'scoped'] as Containment[]) {
      const srv = await up(work, { resolver, containment });
      const res = await rawGet(srv.url, `/resources/files/${rel}`);
      expectNoSecret(res);
      expect(codeOf(res)).toBe(containment === 'scoped' ? 'symlink_refused' : code);
      if (containment !== 'scoped' && body !== undefined) expect(res.body.toString()).toBe(body);
    }
  });

  it('the listing holds only in-root targets and no secret', async () => {
    const srv = await up(work, { resolver });
    const res = await rawGet(srv.url, '/resources/files');
    expectNoSecret(res);
    const paths: string[] = res.json().entries.map((e: { path: string }) => e.path);
    expect(paths).toContain('c40/0');
    expect(paths).not.toContain('c41/0');
    expect(paths).not.toContain('d1/d2/d3/h1');
    expect(paths).not.toContain('via-out');
    expect(paths).toContain('via');
  });
});

// ── 3. /proc tricks that need no mount ─────────────────────────────────────────────────────────

describe.each(RESOLVERS)('/proc without a mount (%s)', (resolver) => {
  it('relative climbs to /proc, /proc magic links, and a root that is itself a /proc detour are refused', async () => {
    const depth = '../'.repeat(30);
    const base = scratch([`work/secret.txt: ${SECRET}`, 'work/out/x: x']);
    const work = join(base, 'work');
    makeTree(work, [
      `out/cwd -> ${depth}proc/self/cwd/secret.txt`,
      `out/fdlink -> ${depth}proc/self/fd`,
      `out/root -> ${depth}proc/self/root${work}/secret.txt`,
      'out/abs -> /proc/self/root/etc/hostname',
      `proot -> ${depth}proc/self/root${work}/out`,
    ]);
    const srv = await up(work, { resolver });
    for (const rel of ['cwd', 'fdlink/0', 'fdlink/1', 'root', 'abs']) {
      const res = await rawGet(srv.url, `/resources/files/${rel}`);
      expectNoSecret(res);
      expect(codeOf(res), rel).toBe('outside_root');
    }
    // A root that is itself a /proc detour now fails the launch (E-CAP-007, as the resolver sees
    // it); made after launch, every request through it is refused.
    await expect(up(work, { resolver, root: 'proot/' })).rejects.toThrow(/^exports\.files\.root 'proot\/' resolves to '\.\.\/.*proc\/self\/root/);
    renameSync(join(work, 'proot'), join(work, 'proot-later'));
    const viaRoot = await up(work, { resolver, root: 'proot/' });
    renameSync(join(work, 'proot-later'), join(work, 'proot'));
    const r = await rawGet(viaRoot.url, '/resources/files/x');
    expect(codeOf(r)).toBe('outside_root');
    expect(codeOf(await rawGet(viaRoot.url, '/resources/files'))).toBe('outside_root');
  });
});

// ── 4. Hard links ───────────────────────────────────────────────────────────────────────────────

describe.each(RESOLVERS)('hard links (%s)', (resolver) => {
  // DOCUMENTS (passes): a hard link is a second name of one inode; nothing at the VFS level marks
  // it as "outside". The server serves it: the bytes are reachable by a name beneath the root.
  // What SHOULD happen depends on who can make the link: with fs.protected_hardlinks=1 an agent can
  // only link files it owns or can read and write, so nothing is gained; with it at 0 an agent
  // could link any same-filesystem file (e.g. a root-only one) and a more privileged server would
  // serve it. A class that wants to rule it out needs an explicit st_nlink > 1 (or st_uid) policy.
  it('a hard link inside the root to a file outside it is served (documented)', async () => {
    const base = scratch([`secret.txt: ${SECRET}`, 'work/out/x: x']);
    linkSync(join(base, 'secret.txt'), join(base, 'work/out/hard'));
    for (const containment of ['sealed', 'scoped'] as Containment[]) {
      const srv = await up(join(base, 'work'), { resolver, containment });
      const res = await rawGet(srv.url, '/resources/files/hard');
      expect(res.status).toBe(200);
      expect(res.body.toString()).toBe(SECRET);
    }
    const protectedHardlinks = readFileSync('/proc/sys/fs/protected_hardlinks', 'utf8').trim();
    expect(['0', '1']).toContain(protectedHardlinks);
  });
});

// ── 5. Special files: FIFOs, sockets and device nodes inside the root ─────────────────────────────

/**
 * A writer parked in open(fifo, O_WRONLY) that drops `marker` once its open returns. Waits (bounded)
 * until the kernel shows it asleep waiting for a reader; if it never parks, the attack could not
 * release it and the test is skipped loudly instead of passing.
 */
async function parkedWriter(ctx: TestContext, fifo: string, marker: string): Promise<void> {
  const w = child('python3', [
    '-c',
    'import sys\nprint("parking", flush=True)\nf = open(sys.argv[1], "w")\nopen(sys.argv[2], "w").write("released")',
    fifo,
    marker,
  ]);
  let out = '';
  w.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const proc = (f: string) => {
    try {
      return readFileSync(`/proc/${w.pid}/${f}`, 'utf8');
    } catch {
      return '';
    }
  };
  // After 'parking' the next call is the open: asleep there ('wait_for_partner' where wchan is shown).
  const parked = () => out.includes('parking') && proc('stat').split(') ')[1]?.[0] === 'S' && ['wait_for_partner', '0', ''].includes(proc('wchan'));
  if (!(await until(parked, 10_000))) skipRace(ctx, 'the FIFO writer never parked in open(2) before the attack');
  expect(existsSync(marker), 'the writer is parked before the attack').toBe(false);
}

describe.each(RESOLVERS)('special files (%s)', (resolver) => {
  it('device nodes inside the root: refused at once, no bytes, nothing blocks', async () => {
    const work = scratch(['out/x: x', 'out/lzero -> zero']);
    execFileSync('mknod', [join(work, 'out/zero'), 'c', '1', '5']);
    execFileSync('mknod', [join(work, 'out/urandom'), 'c', '1', '9']);
    execFileSync('mknod', [join(work, 'out/null'), 'c', '1', '3']);
    execFileSync('mknod', [join(work, 'out/loop'), 'b', '7', '0']);
    const srv = await up(work, { resolver });
    for (const rel of ['zero', 'urandom', 'null', 'loop', 'lzero']) {
      const t = Date.now();
      const res = await rawRequest(srv.url, { target: `/resources/files/${rel}`, timeoutMs: 3000 });
      expect(Date.now() - t).toBeLessThan(2000);
      expect(codeOf(res), rel).toBe('not_a_regular_file');
      expect(res.body.length).toBeLessThan(200);
    }
    const listed = (await rawGet(srv.url, '/resources/files')).json().entries.map((e: { path: string }) => e.path);
    expect(listed).toEqual(['x']);
  });

  // Was a WEAKNESS, now fixed and held by this test: the reader opens the target O_RDONLY (native/read.cc open_export_file, via
  // resolve.cc) and only then fstat's it, so a device node inside the root is really opened: the
  // driver's open() runs (inotify sees IN_OPEN). For most devices that is harmless, for some it is
  // not (a watchdog is armed by open, a tape rewinds on close, a serial line raises DTR, ptmx
  // allocates a pty). Fix: resolve with O_PATH, fstat the O_PATH descriptor, and reopen only a
  // regular file (e.g. through /proc/self/fd/N, which reopens that very inode and cannot be raced).
  it('GET of a device node inside the root does not open the device', async () => {
    const work = scratch(['out/x: x']);
    execFileSync('mknod', [join(work, 'out/null'), 'c', '1', '3']);
    const opens = await watchOpens([join(work, 'out/null')]);
    const srv = await up(work, { resolver });
    expect(codeOf(await rawGet(srv.url, '/resources/files/null'))).toBe('not_a_regular_file');
    expect(await opensBefore(opens, join(work, 'out/null')), 'IN_OPEN events on the device node caused by one GET').toBe(0);
  });

  // Was a WEAKNESS, now fixed and held by this test: same cause, FIFO flavour. A capsule process parked in open(fifo, O_WRONLY) waiting
  // for its consumer is released by an operator GET (the server's O_RDONLY|O_NONBLOCK open is the
  // rendezvous), and the server then closes the read end: the writer's next write(2) gets
  // SIGPIPE/EPIPE. "A FIFO never blocks" holds for the server, but the GET has a side effect on the
  // capsule. Fix as above (O_PATH + fstat before any real open).
  it('GET of a FIFO does not release a writer parked on it', async (ctx) => {
    const work = scratch(['out/x: x', 'out/fifo |']);
    const marker = join(work, 'released');
    await parkedWriter(ctx, join(work, 'out/fifo'), marker);
    const srv = await up(work, { resolver });
    expect(codeOf(await rawGet(srv.url, '/resources/files/fifo'))).toBe('not_a_regular_file');
    await sleep(400);
    expect(existsSync(marker), 'the GET completed the FIFO rendezvous').toBe(false);
  });

  // Was a WEAKNESS, now fixed and held by this test: native/list.cc says "FIFOs, sockets and devices are skipped without being opened",
  // but an in-root symlink to one is resolved and OPENED by the S_ISLNK branch (open_beneath with
  // served_file_flags(), no O_PATH first), so a plain listing releases the parked writer and opens
  // device nodes. Fix: in that branch resolve with O_PATH, fstat, and only open a regular file.
  it('a listing does not open a FIFO or a device reached through an in-root symlink', async (ctx) => {
    const work = scratch(['out/x: x', 'out/fifo2 |', 'out/lfifo -> fifo2', 'out/lnull -> null']);
    execFileSync('mknod', [join(work, 'out/null'), 'c', '1', '3']);
    const marker = join(work, 'released');
    const opens = await watchOpens([join(work, 'out/null')]);
    await parkedWriter(ctx, join(work, 'out/fifo2'), marker);
    const srv = await up(work, { resolver });
    const res = await rawGet(srv.url, '/resources/files');
    expect(res.json().entries.map((e: { path: string }) => e.path)).toEqual(['x']);
    await sleep(400);
    expect({ writerReleased: existsSync(marker), deviceOpens: await opensBefore(opens, join(work, 'out/null')) }).toEqual({
      writerReleased: false,
      deviceOpens: 0,
    });
  });

  it('a FIFO, a socket and a device swapped in for the file between resolution and open never block or serve', racesTimeout(3), async (ctx) => {
    const work = scratch([`out/f.txt: ${INSIDE}`, 'out/p |', 'out/s =']);
    execFileSync('mknod', [join(work, 'out/z'), 'c', '1', '5']);
    const srv = await up(work, { resolver });
    for (const other of ['p', 's', 'z']) {
      const seen = await raceSwaps(ctx, join(work, 'out/f.txt'), join(work, 'out', other), {
        step: hammerStep(srv.url, ['/resources/files/f.txt', '/resources/files']),
        enough: sawAll(300, 'read:ok'),
      });
      for (const key of seen.keys()) expect(['read:ok', 'read:not_a_regular_file', 'read:not_found', 'list:ok']).toContain(key);
      expect(seen.get('read:ok') ?? 0).toBeGreaterThan(0);
    }
  });
});

describe.each(RESOLVERS)('a file under a write lease (%s)', (resolver) => {
  // RESISTS: the agent owns its files and may take a write lease (F_SETLEASE F_WRLCK). A plain
  // O_RDONLY open would then wait up to /proc/sys/fs/lease-break-time (45 s); O_NONBLOCK makes it
  // fail at once with EWOULDBLOCK (io_error), and the listing skips the file. The lease holder
  // still gets its SIGIO (that is the lease contract, not a leak).
  it('a read neither blocks nor serves; the listing leaves the file out', async () => {
    const work = scratch(['out/leased: leased bytes', 'out/x: x']);
    const holder = child('python3', [
      '-c',
      `
import fcntl, os, signal, sys, time
signal.signal(signal.SIGIO, lambda *a: None)  # keep the lease while the break is pending
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.fcntl(fd, 1024, fcntl.F_WRLCK)
print('leased', flush=True)
time.sleep(5)
`,
      join(work, 'out/leased'),
    ]);
    let out = '';
    holder.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    const deadline = Date.now() + 5000;
    while (!out.includes('leased') && Date.now() < deadline) await sleep(10);
    expect(out).toContain('leased');
    const srv = await up(work, { resolver });
    const t = Date.now();
    const res = await rawRequest(srv.url, { target: '/resources/files/leased', timeoutMs: 10_000 });
    expect(Date.now() - t).toBeLessThan(2000);
    expect(codeOf(res)).toBe('io_error');
    expect(res.raw.toString()).not.toContain('leased bytes');
    const listed = (await rawGet(srv.url, '/resources/files')).json().entries.map((e: { path: string }) => e.path);
    expect(listed).toEqual(['x']);
  });
});

// ── 6. Names: newlines, invalid UTF-8, 255-byte names, paths beyond PATH_MAX, deep trees ──────────

/** Builds `depth` nested directories named `name` under `dir` (python: no PATH_MAX on the way). */
function deepTree(dir: string, depth: number, name: string, leaf: string): string {
  execFileSync('python3', [
    '-c',
    `
import os, sys
os.chdir(sys.argv[1])
for _ in range(int(sys.argv[2])):
    os.mkdir(sys.argv[3]); os.chdir(sys.argv[3])
open('f', 'w').write(sys.argv[4])
`,
    dir,
    String(depth),
    name,
    leaf,
  ]);
  return `${Array(depth).fill(name).join('/')}/f`;
}

describe.each(RESOLVERS)('names (%s)', (resolver) => {
  it('newlines, control bytes, 255-byte names and invalid UTF-8 names', async () => {
    const work = scratch(['out/plain: plain']);
    const long255 = `${'é'.repeat(127)}x`; // 255 bytes
    const names = ['new\nline', 'cr\rlf', 'tab\there', 'esc\u001b[31m', long255, 'mh1.aaaa.bbbb', ' lead space', 'trail.'];
    for (const n of names) writeFileSync(join(work, 'out', n), `content of ${JSON.stringify(n)}`);
    writeFileSync(Buffer.from([...Buffer.from(join(work, 'out/')), 0xff, 0x2e, 0x74]), 'invalid utf8');
    writeFileSync(join(work, 'out', 'x'.repeat(255)), 'max');
    const srv = await up(work, { resolver });
    const listing = (await rawGet(srv.url, '/resources/files')).json();
    const paths: string[] = listing.entries.map((e: { path: string }) => e.path);
    for (const n of names) expect(paths).toContain(n);
    expect(paths.some((p) => p.includes('\ufffd'))).toBe(false);
    for (const n of [...names, 'x'.repeat(255)]) {
      const res = await rawGet(srv.url, `/resources/files/${encodeURIComponent(n)}`);
      expect(res.status, JSON.stringify(n)).toBe(200);
      expect(res.header('etag')).toBe(`"sha256:${sha256Hex(res.body)}"`);
    }
    // The invalid-UTF-8 name is unaddressable: percent-encoded raw bytes are refused, not guessed.
    expect(codeOf(await rawGet(srv.url, '/resources/files/%FF.t'))).toBe('outside_root');
    expect(codeOf(await rawGet(srv.url, `/resources/files/${'x'.repeat(256)}`))).toBe('not_found');
  });

  it('a listing of a very deep tree neither crashes nor leaks descriptors', async () => {
    const work = scratch(['out/top: top']);
    deepTree(join(work, 'out'), 600, 'd', 'bottom');
    const srv = await up(work, { resolver });
    const before = fdCount();
    for (let i = 0; i < 3; i++) {
      const res = await rawGet(srv.url, '/resources/files');
      expect(res.status).toBe(200);
      // kMaxDepth (256) stops the descent: the bottom file is silently left out of the listing.
      expect(res.json().entries.map((e: { path: string }) => e.path)).toEqual(['top']);
    }
    expect(fdCount()).toBeLessThanOrEqual(before + 2);
  });
});

describe('paths longer than PATH_MAX', () => {
  // Was a WEAKNESS, now fixed and held by this test: the two resolvers disagree, although resolve.h promises "Both refuse the same things
  // with the same codes". openat2 refuses a path >= PATH_MAX (ENAMETOOLONG -> not_found); the walk
  // (resolve.cc open_with_walk) has no length bound and serves it, holding one O_PATH descriptor
  // per component at once (`stack`): a ~16 KiB request target pins ~4000 descriptors per request,
  // x4 pool threads. The listing (list.cc) lists such entries under openat2 although no read can
  // ever fetch them. Fix: refuse rel.size() >= PATH_MAX (and count link expansions) in the walk,
  // bound the ancestor stack, and skip paths >= PATH_MAX in the listing.
  it('openat2 and the walk agree on an 8 KiB path, and every listed entry is readable', async (ctx) => {
    const resolvers = bothResolvers(ctx); // a comparison needs two: skipped, saying so, without openat2
    const work = scratch(['out/x: x']);
    const rel = deepTree(join(work, 'out'), 40, 'y'.repeat(200), 'deep');
    expect(rel.length).toBeGreaterThan(8000);
    const outcomes: Record<string, string> = {};
    const unreadableListed: Record<string, string[]> = {};
    for (const resolver of resolvers) {
      const srv = await up(work, { resolver });
      outcomes[resolver] = codeOf(await rawGet(srv.url, `/resources/files/${rel}`));
      const entries: string[] = (await rawGet(srv.url, '/resources/files')).json().entries.map((e: { path: string }) => e.path);
      unreadableListed[resolver] = [];
      for (const p of entries) {
        if (codeOf(await rawGet(srv.url, `/resources/files/${p}`)) !== 'ok') unreadableListed[resolver]!.push(`${p.length}-byte path`);
      }
    }
    expect(Object.keys(outcomes)).toEqual(['openat2', 'walk']);
    expect(outcomes.walk, JSON.stringify(outcomes)).toBe(outcomes.openat2);
    for (const resolver of resolvers) expect(unreadableListed[resolver], resolver).toEqual([]);
  });

  it('a walk over a path past PATH_MAX is refused without pinning descriptors', async () => {
    const work = scratch(['out/x: x']);
    const rel = deepTree(join(work, 'out'), 4000, 'a', 'deep');
    const srv = await up(work, { resolver: 'walk' });
    const base = fdCount();
    let peak = base;
    const timer = setInterval(() => (peak = Math.max(peak, fdCount())), 1);
    const res = await rawGet(srv.url, `/resources/files/${rel}`);
    clearInterval(timer);
    console.log(`[adversarial] walk over ${rel.length}-byte path: ${codeOf(res)}, fd peak +${peak - base} above baseline`);
    // Past PATH_MAX (and 256 components) both resolvers now answer not_found without walking.
    expect(res.status).toBe(404);
    expect(peak - base).toBeLessThan(64);
  });
});

// ── 13. The root redirected inside the workdir (by decision) ────────────────────────────────────

describe.each(RESOLVERS)('the root redirected inside the workdir (%s)', (resolver) => {
  // DOCUMENTS (passes, by SPEC section 3's decision): the root "may itself be a symlink to a place
  // inside the workdir" and is resolved on every request. So whoever can write the workdir (the
  // agent) can, at any moment, point `out` at `.` and the operator plane then serves the whole
  // workdir - murmur.yaml, peer-in/ (files handed to this capsule by peers), anything else. This is
  // no privilege gain for the agent (it can copy those files into out/ anyway) but it means
  // "the export root" is whatever the agent last made it; a stricter policy would pin the root's
  // (dev, ino) at launch or refuse a root that is a symlink under `sealed`.
  it('out -> . exposes the whole workdir, including the manifest', async () => {
    const work = scratch(['murmur.yaml: name: x', 'peer-in/abcd-report.md: from a peer', 'out/x: x']);
    const srv = await up(work, { resolver });
    renameSync(join(work, 'out'), join(work, 'out.real'));
    symlinkSync('.', join(work, 'out'));
    const res = await rawGet(srv.url, '/resources/files/murmur.yaml');
    expect(res.status).toBe(200);
    const listed: string[] = (await rawGet(srv.url, '/resources/files')).json().entries.map((e: { path: string }) => e.path);
    expect(listed).toContain('peer-in/abcd-report.md');
    expect(readdirSync(work)).toContain('out.real');
  });
});
