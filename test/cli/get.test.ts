// `resource-plane ls --json` and how `get` saves a file: streamed into an exclusive temporary file
// beside the target while it arrives, verified, then moved into place; an existing target refused
// before any request; `-o DIR/` saving into DIR under the file's name; a directory never the target;
// nothing left behind by a mismatch, a cut connection, an interrupt, a hang-up or a target that
// appeared meanwhile; a URL with a path refused, not cut short; a progress bar only on a terminal. The servers here are real sockets:
// the launched operator plane, and plain HTTP servers that misbehave on purpose.
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launch, type Launched } from '../../src/launch/launch.js';
import { parseManifest } from '../../src/manifest/model.js';
import { reap } from '../helpers/cleanup.js';
import { CLI, runCliAsync as runCli } from '../helpers/cli.js';
import { makeTree, removeTree, scratch, tempDir } from '../helpers/tree.js';

const BODY = randomBytes(3 * 1024 * 1024 + 17);
const ETAG = `"sha256:${createHash('sha256').update(BODY).digest('hex')}"`;
const HALF = 1024 * 1024;

let workdir: string;
let records: string;
let launched: Launched;
let fake: Server;
let fakeUrl: string;
let requests = 0;
/** What the fake server does with the next request. */
let handler: (req: IncomingMessage, res: ServerResponse) => void = () => undefined;

beforeAll(async () => {
  workdir = tempDir('rp-cli-get-');
  records = tempDir('rp-cli-get-rec-');
  makeTree(workdir, ['out/report.md: the report', 'out/sub/b.txt: b']);
  launched = await launch({
    workdir,
    manifest: parseManifest('name: c\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n'),
    tracePath: join(records, 'trace.jsonl'),
    containment: 'sealed',
  });
  fake = createServer((req, res) => {
    requests += 1;
    handler(req, res);
  });
  await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
  fakeUrl = `http://127.0.0.1:${(fake.address() as { port: number }).port}`;
});

afterAll(async () => {
  await launched.stop();
  fake.closeAllConnections();
  await new Promise((r) => fake.close(r));
  removeTree(workdir);
  removeTree(records);
});

function outDir(): string {
  return scratch([], 'rp-cli-get-out-');
}

/** Headers of a good answer for BODY. */
function startBody(res: ServerResponse, etag = ETAG): void {
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': BODY.length, etag });
}

/** Sends the first HALF bytes, then the rest once `release` resolves. */
function stalled(release: Promise<void>): (req: IncomingMessage, res: ServerResponse) => void {
  return (_req, res) => {
    startBody(res);
    res.write(BODY.subarray(0, HALF));
    void release.then(() => res.end(BODY.subarray(HALF)));
  };
}

function partsIn(dir: string): string[] {
  return readdirSync(dir).filter((f) => f.endsWith('.part'));
}

async function until<T>(what: string, probe: () => T | null | undefined, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== null && v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('ls --json', () => {
  it('prints the listing as the server sent it, on one line', async () => {
    const r = await runCli(['ls', launched.server.url, '--json']);
    expect(r.status).toBe(0);
    expect(r.stdout.endsWith('\n')).toBe(true);
    expect(r.stdout.trimEnd().split('\n')).toHaveLength(1);
    const sent = await (await fetch(`${launched.server.url}/resources/files`)).json();
    expect(JSON.parse(r.stdout)).toEqual(sent);
    expect((sent as { entries: Array<{ path: string }> }).entries.map((e) => e.path).sort()).toEqual(['report.md', 'sub/b.txt']);
  });

  it("states a refusal in the server's words", async () => {
    handler = (_req, res) => {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: 'no_resource_plane', message: 'this capsule declares no exports.files block, so it has no resource plane' }));
    };
    const r = await runCli(['ls', fakeUrl, '--json']);
    expect(r.status).toBe(4);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('error: 404 no_resource_plane: this capsule declares no exports.files block, so it has no resource plane\n');
  });
});

