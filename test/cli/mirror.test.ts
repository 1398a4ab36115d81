// `resource-plane mirror <url> <dir>` (issue 38, item 4), run as the real command against real
// listening servers: the launched operator plane (GETs counted from its trace), and plain HTTP
// servers that misbehave on purpose (a file that changes between the listing and its GET, hostile
// names, wrong digests, terminal escapes, a body that stalls so the run can be interrupted).
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { capsule, filesManifest, type Capsule } from '../helpers/capsule.js';
import { defer, reap } from '../helpers/cleanup.js';
import { CLI, runCliAsync } from '../helpers/cli.js';
import { readTrace } from '../helpers/http.js';
import { scratch } from '../helpers/tree.js';

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** Every file beneath `dir` (relative path → content), and every leftover temporary file. */
function tree(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
    const st = lstatSync(join(dir, f));
    if (st.isFile()) out[f] = readFileSync(join(dir, f), 'utf8');
    else if (st.isSymbolicLink()) out[f] = `-> link`;
  }
  return out;
}
const parts = (dir: string) => readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.part'));

/** The file GETs the capsule answered (its trace's resource_read lines). */
const reads = (c: Capsule) => readTrace(c.tracePath).filter((e) => e.event_type === 'resource_read');

const EXPORT = ['out/a.txt: alpha', 'out/sub/b.txt: bravo', 'out/sub/deeper/c.txt: charlie', 'out/.hidden: dot'];
const EXPECTED = { 'a.txt': 'alpha', 'sub/b.txt': 'bravo', 'sub/deeper/c.txt': 'charlie', '.hidden': 'dot' };