describe('get', () => {
  it('refuses an existing target before sending any request, and leaves it untouched', async () => {
    const d = outDir();
    const target = join(d, 'report.md');
    writeFileSync(target, 'mine');
    handler = (_req, res) => {
      startBody(res);
      res.end(BODY);
    };
    const before = requests;
    const r = await runCli(['get', fakeUrl, 'report.md', '-o', target]);
    expect(r.status).toBe(7);
    expect(r.stderr).toBe(`error: '${target}' exists; pass --force to replace it\n`);
    expect(requests).toBe(before);
    expect(readFileSync(target, 'utf8')).toBe('mine');
    // --force replaces it.
    const forced = await runCli(['get', fakeUrl, 'report.md', '-o', target, '--force']);
    expect(forced.status).toBe(0);
    expect(readFileSync(target).equals(BODY)).toBe(true);
  });

  it('streams into an exclusive 0644 temporary file beside the target while the body arrives, then renames it', async () => {
    const d = outDir();
    const target = join(d, 'data.bin');
    const release = deferred();
    handler = stalled(release.promise);
    const run = runCli(['get', fakeUrl, 'data.bin', '-o', target]);
    // Half the body is on disk, beside the target, before the rest has even been sent.
    const part = await until('the temporary file to hold the first half', () => {
      const p = partsIn(d)[0];
      return p !== undefined && statSync(join(d, p)).size >= HALF ? p : null;
    });
    expect(part).toMatch(/^\.data\.bin\.[0-9a-f]{12}\.part$/);
    expect(statSync(join(d, part)).mode & 0o777).toBe(0o644 & ~process.umask());
    expect(existsSync(target)).toBe(false);
    release.resolve();
    const r = await run;
    expect(r.status).toBe(0);
    expect(readFileSync(target).equals(BODY)).toBe(true);
    expect(partsIn(d)).toEqual([]);
    // stderr is not a terminal here: no progress bar, only the one line.
    expect(r.stderr).toBe(`saved ${BODY.length} bytes to ${target} (sha256 ${ETAG.slice(8, -1)}, etag verified)\n`);
  });

  it('a target that appears during the download is not replaced without --force', async () => {
    const d = outDir();
    const target = join(d, 'race.bin');
    const release = deferred();
    handler = stalled(release.promise);
    const run = runCli(['get', fakeUrl, 'race.bin', '-o', target]);
    await until('the download to start', () => partsIn(d)[0]);
    writeFileSync(target, 'written meanwhile');
    release.resolve();
    const r = await run;
    expect(r.status).toBe(7);
    expect(r.stderr).toBe(`error: '${target}' exists; pass --force to replace it\n`);
    expect(readFileSync(target, 'utf8')).toBe('written meanwhile');
    expect(partsIn(d)).toEqual([]);
  });

  it('a connection cut mid-body leaves nothing behind', async () => {
    const d = outDir();
    const target = join(d, 'cut.bin');
    handler = (_req, res) => {
      startBody(res);
      res.write(BODY.subarray(0, HALF), () => setTimeout(() => res.socket?.destroy(), 50));
    };
    const r = await runCli(['get', fakeUrl, 'cut.bin', '-o', target]);
    expect(r.status).toBe(3);
    expect(r.stderr).toMatch(/^error: the download from http:\/\/127\.0\.0\.1:\d+ broke off: .*; nothing was saved\n$/);
    expect(readdirSync(d)).toEqual([]);
  });

  it('an interrupt mid-download exits 130 and leaves nothing behind', async () => {
    const d = outDir();
    const target = join(d, 'int.bin');
    const release = deferred();
    handler = stalled(release.promise);
    const child = reap(spawn(process.execPath, [CLI, 'get', fakeUrl, 'int.bin', '-o', target]));
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    await until('the download to start', () => partsIn(d)[0]);
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    release.resolve();
    expect(stderr).toBe('error: interrupted; nothing was saved\n');
    expect(readdirSync(d)).toEqual([]);
  });

  it('a hang-up (SIGHUP: the terminal closed) mid-download exits 129 and leaves nothing behind', async () => {
    const d = outDir();
    const target = join(d, 'hup.bin');
    const release = deferred();
    handler = stalled(release.promise);
    const child = reap(spawn(process.execPath, [CLI, 'get', fakeUrl, 'hup.bin', '-o', target]));
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    await until('the download to start', () => partsIn(d)[0]);
    child.kill('SIGHUP');
    expect(await exited).toBe(129);
    release.resolve();
    expect(stderr).toBe('error: interrupted; nothing was saved\n');
    expect(readdirSync(d)).toEqual([]);
  });

  it('an etag that names no sha256 is refused before anything is written', async () => {
    const d = outDir();
    handler = (_req, res) => {
      startBody(res, 'W/"weak"');
      res.end(BODY);
    };
    const r = await runCli(['get', fakeUrl, 'x.bin', '-o', join(d, 'x.bin')]);
    expect(r.status).toBe(5);
    expect(r.stderr).toBe('error: etag mismatch: the server said W/"weak", which names no sha256 digest; nothing was saved\n');
    expect(readdirSync(d)).toEqual([]);
  });

  it('-o - writes the verified bytes to stdout, and nothing at all when they do not match', async () => {
    handler = (_req, res) => {
      startBody(res);
      res.end(BODY);
    };
    // Spawned without blocking: the server answering is in this process.
    const child = reap(spawn(process.execPath, [CLI, 'get', fakeUrl, 'x.bin', '-o', '-']));
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    expect(await new Promise<number | null>((r) => child.on('close', (code) => r(code)))).toBe(0);
    expect(Buffer.concat(out).equals(BODY)).toBe(true);
    expect(err).toBe('');

    handler = (_req, res) => {
      startBody(res, `"sha256:${'0'.repeat(64)}"`);
      res.end(BODY);
    };
    const liar = await runCli(['get', fakeUrl, 'x.bin', '-o', '-']);
    expect(liar.status).toBe(5);
    expect(liar.stdout).toBe('');
    expect(liar.stderr).toMatch(/^error: etag mismatch: .*nothing was saved\n$/);
  });
});