describe('mirror against the operator plane', () => {
  it('fills an empty directory with exactly the export, one GET per file, and says so in one line', async () => {
    const c = await capsule({ tree: EXPORT, yaml: filesManifest('out/'), containment: 'sealed' });
    const dst = join(scratch(), 'dst'); // created by mirror
    const r = await runCliAsync(['mirror', c.url, dst]);
    expect(r.status, r.stderr).toBe(0);
    expect(tree(dst)).toEqual(EXPECTED);
    expect(parts(dst)).toEqual([]);
    expect(r.stdout).toBe('mirror: 4 listed, 0 up to date, 4 fetched (20 bytes), 0 deleted, 0 failed\n');
    expect(r.stderr).toBe('');
    expect(
      reads(c)
        .map((e) => e.path)
        .sort(),
    ).toEqual(Object.keys(EXPECTED).sort());
  });

  it('an up-to-date directory costs one listing and zero GETs', async () => {
    const c = await capsule({ tree: EXPORT, yaml: filesManifest('out/') });
    const dst = scratch();
    expect((await runCliAsync(['mirror', c.url, dst])).status).toBe(0);
    const before = reads(c).length;
    const r = await runCliAsync(['mirror', c.url, dst, '--json']);
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ listed: 4, up_to_date: 4, fetched: 0, fetched_bytes: 0, requests: 0, deleted: 0, extra_kept: 0, failed: [] });
    expect(reads(c).length - before).toBe(0);
    expect(readTrace(c.tracePath).filter((e) => e.event_type === 'resource_list')).toHaveLength(2);
  });

  it('checks a large local file by its bytes too (hashed through the pool): same bytes no GET, one byte off one GET', async () => {
    const c = await capsule({ tree: ['out/big.bin @ 300k', 'out/small.txt: s'], yaml: filesManifest('out/') });
    const dst = scratch();
    expect((await runCliAsync(['mirror', c.url, dst])).status).toBe(0);
    const before = reads(c).length;
    expect((await runCliAsync(['mirror', c.url, dst])).status).toBe(0);
    expect(reads(c).length).toBe(before);
    // Same size, one byte different, as a damaged copy would be.
    const fd = openSync(join(dst, 'big.bin'), 'r+');
    writeSync(fd, Buffer.from([1]), 0, 1, 200 * 1024);
    closeSync(fd);
    const r = await runCliAsync(['mirror', c.url, dst, '--json']);
    expect(r.status, r.stderr).toBe(0);
    expect(
      reads(c)
        .slice(before)
        .map((e) => e.path),
    ).toEqual(['big.bin']);
    expect(readFileSync(join(dst, 'big.bin')).equals(Buffer.alloc(300 * 1024))).toBe(true);
  });

  it('fetches only what changed or was added; keeps removed files without --delete, removes them with it', async () => {
    const c = await capsule({ tree: EXPORT, yaml: filesManifest('out/') });
    const dst = scratch();
    expect((await runCliAsync(['mirror', c.url, dst])).status).toBe(0);
    writeFileSync(join(c.workdir, 'out/a.txt'), 'alpha, rewritten');
    writeFileSync(join(c.workdir, 'out/new.txt'), 'added');
    rmSync(join(c.workdir, 'out/sub/deeper'), { recursive: true });
    // A local file the export never had, and one whose bytes a person changed locally (same size).
    writeFileSync(join(dst, 'mine.txt'), 'local only');
    writeFileSync(join(dst, 'sub/b.txt'), 'BRAVO');
    const before = reads(c).length;
    const kept = await runCliAsync(['mirror', c.url, dst]);
    expect(kept.status, kept.stderr).toBe(0);
    expect(
      reads(c)
        .slice(before)
        .map((e) => e.path)
        .sort(),
    ).toEqual(['a.txt', 'new.txt', 'sub/b.txt']);
    expect(tree(dst)).toEqual({
      'a.txt': 'alpha, rewritten',
      'new.txt': 'added',
      'sub/b.txt': 'bravo',
      'sub/deeper/c.txt': 'charlie',
      '.hidden': 'dot',
      'mine.txt': 'local only',
    });
    expect(kept.stdout).toBe(
      'mirror: 4 listed, 1 up to date, 3 fetched (26 bytes), 0 deleted, 0 failed; 2 local file(s) the export does not have kept (--delete removes them)\n',
    );

    const mid = reads(c).length;
    const deleted = await runCliAsync(['mirror', c.url, dst, '--delete', '--json']);
    expect(deleted.status, deleted.stderr).toBe(0);
    expect(JSON.parse(deleted.stdout)).toMatchObject({ listed: 4, up_to_date: 4, fetched: 0, deleted: 2 });
    expect(reads(c).length).toBe(mid);
    expect(tree(dst)).toEqual({ 'a.txt': 'alpha, rewritten', 'new.txt': 'added', 'sub/b.txt': 'bravo', '.hidden': 'dot' });
    // The emptied directory went too; the one the export still has stayed.
    expect(existsSync(join(dst, 'sub/deeper'))).toBe(false);
    expect(existsSync(join(dst, 'sub'))).toBe(true);
  });

  it('keeps its directory descriptors bounded: 300 directories mirror under a limit of 128 open files', async () => {
    const lines = Array.from({ length: 300 }, (_, i) => `out/d${i}/f.txt: ${i}`);
    const c = await capsule({ tree: lines, yaml: filesManifest('out/') });
    const dst = scratch();
    const quote = (x: string) => `'${x.replace(/'/g, "'\\''")}'`;
    const run = () =>
      new Promise<{ status: number | null; stderr: string }>((resolve) => {
        const child = spawn('sh', ['-c', `ulimit -n 128 && exec ${[process.execPath, CLI, 'mirror', c.url, dst, '--delete'].map(quote).join(' ')}`]);
        let stderr = '';
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.on('close', (status) => resolve({ status, stderr }));
      });
    const first = await run();
    expect(first.status, first.stderr).toBe(0);
    expect(Object.keys(tree(dst))).toHaveLength(300);
    expect(readFileSync(join(dst, 'd299/f.txt'), 'utf8')).toBe('299');
    // Again, with every directory walked by --delete and every file checked: nothing fetched.
    const before = reads(c).length;
    const again = await run();
    expect(again.status, again.stderr).toBe(0);
    expect(reads(c).length).toBe(before);
  });

  it('refuses a bad --jobs and a URL that names a resource as usage mistakes (exit 2), writing nothing', async () => {
    const c = await capsule({ tree: EXPORT, yaml: filesManifest('out/') });
    const dst = join(scratch(), 'never');
    for (const args of [
      ['--jobs', '0'],
      ['--jobs', 'many'],
    ]) {
      const r = await runCliAsync(['mirror', c.url, dst, ...args]);
      expect(r.status, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/^error: --jobs must be a whole number from 1 to 64 .*\(see resource-plane mirror --help\)\n$/);
    }
    expect((await runCliAsync(['mirror', `${c.url}/resources/files`, dst])).status).toBe(2);
    expect(existsSync(dst)).toBe(false);
  });
});