describe('get -o DIR', () => {
  it("-o DIR/ saves into DIR under the file's name, refuses to replace it without --force, and replaces it with", async () => {
    const d = outDir();
    const into = join(d, 'downloads');
    mkdirSync(into);
    const r = await runCli(['get', launched.server.url, 'sub/b.txt', '-o', `${into}/`]);
    expect(r.status).toBe(0);
    expect(r.stderr).toMatch(
      new RegExp(`^saved 1 bytes to ${join(into, 'b.txt').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\(sha256 [0-9a-f]{64}, etag verified\\)\n$`),
    );
    expect(readFileSync(join(into, 'b.txt'), 'utf8')).toBe('b');
    const again = await runCli(['get', launched.server.url, 'sub/b.txt', '-o', `${into}/`]);
    expect(again.status).toBe(7);
    expect(again.stderr).toBe(`error: '${join(into, 'b.txt')}' exists; pass --force to replace it\n`);
    writeFileSync(join(into, 'b.txt'), 'mine');
    const forced = await runCli(['get', launched.server.url, 'sub/b.txt', '-o', `${into}/`, '--force']);
    expect(forced.status).toBe(0);
    expect(readFileSync(join(into, 'b.txt'), 'utf8')).toBe('b');
    expect(readdirSync(into)).toEqual(['b.txt']);
  });

  it('-o naming an existing directory, without the slash, saves into it too (as cp does)', async () => {
    const d = outDir();
    const r = await runCli(['get', launched.server.url, 'report.md', '-o', d]);
    expect(r.status).toBe(0);
    expect(readFileSync(join(d, 'report.md'), 'utf8')).toBe('the report');
  });

  it('-o DIR/ for a directory that does not exist is refused before any request', async () => {
    const d = outDir();
    handler = (_req, res) => {
      startBody(res);
      res.end(BODY);
    };
    const before = requests;
    const r = await runCli(['get', fakeUrl, 'x.bin', '-o', `${join(d, 'absent')}/`]);
    expect(r.status).toBe(7);
    expect(r.stderr).toBe(`error: cannot save into '${join(d, 'absent')}/': no such directory\n`);
    expect(requests).toBe(before);
    expect(readdirSync(d)).toEqual([]);
  });

  it.each([[[]], [['--force']]])('a directory where the file would go is never replaced, nor a raw EISDIR (%j)', async (force) => {
    const d = outDir();
    mkdirSync(join(d, 'x.bin'));
    writeFileSync(join(d, 'x.bin', 'keep'), 'keep');
    handler = (_req, res) => {
      startBody(res);
      res.end(BODY);
    };
    const before = requests;
    // `-o DIR/` and `-o DIR` both save into DIR, under the name x.bin, which is the directory.
    for (const output of [`${d}/`, d]) {
      const r = await runCli(['get', fakeUrl, 'x.bin', '-o', output, ...force]);
      expect(r.status).toBe(7);
      expect(r.stderr).toBe(`error: '${join(d, 'x.bin')}' is a directory, which get never replaces; nothing was saved\n`);
      expect(r.stderr).not.toContain('EISDIR');
    }
    // Refused before any request.
    expect(requests).toBe(before);
    expect(readdirSync(d)).toEqual(['x.bin']);
    expect(readdirSync(join(d, 'x.bin'))).toEqual(['keep']);
  });

  it('a path that names no file to save as is refused without -o FILE', async () => {
    const d = outDir();
    const r = await runCli(['get', fakeUrl, 'sub/..', '-o', `${d}/`]);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe("error: 'sub/..' names no file to save as; pass -o FILE (see resource-plane get --help)\n");
  });
});

describe('a URL with a path', () => {
  it.each([
    [['ls', '/resources/files/x'], "ls does not use: give the capsule's base URL (ORIGIN, or ORIGIN/PREFIX where a host app mounted the planes)"],
    [['ls', '/resources/files'], "ls does not use: give the capsule's base URL (ORIGIN, or ORIGIN/PREFIX where a host app mounted the planes)"],
    [['ls', '/cap/resources'], "ls does not use: give the capsule's base URL (ORIGIN, or ORIGIN/PREFIX where a host app mounted the planes)"],
    [
      ['get', '/resources/files/report.md', 'report.md'],
      "get does not use: give the capsule's base URL (ORIGIN, or ORIGIN/PREFIX where a host app mounted the planes) and the file as the PATH argument",
    ],
  ])('%j is refused with the base URL to use, before any request', async ([verb, path, ...rest], tail) => {
    const d = outDir();
    const before = requests;
    const url = `${fakeUrl}${path}`;
    const r = await runCli([verb!, url, ...rest, ...(verb === 'get' ? ['-o', `${d}/`] : [])]);
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(`error: '${url}' has a path ('${path}'), which ${tail.replaceAll('ORIGIN', fakeUrl)} (see resource-plane ${verb} --help)\n`);
    expect(requests).toBe(before);
    expect(readdirSync(d)).toEqual([]);
  });

  it('a query is refused too; a bare trailing slash is the base URL', async () => {
    const q = await runCli(['ls', `${launched.server.url}/?x=1`]);
    expect(q.status).toBe(2);
    expect(q.stderr).toBe(
      `error: '${launched.server.url}/?x=1' has a query, which ls does not use: give the capsule's base URL (${launched.server.url}, or ${launched.server.url}/PREFIX where a host app mounted the planes) (see resource-plane ls --help)\n`,
    );
    const ok = await runCli(['ls', `${launched.server.url}/`, '--json']);
    expect(ok.status).toBe(0);
  });
});

const hasScript = spawnSync('script', ['--version']).status === 0;

describe('the progress bar', () => {
  it.skipIf(!hasScript)('is drawn on stderr when stderr is a terminal (under a pseudo-terminal from script(1))', async () => {
    const d = outDir();
    const target = join(d, 'tty.bin');
    const release = deferred();
    handler = stalled(release.promise);
    const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
    const command = [process.execPath, CLI, 'get', fakeUrl, 'tty.bin', '-o', target].map(quote).join(' ');
    const child = reap(spawn('script', ['-qfec', command, '/dev/null']));
    let screen = '';
    child.stdout.on('data', (c: Buffer) => (screen += c.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    // The bar shows the half received before the rest is sent.
    await until('a progress bar', () => (/\d+% \| [\d.]+ (B|KiB|MiB) of 3\.0 MiB/.test(screen) ? true : null));
    release.resolve();
    expect(await exited).toBe(0);
    expect(screen).toContain('100% | 3.0 MiB of 3.0 MiB');
    expect(screen).toContain(`saved ${BODY.length} bytes to ${target}`);
    expect(readFileSync(target).equals(BODY)).toBe(true);
  });
});