// ── servers that misbehave on purpose ─────────────────────────────────────────────────────────

interface Fake {
  url: string;
  /** File GETs answered, by path (decoded). */
  gets: string[];
}

type Files = Record<string, { body: Buffer | string; etag?: string }>;

/**
 * A server whose listing is `entries` verbatim (any names, any digests) and whose file GETs answer
 * from `files(path, attempt)`: the body, and an etag (default: the body's true digest).
 */
async function fake(
  entries: Array<{ path: string; sha256: string; size_bytes: number }>,
  files: (path: string, attempt: number) => Files[string] | ((res: ServerResponse) => void) | undefined,
): Promise<Fake> {
  const gets: string[] = [];
  const body = Buffer.from(
    JSON.stringify({
      root: 'out/',
      mode: 'read-only',
      max_bytes: 10485760,
      generation: 0,
      containment_achieved: 'sealed',
      entries: entries.map((e) => ({ path: e.path, size_bytes: e.size_bytes, mtime_ms: 1, sha256: e.sha256 })),
    }),
  );
  const srv = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = req.url ?? '';
    if (url === '/resources/files') {
      res.writeHead(200, { 'content-type': 'application/json', etag: `"sha256:${sha(body)}"`, 'content-length': body.length });
      res.end(body);
      return;
    }
    const path = decodeURIComponent(url.slice('/resources/files/'.length));
    gets.push(path);
    const answer = files(path, gets.filter((g) => g === path).length);
    if (typeof answer === 'function') return answer(res);
    if (answer === undefined) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":"not_found","message":"no such file under the export root"}');
      return;
    }
    const bytes = Buffer.from(answer.body);
    res.writeHead(200, { 'content-type': 'application/octet-stream', etag: answer.etag ?? `"sha256:${sha(bytes)}"`, 'content-length': bytes.length });
    res.end(bytes);
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  defer(async () => {
    srv.closeAllConnections();
    await new Promise((r) => srv.close(r));
  });
  return { url: `http://127.0.0.1:${(srv.address() as { port: number }).port}`, gets };
}

const entry = (path: string, content: string) => ({ path, sha256: sha(content), size_bytes: Buffer.byteLength(content) });

describe('a file that changes between the listing and its GET', () => {
  it('is asked for again, and saved once a GET answers the listed digest', async () => {
    const srv = await fake([entry('a.txt', 'listed bytes')], (_p, attempt) => ({ body: attempt === 1 ? 'being rewritten' : 'listed bytes' }));
    const dst = scratch();
    const r = await runCliAsync(['mirror', srv.url, dst]);
    expect(r.status, r.stderr).toBe(0);
    expect(srv.gets).toEqual(['a.txt', 'a.txt']);
    expect(tree(dst)).toEqual({ 'a.txt': 'listed bytes' });
  });

  it('is reported after a bounded number of GETs (exit 5), never saved, and the rest still mirrors', async () => {
    const srv = await fake([entry('a.txt', 'listed bytes'), entry('b.txt', 'steady')], (p) => ({ body: p === 'a.txt' ? 'keeps changing' : 'steady' }));
    const dst = scratch(['a.txt: the old local copy']);
    const r = await runCliAsync(['mirror', srv.url, dst]);
    expect(r.status).toBe(5);
    expect(srv.gets.filter((g) => g === 'a.txt')).toHaveLength(3);
    expect(r.stderr).toMatch(/^error: a\.txt: changed since the listing: 3 GETs answered an etag other than the listed sha256:[0-9a-f]{64} .*; not saved\n$/);
    // The old copy is left as it was: nothing unverified replaced it.
    expect(tree(dst)).toEqual({ 'a.txt': 'the old local copy', 'b.txt': 'steady' });
    expect(parts(dst)).toEqual([]);
  });
});

describe('a hostile server', () => {
  it('cannot make mirror write outside the directory, whatever the listing names', async () => {
    const base = scratch();
    const dst = join(base, 'dst');
    mkdirSync(join(base, 'outside'));
    writeFileSync(join(base, 'outside', 'target'), 'untouched');
    mkdirSync(dst);
    // Planted before the run: a directory symlink leading out, and a file symlink leading out.
    symlinkSync(join(base, 'outside'), join(dst, 'sub'));
    symlinkSync(join(base, 'outside', 'target'), join(dst, 'link.txt'));
    const evil = 'pwned';
    const names = [
      '../escape.txt',
      '/abs.txt',
      `${base}/outside/abs2.txt`,
      'x/../../escape2.txt',
      'x/./y.txt',
      'x//y.txt',
      '',
      'sub/target',
      'sub/new.txt',
      'link.txt',
      'ok.txt',
    ];
    const srv = await fake(
      names.map((n) => entry(n, evil)),
      () => ({ body: evil }),
    );
    const r = await runCliAsync(['mirror', srv.url, dst]);
    expect(r.status).toBe(5); // the first failure in listing order: a name that is no place inside
    // The one escape that goes by a relative name out of dst, and every one into `outside`.
    expect(existsSync(join(base, 'escape.txt'))).toBe(false);
    expect(existsSync(join(base, 'escape2.txt'))).toBe(false);
    expect(existsSync('/abs.txt')).toBe(false);
    expect(tree(join(base, 'outside'))).toEqual({ target: 'untouched' });
    // Inside dst: the plain name, and the file symlink replaced by a file (the link, not its target).
    expect(readFileSync(join(dst, 'ok.txt'), 'utf8')).toBe(evil);
    expect(lstatSync(join(dst, 'link.txt')).isFile()).toBe(true);
    expect(lstatSync(join(dst, 'sub')).isSymbolicLink()).toBe(true);
    // No name that is not a place inside dst was even asked for.
    expect(srv.gets.sort()).toEqual(['link.txt', 'ok.txt']);
    expect(r.stderr).toContain("error: sub/new.txt: 'sub' is a symlink or not a directory, and mirror never writes through one; nothing was saved");
    expect(r.stderr).toContain('error: ../escape.txt: the listing names no place inside the directory');
    expect(parts(dst)).toEqual([]);

    // With --delete the planted link (which the export does not have) goes first, as a link: the
    // files under `sub` then land in a real directory, and `outside` is still untouched.
    const d = await runCliAsync(['mirror', srv.url, dst, '--delete']);
    expect(d.status).toBe(5);
    expect(lstatSync(join(dst, 'sub')).isDirectory()).toBe(true);
    expect(readFileSync(join(dst, 'sub/new.txt'), 'utf8')).toBe(evil);
    expect(tree(join(base, 'outside'))).toEqual({ target: 'untouched' });
  });

  it('refuses a file listed above --max-bytes without a GET, and one whose body runs past it (exit 6)', async () => {
    const srv = await fake([entry('big.txt', 'x'.repeat(2048)), entry('lies.txt', 'tiny'), entry('ok.txt', 'ok')], (p) =>
      // lies.txt: listed at 4 bytes, its etag the listed digest, its body 4 KiB of something else.
      p === 'lies.txt' ? { body: 'y'.repeat(4096), etag: `"sha256:${sha('tiny')}"` } : p === 'ok.txt' ? { body: 'ok' } : { body: 'x'.repeat(2048) },
    );
    const dst = scratch();
    const r = await runCliAsync(['mirror', srv.url, dst, '--max-bytes', '1Ki']);
    expect(r.status).toBe(6);
    expect(srv.gets.sort()).toEqual(['lies.txt', 'ok.txt']);
    expect(r.stderr).toContain(
      'error: big.txt: the file is listed at 2048 bytes, more than the 1024 mirror saves; pass --max-bytes to raise it; nothing was saved',
    );
    expect(r.stderr).toContain('error: lies.txt: the file is 4096 bytes, more than the 1024 mirror saves');
    expect(tree(dst)).toEqual({ 'ok.txt': 'ok' });
    expect(parts(dst)).toEqual([]);
  });

  it("reports a file that vanished between the listing and its GET in the server's words (exit 4)", async () => {
    const srv = await fake([entry('gone.txt', 'was here'), entry('kept.txt', 'still here')], (p) => (p === 'kept.txt' ? { body: 'still here' } : undefined));
    const dst = scratch();
    const r = await runCliAsync(['mirror', srv.url, dst]);
    expect(r.status).toBe(4);
    expect(r.stderr).toBe('error: gone.txt: 404 not_found: no such file under the export root\n');
    expect(srv.gets.filter((g) => g === 'gone.txt')).toHaveLength(1);
    expect(tree(dst)).toEqual({ 'kept.txt': 'still here' });
  });

  it('never saves a body that does not hash to the listed digest (exit 5)', async () => {
    const srv = await fake([entry('a.txt', 'the listed bytes'), entry('b.txt', 'fine')], (p) =>
      // a.txt: the etag is the listed digest, the bytes are not.
      p === 'a.txt' ? { body: 'other bytes here', etag: `"sha256:${sha('the listed bytes')}"` } : { body: 'fine' },
    );
    const dst = scratch();
    const r = await runCliAsync(['mirror', srv.url, dst]);
    expect(r.status).toBe(5);
    expect(r.stderr).toMatch(/^error: a\.txt: etag mismatch: .*; nothing was saved\n$/);
    expect(tree(dst)).toEqual({ 'b.txt': 'fine' });
    expect(parts(dst)).toEqual([]);
  });

  it('skips a name listed twice and a digest that is none, each error line reading after its path', async () => {
    const srv = await fake(
      [entry('a.txt', 'first'), entry('a.txt', 'second'), { path: 'b.txt', sha256: 'Z'.repeat(64), size_bytes: 1 }, entry('c.txt', 'fine')],
      (p) => (p === 'a.txt' ? { body: 'first' } : p === 'c.txt' ? { body: 'fine' } : undefined),
    );
    const dst = scratch();
    const r = await runCliAsync(['mirror', srv.url, dst]);
    expect(r.status).toBe(5);
    expect(r.stderr).toBe(
      `error: a.txt: the listing names it twice; skipped\nerror: b.txt: its listed sha256 ${'Z'.repeat(64)} is not 64 lowercase hex digits, so no body could be verified; skipped\n`,
    );
    expect(tree(dst)).toEqual({ 'a.txt': 'first', 'c.txt': 'fine' });
    expect(srv.gets.sort()).toEqual(['a.txt', 'c.txt']);
  });

  it('refuses a listing whose etag does not name its bytes, writing nothing', async () => {
    const srv = createServer((_req, res) => {
      const body = JSON.stringify({
        root: 'out/',
        mode: 'read-only',
        max_bytes: 1,
        generation: 0,
        containment_achieved: 'sealed',
        entries: [entry('a.txt', 'x')].map((e) => ({ ...e, mtime_ms: 1 })),
      });
      res.writeHead(200, { 'content-type': 'application/json', etag: `"sha256:${'0'.repeat(64)}"` });
      res.end(body);
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    defer(() => new Promise((r) => srv.close(r)));
    const dst = scratch();
    const r = await runCliAsync(['mirror', `http://127.0.0.1:${(srv.address() as { port: number }).port}`, dst]);
    expect(r.status).toBe(5);
    expect(r.stderr).toMatch(/^error: the listing's etag "sha256:0{64}" does not name its bytes/);
    expect(readdirSync(dst)).toEqual([]);
  });

  it('shows no server text raw: names, digests and refusals reach the terminal escaped', async () => {
    const name = 'bell\u0007\u001b]0;pwned\u0007\u009b2J\u202efdp.exe';
    const srv = await fake([entry(name, 'x'), { path: `bad\u001b[2J`, sha256: 'NOT-A-DIGEST\u001b[31m', size_bytes: 1 }, entry('gone.txt', 'y')], (p) =>
      p === name
        ? { body: 'x' }
        : p === 'gone.txt'
          ? (res: ServerResponse) => {
              res.writeHead(403, { 'content-type': 'application/json' });
              res.end('{"error":"outside_root\\u001b[2J","message":"evil \\u001b]0;title\\u0007"}');
            }
          : undefined,
    );
    const dst = scratch();
    for (const args of [[], ['--json']]) {
      const r = await runCliAsync(['mirror', srv.url, dst, ...args]);
      expect(r.status).toBe(5); // the bad digest comes first in listing order
      expect(r.stdout + r.stderr).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/);
      expect(r.stderr).toContain('error: gone.txt: 403 outside_root\\x1b[2J: evil \\x1b]0;title\\x07');
    }
    // The odd name is still a name inside dst: saved under it.
    expect(readFileSync(join(dst, name), 'utf8')).toBe('x');
  });
});

describe('an interrupted mirror', () => {
  it('leaves no partial file on SIGINT (exit 130), and the next run fetches only what is missing', async () => {
    const big = 'z'.repeat(256 * 1024);
    let release: () => void = () => undefined;
    const released = new Promise<void>((r) => (release = r));
    let stalled = true;
    const srv = await fake([entry('a.txt', 'first'), entry('b.txt', 'second'), entry('c.bin', big)], (p) => {
      if (p !== 'c.bin') return { body: p === 'a.txt' ? 'first' : 'second' };
      if (!stalled) return { body: big };
      return (res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'application/octet-stream', etag: `"sha256:${sha(big)}"`, 'content-length': big.length });
        res.write(big.slice(0, 100 * 1024));
        void released.then(() => res.destroy());
      };
    });
    defer(release);
    const dst = scratch();
    const child = reap(spawn(process.execPath, [CLI, 'mirror', srv.url, dst, '--jobs', '1']));
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    // Until the stalled body (asked for last, one job) has begun landing in its temporary file.
    const deadline = Date.now() + 20_000;
    while (!(srv.gets.includes('c.bin') && parts(dst).length > 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(parts(dst)).toHaveLength(1);
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(stderr).toBe('error: interrupted; files already placed are verified, and no partial file was left\n');
    expect(parts(dst)).toEqual([]);
    expect(tree(dst)).toEqual({ 'a.txt': 'first', 'b.txt': 'second' });

    stalled = false;
    release();
    srv.gets.length = 0;
    const again = await runCliAsync(['mirror', srv.url, dst]);
    expect(again.status, again.stderr).toBe(0);
    expect(srv.gets).toEqual(['c.bin']);
    expect(readFileSync(join(dst, 'c.bin'), 'utf8')).toBe(big);
  });
});

describe('where mirror reads from and how it shows progress', () => {
  it('takes the export from a unix operator socket', async () => {
    const sockDir = scratch();
    const c = await capsule({ tree: EXPORT, yaml: filesManifest('out/'), operatorListen: `unix:${join(sockDir, 'operator.sock')}` });
    const dst = scratch();
    const r = await runCliAsync(['mirror', `unix:${join(sockDir, 'operator.sock')}`, dst, '--jobs', '2']);
    expect(r.status, r.stderr).toBe(0);
    expect(tree(dst)).toEqual(EXPECTED);
    expect(reads(c)).toHaveLength(4);
  });

  it.skipIf(spawnSync('script', ['--version']).status !== 0)('draws a bar of files on stderr when stderr is a terminal (script(1))', async () => {
    let release: () => void = () => undefined;
    const released = new Promise<void>((r) => (release = r));
    defer(release);
    const srv = await fake([entry('a.txt', 'first'), entry('b.txt', 'second'), entry('c.txt', 'third')], (p) => {
      if (p !== 'c.txt') return { body: p === 'a.txt' ? 'first' : 'second' };
      return (res: ServerResponse) =>
        void released.then(() => {
          res.writeHead(200, { etag: `"sha256:${sha('third')}"`, 'content-length': 5 });
          res.end('third');
        });
    });
    const dst = scratch();
    const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
    const command = [process.execPath, CLI, 'mirror', srv.url, dst, '--jobs', '1'].map(quote).join(' ');
    const child = reap(spawn('script', ['-qfec', command, '/dev/null']));
    let screen = '';
    child.stdout.on('data', (c: Buffer) => (screen += c.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    const deadline = Date.now() + 20_000;
    while (!/2 of 3 files/.test(screen) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(screen).toMatch(/2 of 3 files/);
    release();
    expect(await exited).toBe(0);
    expect(screen).toContain('mirror: 3 listed, 0 up to date, 3 fetched (16 bytes), 0 deleted, 0 failed');
  });
});
