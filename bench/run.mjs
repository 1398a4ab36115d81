// `npm run bench [-- --quick] [-- --out [FILE]]`: how close is this server to the machine, measured
// side by side in one run against the servers it could be replaced by and against the limits of
// the machine itself (issue 12). On the same files (1 KiB, 64 KiB, 4 MiB under a temp capsule's out/):
//   - nginx (nginx-light: one worker, sendfile, keep-alive, no access log; no hashing): the
//     reference a deployment would compare us with;
//   - node:http answering the bytes from memory: the ceiling of any Node server here;
//   - Fastify 5 + @fastify/static (wildcard: false): "just use a static plugin", no hashing;
//   - node:http doing readFile + node:crypto sha256 per request: the obvious way to serve a file
//     with its content hash as etag, which is our guarantee;
//   - the Fastify contract floor (issue 17): a Fastify 5 route doing the contract's minimum per
//     request (open the root, open the file O_NOFOLLOW|O_NONBLOCK, fstat, read, SHA-256 etag, one
//     synchronous trace line, close both): the honest ceiling for a 1 KiB read;
//   - this server as users run it, `resource-plane serve --containment sealed` (its defaults: the
//     trace and the buffered access log on), and beside it the same with `--no-access-log`, which
//     is what the access log costs (issue 41: at least 0.95x, quiet and with the other core busy).
// Load is wrk -t1 -c32 (requests/s, body MB/s from 2xx answers only, p99 latency). Besides reads:
// the single-core SHA-256 rate (node:crypto over 64 MiB), a 1 KiB redeem through the peer plane
// (handle minted with share-file over the CLI's MCP control channel) next to a 1 KiB read on the
// same server, a listing of 10,000 x 4 KiB files in directories of 100 (first and repeat, timed by
// curl against `resource-plane serve` run as a user runs it: default options, Landlock on, on a
// tree whose newest change is older than the digest cache's 2 s racy margin) next to
// `find | xargs -0 sha256sum`, and start-to-ready and idle RSS next to a bare Fastify listener
// (and a bare node:http one). The mirror rows (bench/mirror.mjs, issue 38): `mirror` of the listing
// tree into an empty directory (files/s, against `get` in a shell loop), a second `mirror` with
// nothing changed (against one listing) and one with one file changed (exactly one GET).
//
// The machine is small (2 cores) and often shared, so absolute numbers are noisy: every server
// stays up for the whole run, and each round measures every server on a case one after the other
// (A, B, C, A, B, C…, the order rotated each round). Ratios are taken within a round and reported
// as median [min–max] across rounds. Every server must first answer every file with the right
// bytes (ours: the right etag; the redeem: 200 with the right audience, 403 with another), before
// and after the load, or the bench fails: a broken server cannot look fast.
//
// Env: BENCH_ROUNDS (default 3; --quick 1), BENCH_SECONDS (per case and round, default 5; --quick 1),
// BENCH_LOADGEN=wrk|autocannon (default wrk, installed with apt-get when absent and root),
// BENCH_NGINX=0 to leave nginx out, BENCH_TMPDIR to put the scratch trees elsewhere than the OS
// temp directory (the digest cache works only on ext2/3/4, xfs and btrfs: on tmpfs or overlayfs
// every listing hashes every file, by design, and the bench says so).
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes, randomFillSync } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { createServer } from 'node:net';
import { cpus, loadavg, release, tmpdir, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { atExit, fetchOnce, firstJsonLine, rssBytes, sleep, stop, track } from './children.mjs';
import { mcpClient } from './mcp.mjs';
import { chartRows, renderChartSvg } from './chart.mjs';
import { renderReport, summarise } from './report.mjs';
import { mirrorRound, renderMirror, summariseMirror } from './mirror.mjs';
import { autocannonLoad, ensureTool, startNginx, toolVersion, wrkCycle, wrkLoad } from './tools.mjs';
import { bigListingRound, makeBigListingTree, timeSha256sum } from './big-listing.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, '..', 'dist', 'cli', 'main.js');

// ---- options ----
/** An absolute path that keeps a trailing `/`, which says "a directory" even before it exists. */
const outPath = (given) => `${resolve(given)}${given.endsWith('/') ? '/' : ''}`;
const argv = process.argv.slice(2);
let outFile = null;
let quick = false;
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--quick') quick = true;
  else if (a === '--out') outFile = argv[i + 1] && !argv[i + 1].startsWith('--') ? outPath(argv[++i]) : join(HERE, 'results.json');
  else if (a.startsWith('--out=')) outFile = outPath(a.slice(6));
  else if (a === '--help' || a === '-h') {
    process.stdout.write(
      'usage: node bench/run.mjs [--quick] [--out [FILE|DIR/]]   (FILE defaults to bench/results.json; a directory gets results.json and bench.svg, the chart)\n',
    );
    process.exit(0);
  } else fail(`unknown argument ${a} (try --help)`);
}
const intEnv = (name, dflt, max) => {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isInteger(v) || v < 1 || v > max) fail(`${name} must be a whole number from 1 to ${max}`);
  return v;
};
const ROUNDS = intEnv('BENCH_ROUNDS', quick ? 1 : 3, 50);
const SECONDS = intEnv('BENCH_SECONDS', quick ? 1 : 5, 600);
const WARMUP_SECONDS = quick ? 0 : 1;
const CONNECTIONS = 32;
const LIST_FILES = quick ? 1000 : 10_000;
const LIST_FILE_SIZE = 4096;
const LIST_REPEATS = 3; // repeat listings per round (their median is the round's repeat time)
// The whole-export listing of issue 38 (bench/big-listing.mjs): 200,000 files of 65 B in 500 directories.
const BIG_LIST_FILES = quick ? 2000 : 200_000;
const BIG_LIST_DIRS = quick ? 5 : 500;
const BIG_LIST_REPEATS = 2;
const START_SAMPLES = quick ? 1 : 2; // per kind and round
const SHA_BYTES = 64 * 1024 * 1024;
const MiB = 1024 * 1024;
const CASES = [
  { id: '1k', name: '1 KiB', file: 'small.bin', size: 1024 },
  { id: '64k', name: '64 KiB', file: 'medium.bin', size: 64 * 1024 },
  { id: '4m', name: '4 MiB', file: 'large.bin', size: 4 * MiB },
];

function fail(message) {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(1);
}
const say = (message) => process.stderr.write(`bench: ${message}\n`);

if (!existsSync(CLI)) fail(`${CLI} is missing: run \`npm run build\` first`);
const startedAt = new Date();
const t0Run = performance.now();
const loadBefore = loadavg();

// ---- the trees ----
const scratch = mkdtempSync(join(process.env.BENCH_TMPDIR ? resolve(process.env.BENCH_TMPDIR) : tmpdir(), 'rp-bench-'));
atExit(() => rmSync(scratch, { recursive: true, force: true }));
// nginx run as root drops its worker to `nobody`: the tree must be traversable by it (mkdtemp is 0700).
chmodSync(scratch, 0o755);
const recordsDir = join(scratch, 'records');
const capsule = join(scratch, 'capsule');
const outDir = join(capsule, 'out');
mkdirSync(outDir, { recursive: true, mode: 0o755 });
// exports.files.max_bytes has room for the 64 MiB streamed file; the ceiling costs nothing (a body
// above the streaming threshold holds two chunks of the memory budget, whatever its size).
writeFileSync(
  join(capsule, 'murmur.yaml'),
  [
    'name: bench',
    'version: "0.1.0"',
    'exports:',
    '  files:',
    '    root: out/',
    '    mode: read-only',
    '    max_bytes: 128Mi',
    '  peer_files:',
    '    root: out/',
    '    max_ttl: 15m',
    '    max_bytes: 1Mi',
    'capabilities:',
    '  network:',
    '    allow:',
    '      - localhost',
    '',
  ].join('\n'),
);
// The file rewritten in place while it is read (rewrittenRound).
const REWRITTEN = 'rewritten.bin';
writeFileSync(join(outDir, REWRITTEN), Buffer.alloc(MiB, 64), { mode: 0o644 });
const files = {};
for (const c of CASES) {
  const bytes = randomBytes(c.size);
  writeFileSync(join(outDir, c.file), bytes, { mode: 0o644 });
  files[c.file] = { bytes, etag: `"sha256:${createHash('sha256').update(bytes).digest('hex')}"` };
}

// The listing tree: LIST_FILES files of 4 KiB in directories of 100, written before anything else
// so that by the first listing their ctime is older than the digest cache's 2 s racy margin.
const listing = join(scratch, 'listing');
const listRoot = join(listing, 'out');
mkdirSync(listRoot, { recursive: true });
writeFileSync(join(listing, 'murmur.yaml'), 'name: listing\nversion: "0.1.0"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 1Mi\n');
const listDigests = new Map();
{
  const block = randomBytes(LIST_FILES * LIST_FILE_SIZE);
  for (let i = 0; i < LIST_FILES; i++) {
    const dir = `d${String(Math.floor(i / 100)).padStart(3, '0')}`;
    if (i % 100 === 0) mkdirSync(join(listRoot, dir));
    const rel = `${dir}/f${String(i).padStart(5, '0')}.bin`;
    const bytes = block.subarray(i * LIST_FILE_SIZE, (i + 1) * LIST_FILE_SIZE);
    writeFileSync(join(listRoot, rel), bytes);
    listDigests.set(rel, createHash('sha256').update(bytes).digest('hex'));
  }
}
// The streamed rows (ours only, besides nginx): an unchanged 64 MiB file, whose body is hashed as it
// is sent (so its limit is the single-core SHA-256 rate), and a client cycling through 450 files of
// distinct sizes from 600 to 1,049 KiB next to the same cycle over 450 files of one size (issue 23:
// an export mirrored file by file must not cost more because its files differ in size).
const HUGE = { file: 'huge.bin', size: 64 * MiB };
{
  const bytes = randomBytes(HUGE.size);
  writeFileSync(join(outDir, HUGE.file), bytes, { mode: 0o644 });
  files[HUGE.file] = { bytes, etag: `"sha256:${createHash('sha256').update(bytes).digest('hex')}"` };
}
const CYCLE_FILES = 450;
const cycles = { distinct: [], same: [] };
for (const kind of ['distinct', 'same']) {
  mkdirSync(join(outDir, `cycle-${kind}`), { mode: 0o755 });
  for (let i = 0; i < CYCLE_FILES; i++) {
    const size = kind === 'distinct' ? (600 + i) * 1024 : 825 * 1024;
    writeFileSync(join(outDir, `cycle-${kind}`, `f${i}.bin`), randomBytes(size), { mode: 0o644 });
    cycles[kind].push(`/resources/files/cycle-${kind}/f${i}.bin`);
  }
}
say(`writing the ${BIG_LIST_FILES.toLocaleString('en-US')}-file listing tree`);
const bigTree = makeBigListingTree(join(scratch, 'big-listing'), BIG_LIST_FILES, BIG_LIST_DIRS);
const listingWrittenAt = Date.now();
// The filesystem under the trees, as `stat -f` names it: the digest cache is used only where
// mapped writes move the times (ext2/3/4, xfs, btrfs; native/digest_cache.h).
const listingFs = spawnSync('stat', ['-f', '-c', '%T', listRoot], { encoding: 'utf8' }).stdout?.trim() || 'unknown';
const CACHED_FS = /^(ext2\/ext3|ext[234]|xfs|btrfs)$/;

// ---- tools ----
const notes = [];
const odd = [];
const wanted = process.env.BENCH_LOADGEN;
if (wanted && wanted !== 'wrk' && wanted !== 'autocannon') fail('BENCH_LOADGEN must be wrk or autocannon');
let load;
let loadgen;
const wrk = wanted === 'autocannon' ? { path: null, note: 'BENCH_LOADGEN=autocannon' } : ensureTool('wrk', 'wrk');
if (wrk.note) notes.push(wrk.note);
let cycle = null;
let load4 = null; // 4 connections: the 64 MiB row (32 would hold 2 GiB of bodies in flight at once)
if (wrk.path) {
  load = wrkLoad(wrk.path, scratch, CONNECTIONS);
  load4 = wrkLoad(wrk.path, scratch, 4);
  cycle = wrkCycle(wrk.path, scratch, 4);
  loadgen = `${toolVersion(wrk.path, ['-v']).split(' [')[0]}, 1 thread, ${CONNECTIONS} connections, --latency`;
} else {
  if (wanted === 'wrk') fail(`BENCH_LOADGEN=wrk but wrk is unavailable: ${wrk.note}`);
  const { default: autocannon } = await import('autocannon');
  load = autocannonLoad(autocannon, CONNECTIONS);
  loadgen = `autocannon (in process), ${CONNECTIONS} connections`;
  notes.push(
    'wrk unavailable: autocannon was used, and it cannot push much more than ~50 MB/s of body, so the 64 KiB and 4 MiB rows measure autocannon, not the servers',
  );
}
let nginx = { path: null, note: 'BENCH_NGINX=0' };
if (process.env.BENCH_NGINX !== '0') nginx = ensureTool('nginx', 'nginx-light');
if (nginx.note) notes.push(nginx.path ? nginx.note : `nginx skipped: ${nginx.note}`);
const curl = ensureTool('curl', 'curl');
if (!curl.path) fail(`the listing is timed by curl, which is unavailable: ${curl.note}`);
if (curl.note) notes.push(curl.note);
if (!CACHED_FS.test(listingFs))
  notes.push(
    `the listing tree is on ${listingFs}, where the digest cache is off by design: every listing hashes every file (set BENCH_TMPDIR to an ext4, xfs or btrfs directory)`,
  );

// ---- servers ----
const env = { ...process.env, RESOURCE_PLANE_RECORDS_DIR: recordsDir };
const log = (name) => join(scratch, `${name}.log`);

async function startNode(label, args, extraEnv = env) {
  const t0 = performance.now();
  const logFile = log(label.replace(/\W+/g, '-'));
  const child = track(process.execPath, args, { logFile, env: extraEnv });
  let line;
  let ms;
  try {
    ({ line, ms } = await firstJsonLine(child, label, t0));
  } catch (error) {
    // The scratch directory goes when the bench ends: say what the child said now.
    let tail = '';
    try {
      tail = readFileSync(logFile, 'utf8').trim().split('\n').slice(-5).join('\n');
    } catch {
      /* no log */
    }
    throw new Error(`${error.message}${tail ? `; its log ends:\n${tail}` : ''}`);
  }
  if (new URL(line.url).hostname !== '127.0.0.1') throw new Error(`${label}: not loopback: ${line.url}`);
  return { child, url: line.url, readyMs: ms, line };
}

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

async function waitForHttp(url, child, label, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${label} exited (${child.exitCode}); see ${scratch}`);
    try {
      const r = await fetchOnce(url);
      if (r.status === 200) return;
    } catch {
      /* not yet */
    }
    if (Date.now() > deadline) throw new Error(`${label}: no answer from ${url} within ${ms} ms`);
    await sleep(50);
  }
}

const oursArgs = (name, extra = []) => [
  CLI,
  'serve',
  '--workdir',
  capsule,
  '--containment',
  'sealed',
  '--trace',
  join(scratch, `trace-${name}.jsonl`),
  ...extra,
];

const servers = []; // { id, label, url, child, etag }
let oursPeer = null; // { url, child, handle, audience }

async function verifyRead(s, c) {
  const res = await fetchOnce(`${s.url}/resources/files/${c.file}`);
  if (res.status !== 200) throw new Error(`${s.label}: ${c.file} answered ${res.status}`);
  if (!res.body.equals(files[c.file].bytes)) throw new Error(`${s.label}: ${c.file}: ${res.body.length} bytes that differ from the file`);
  if (s.etag && res.headers.etag !== files[c.file].etag) throw new Error(`${s.label}: ${c.file}: etag ${res.headers.etag}, want ${files[c.file].etag}`);
}

async function verifyRedeem() {
  const url = `${oursPeer.url}/resources/peer/${oursPeer.handle}`;
  const ok = await fetchOnce(url, { 'x-murmur-audience': oursPeer.audience });
  if (ok.status !== 200 || !ok.body.equals(files['small.bin'].bytes) || ok.headers.etag !== files['small.bin'].etag) {
    throw new Error(`redeem: answered ${ok.status} with ${ok.body.length} bytes and etag ${ok.headers.etag}`);
  }
  const wrong = await fetchOnce(url, { 'x-murmur-audience': 'someone-else@localhost:1' });
  if (wrong.status !== 403) throw new Error(`redeem with the wrong audience answered ${wrong.status}, not 403`);
}

async function verifyAll() {
  for (const s of servers) for (const c of CASES) await verifyRead(s, c);
  for (const s of servers.filter((x) => x.id === 'ours' || x.id === 'nginx')) await verifyRead(s, HUGE);
  await verifyRead({ label: 'ours (control stdio)', url: oursPeer.url, etag: true }, CASES[0]);
  await verifyRedeem();
}

/** Mint a fresh handle for small.bin through the MCP control channel, for the server itself as peer. */
async function mint() {
  const port = new URL(oursPeer.url).port;
  const r = await oursPeer.mcp.call('share-file', { path: 'small.bin', peer: `localhost:${port}` });
  oursPeer.handle = r.handle;
  oursPeer.audience = r.audience;
}

// ---- measurements ----
const raw = { reads: {}, peer: [], sha256: [], listing: [], big_listing: [], start: [], streamed: [], rewritten: [], busy: [], mirror: [] };
const push = (obj, key, v) => (obj[key] ??= []).push(v);

async function timedLoad(url, size, headers) {
  if (WARMUP_SECONDS) await load(url, WARMUP_SECONDS, size, headers);
  return load(url, SECONDS, size, headers);
}

// The access log's cost on a loaded host: the 1 KiB read on ours with its defaults and with
// `--no-access-log`, in an order that alternates between rounds, while a busy loop holds a core.
async function busyRound(r) {
  const busy = track(process.execPath, ['-e', 'for (;;) {}'], { logFile: log(`busy-${r}`) });
  try {
    const row = { round: r };
    for (const id of r % 2 ? ['ours_no_access_log', 'ours'] : ['ours', 'ours_no_access_log']) {
      const s = servers.find((x) => x.id === id);
      row[id] = await timedLoad(`${s.url}/resources/files/small.bin`, 1024);
      if (row[id].errors) odd.push(`${s.label}, 1 KiB with a busy core, round ${r + 1}: ${row[id].errors} errors or non-2xx answers`);
    }
    raw.busy.push(row);
  } finally {
    await stop(busy);
  }
}

// The streamed rows of one round: ours (and nginx, for reference) on the 64 MiB file, then the two
// size cycles on ours with 4 connections, in an order that alternates between rounds.
async function streamedRound(r) {
  const ours = servers.find((s) => s.id === 'ours');
  const row = { round: r };
  for (const s of rotate(
    servers.filter((x) => x.id === 'ours' || x.id === 'nginx'),
    r,
  )) {
    const url = `${s.url}/resources/files/${HUGE.file}`;
    const run = load4 ?? load;
    if (WARMUP_SECONDS) await run(url, WARMUP_SECONDS, HUGE.size);
    row[`${s.id}_64m`] = await run(url, Math.max(SECONDS, 3), HUGE.size);
    if (row[`${s.id}_64m`].errors) odd.push(`${s.label}, 64 MiB, round ${r + 1}: ${row[`${s.id}_64m`].errors} errors or non-2xx answers`);
  }
  if (cycle) {
    for (const kind of r % 2 ? ['same', 'distinct'] : ['distinct', 'same']) {
      if (WARMUP_SECONDS) await cycle(ours.url, cycles[kind], WARMUP_SECONDS);
      row[`cycle_${kind}`] = await cycle(ours.url, cycles[kind], SECONDS);
      if (row[`cycle_${kind}`].errors) odd.push(`ours, ${kind}-size cycle, round ${r + 1}: ${row[`cycle_${kind}`].errors} errors or non-2xx answers`);
    }
  }
  raw.streamed.push(row);
}

function shaRate() {
  const buf = (shaRate.buf ??= randomFillSync(Buffer.allocUnsafe(SHA_BYTES)));
  let best = 0;
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    createHash('sha256').update(buf).digest();
    best = Math.max(best, SHA_BYTES / ((performance.now() - t) / 1000) / 1e6);
  }
  return best;
}

function checkListing(body, by) {
  const { entries } = JSON.parse(body);
  if (entries.length !== LIST_FILES) throw new Error(`listing (${by}) has ${entries.length} entries, want ${LIST_FILES}`);
  for (const e of entries) {
    if (listDigests.get(e.path) !== e.sha256 || e.size_bytes !== LIST_FILE_SIZE) throw new Error(`listing (${by}) entry ${e.path} is wrong`);
  }
}

/** One listing timed by curl (its own time_total: connect to last byte), the body checked after. */
function curlListing(url) {
  const bodyFile = join(scratch, 'listing.json');
  return new Promise((res, rej) => {
    const child = track(curl.path, ['-s', '-o', bodyFile, '-w', '%{http_code} %{time_total}', '--max-time', '60', `${url}/resources/files`], {
      stdout: 'pipe',
    });
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
    });
    child.on('error', rej);
    child.on('exit', (code) => {
      const [status, total] = out.trim().split(' ');
      if (code !== 0) return rej(new Error(`curl exited ${code} (${out})`));
      const body = readFileSync(bodyFile);
      if (status !== '200') return rej(new Error(`listing answered ${status}: ${body.toString().slice(0, 200)}`));
      try {
        checkListing(body, 'curl');
      } catch (e) {
        return rej(e);
      }
      res(Number(total));
    });
  });
}

/** The same through this process's HTTP client, for comparison only (the issue's second client). */
async function nodeListing(url) {
  const t = performance.now();
  const res = await fetchOnce(`${url}/resources/files`);
  const s = (performance.now() - t) / 1000;
  if (res.status !== 200) throw new Error(`listing answered ${res.status}: ${res.body.toString().slice(0, 200)}`);
  checkListing(res.body, 'node:http client');
  return s;
}

// The listing server is `resource-plane serve` as a user runs it: default options (containment
// advisory, trace in the records directory, Landlock on), a fresh process each round, so the first
// listing finds the digest cache empty and the repeats find it filled.
// A 1 MiB file rewritten in place in a tight loop by another process (an agent saving a report),
// read on 4 keep-alive connections for SECONDS by ours and by nginx: how many reads are served
// whole, at what rate, and (ours) whether each body is what its etag vouches for. The client hashes
// every body from both servers, so the two sides cost the client the same.
const REWRITER = `const fs = require('node:fs'); const fd = fs.openSync(process.argv[1], 'r+'); const n = fs.fstatSync(fd).size;
const bufs = Array.from({ length: 26 }, (_, i) => Buffer.alloc(n, 65 + i)); for (let i = 0; ; i++) fs.writeSync(fd, bufs[i % 26], 0, n, 0);`;

function rewrittenLoad(url, seconds, checkEtag) {
  const agent = new Agent({ keepAlive: true, maxSockets: 4 });
  const until = performance.now() + seconds * 1000;
  const m = { total: 0, served: 0, mismatched: 0, bytes: 0 };
  const one = () =>
    new Promise((resolve) => {
      const req = request(url, { agent }, (res) => {
        const hash = createHash('sha256');
        let got = 0;
        res.on('data', (d) => {
          hash.update(d);
          got += d.length;
        });
        res.on('error', () => resolve());
        res.on('end', () => {
          const whole = res.statusCode === 200 && got === Number(res.headers['content-length']);
          const digest = hash.digest('hex');
          if (whole) {
            m.served++;
            m.bytes += got;
            if (checkEtag && res.headers.etag !== `"sha256:${digest}"`) m.mismatched++;
          }
          resolve();
        });
      });
      req.on('error', () => resolve());
      req.end();
    });
  const worker = async () => {
    while (performance.now() < until) {
      m.total++;
      await one();
    }
  };
  const t = performance.now();
  return Promise.all([worker(), worker(), worker(), worker()]).then(() => {
    agent.destroy();
    const s = (performance.now() - t) / 1000;
    return { ...m, share: m.total ? m.served / m.total : 0, rps: m.served / s, mbps: m.bytes / s / 1e6 };
  });
}

async function rewrittenRound(r) {
  const writer = track(process.execPath, ['-e', REWRITER, join(outDir, REWRITTEN)]);
  const row = { round: r };
  try {
    for (const s of rotate(
      servers.filter((x) => x.id === 'ours' || x.id === 'nginx'),
      r,
    )) {
      row[s.id] = await rewrittenLoad(`${s.url}/resources/files/${REWRITTEN}`, SECONDS, s.id === 'ours');
      if (s.id === 'ours' && row.ours.mismatched)
        odd.push(`ours, 1 MiB under an in-place writer, round ${r + 1}: ${row.ours.mismatched} bodies differ from their etag`);
    }
  } finally {
    await stop(writer);
  }
  raw.rewritten.push(row);
}

async function listingRound(r) {
  const listTree = { root: listRoot, files: LIST_FILES, digests: listDigests };
  const sums = await timeSha256sum(listTree);
  const ageS = (Date.now() - listingWrittenAt) / 1000;
  const server = await startNode('ours (listing)', [CLI, 'serve', '--workdir', listing]);
  try {
    const first = await curlListing(server.url);
    const repeats = [];
    for (let i = 0; i < LIST_REPEATS; i++) repeats.push(await curlListing(server.url));
    const nodeRepeat = await nodeListing(server.url);
    const sums2 = await timeSha256sum(listTree);
    raw.listing.push({ round: r, tree_age_s: ageS, sha256sum_s: [sums, sums2], first_s: first, repeat_s: repeats, node_client_repeat_s: nodeRepeat });
  } finally {
    const code = await stop(server.child);
    if (code !== 0) odd.push(`listing server exited with ${code} on SIGTERM`);
  }
}

/** The mirror rows' server (bench/mirror.mjs): the listing tree served as listingRound serves it. */
async function serveListing() {
  const s = await startNode('ours (mirror)', [CLI, 'serve', '--workdir', listing]);
  return {
    url: s.url,
    trace: s.line.trace,
    stop: async () => {
      const code = await stop(s.child);
      if (code !== 0) odd.push(`mirror server exited with ${code} on SIGTERM`);
    },
  };
}

const START_KINDS = {
  ours: { label: 'ours (start)', args: (r) => oursArgs(`start-${r}-${raw.start.length}`) },
  fastify: { label: 'bare Fastify', args: () => [join(HERE, 'peer-bare-fastify.mjs')] },
  // The same serve without Landlock: what the confinement's re-exec (a second Node boot) costs.
  unconfined: { label: 'ours (start, --no-landlock)', args: (r) => oursArgs(`start-${r}-${raw.start.length}`, ['--no-landlock']) },
  bare: { label: 'bare node:http', args: () => [join(HERE, 'peer-bare.mjs')] },
};

async function startSample(kind, r) {
  const s = await startNode(START_KINDS[kind].label, START_KINDS[kind].args(r));
  try {
    const probe = kind === 'ours' || kind === 'unconfined' ? `${s.url}/resources/files/small.bin` : `${s.url}/`;
    const res = await fetchOnce(probe);
    if (res.status !== 200) throw new Error(`${kind}: ${probe} answered ${res.status}`);
    await sleep(100);
    raw.start.push({ round: r, kind, ready_ms: s.readyMs, rss_mib: rssBytes(s.child.pid) / MiB });
  } finally {
    const code = await stop(s.child);
    if (code !== 0) odd.push(`${kind} (start sample) exited with ${code} on SIGTERM`);
  }
}

const rotate = (list, n) => list.slice(n % list.length).concat(list.slice(0, n % list.length));

// ---- the run ----
try {
  say(`starting servers (scratch ${scratch})`);
  if (nginx.path) {
    const port = await freePort();
    const child = startNginx(nginx.path, scratch, outDir, port, log('nginx'));
    const url = `http://127.0.0.1:${port}`;
    await waitForHttp(`${url}/resources/files/small.bin`, child, 'nginx');
    servers.push({ id: 'nginx', label: 'nginx', url, child });
  }
  for (const [id, label, script] of [
    ['node_memory', 'node:http (memory)', 'peer-memory.mjs'],
    ['fastify_static', '@fastify/static', 'peer-static.mjs'],
    ['readfile_sha256', 'readFile+sha256', 'peer-naive.mjs'],
  ]) {
    const s = await startNode(label, [join(HERE, script), outDir]);
    servers.push({ id, label, url: s.url, child: s.child });
  }
  {
    const s = await startNode('Fastify contract floor', [join(HERE, 'peer-contract.mjs'), outDir, join(scratch, 'trace-contract.jsonl')]);
    servers.push({ id: 'fastify_contract', label: 'Fastify contract floor', url: s.url, child: s.child, etag: true });
  }
  {
    const s = await startNode('ours', oursArgs('ours'));
    servers.push({ id: 'ours', label: 'ours', url: s.url, child: s.child, etag: true });
  }
  {
    const s = await startNode('ours --no-access-log', oursArgs('ours-quiet', ['--no-access-log']));
    servers.push({ id: 'ours_no_access_log', label: 'ours --no-access-log', url: s.url, child: s.child, etag: true });
  }
  {
    const child = track(process.execPath, oursArgs('peer', ['--control', 'stdio']), { logFile: log('ours-peer'), stdin: 'pipe', env });
    const mcp = mcpClient(child, 'ours (control stdio)');
    const ready = await mcp.start();
    oursPeer = { child, mcp, url: ready.url };
    await mint();
  }
  await verifyAll();

  // The digest cache stores nothing for a file changed in the last 2 s.
  const settle = listingWrittenAt + 2500 - Date.now();
  if (settle > 0) await sleep(settle);

  for (let r = 0; r < ROUNDS; r++) {
    say(`round ${r + 1}/${ROUNDS}`);
    raw.sha256.push(shaRate());
    for (const c of CASES) {
      for (const s of rotate(servers, r)) {
        const m = await timedLoad(`${s.url}/resources/files/${c.file}`, c.size);
        push(raw.reads, `${s.id}/${c.id}`, m);
        if (m.errors) odd.push(`${s.label}, ${c.name}, round ${r + 1}: ${m.errors} errors or non-2xx answers`);
      }
    }
    await mint(); // a fresh handle each round, far from its expiry
    const pair = { round: r };
    for (const which of r % 2 ? ['redeem', 'read'] : ['read', 'redeem']) {
      const m =
        which === 'read'
          ? await timedLoad(`${oursPeer.url}/resources/files/small.bin`, 1024)
          : await timedLoad(`${oursPeer.url}/resources/peer/${oursPeer.handle}`, 1024, { 'x-murmur-audience': oursPeer.audience });
      pair[which] = m;
      if (m.errors) odd.push(`ours (control stdio) ${which}, round ${r + 1}: ${m.errors} errors or non-2xx answers`);
    }
    raw.peer.push(pair);
    await busyRound(r);
    await streamedRound(r);
    await rewrittenRound(r);
    await listingRound(r);
    raw.mirror.push(await mirrorRound({ round: r, cli: CLI, root: listRoot, digests: listDigests, scratch, serve: serveListing }));
    raw.big_listing.push(
      await bigListingRound({
        r,
        tree: bigTree,
        cli: CLI,
        curl: curl.path,
        start: startNode,
        stop,
        repeats: BIG_LIST_REPEATS,
        bodyFile: join(scratch, 'big-listing.json'),
        odd,
      }),
    );
    for (let i = 0; i < START_SAMPLES; i++) {
      for (const kind of rotate(['fastify', 'ours', 'bare', 'unconfined'], r + i)) await startSample(kind, r);
    }
  }
  raw.sha256.push(shaRate());
  await verifyAll(); // after the load, every server must still answer right
} catch (error) {
  fail(error?.stack ?? String(error));
} finally {
  const all = [...servers.map((s) => [s.label, s.child]), ...(oursPeer ? [['ours (control stdio)', oursPeer.child]] : [])];
  for (const [label, child] of all) {
    const code = await stop(child);
    if (code !== 0 && code !== null) odd.push(`${label} exited with ${code} on SIGTERM`);
  }
}

// ---- the report ----
const cpu = cpus();
const meta = {
  date: startedAt.toISOString(),
  duration_s: Math.round((performance.now() - t0Run) / 1000),
  machine: {
    cores: cpu.length,
    cpu:
      readFileSync('/proc/cpuinfo', 'utf8')
        .match(/^model name\s*:\s*(.*)$/m)?.[1]
        ?.trim() ??
      cpu[0]?.model ??
      'unknown',
    kernel: release(),
    node: process.version,
    memory_gib: +(totalmem() / 2 ** 30).toFixed(1),
    loadavg_before: loadBefore.map((x) => +x.toFixed(2)),
    loadavg_after: loadavg().map((x) => +x.toFixed(2)),
  },
  loadgen,
  nginx: nginx.path ? toolVersion(nginx.path, ['-v']).replace(/^nginx version: /, '') : null,
  rounds: ROUNDS,
  seconds_per_case: SECONDS,
  warmup_seconds: WARMUP_SECONDS,
  quick,
  listing_files: LIST_FILES,
  big_listing_files: BIG_LIST_FILES,
  big_listing_dirs: BIG_LIST_DIRS,
  listing_fs: listingFs,
  listing_dir: listRoot,
  command: `npm run bench${quick ? ' -- --quick' : ''}`,
  servers: servers.map((s) => ({ id: s.id, label: s.label })),
  notes,
  odd,
};
const summary = summarise(
  raw,
  servers.map((s) => s.id),
  CASES,
);
summary.mirror = summariseMirror(raw.mirror);
process.stdout.write(renderReport(meta, summary, servers, CASES));
process.stdout.write(`${renderMirror(summary.mirror).join('\n')}\n`);
if (outFile) {
  // A directory (one that exists, or a path ending in /) gets the results and the chart.
  const toDir = outFile.endsWith('/') || (existsSync(outFile) && statSync(outFile).isDirectory());
  const resultsFile = toDir ? join(outFile, 'results.json') : outFile;
  if (toDir) mkdirSync(outFile, { recursive: true });
  writeFileSync(resultsFile, `${JSON.stringify({ ...meta, summary, raw }, null, 2)}\n`);
  say(`results written to ${resultsFile}`);
  if (toDir) {
    const caption = `${meta.command}, ${meta.date.slice(0, 10)}, ${meta.machine.cores} cores, Node ${meta.machine.node}: reads, this server beside each peer`;
    writeFileSync(join(outFile, 'bench.svg'), renderChartSvg(chartRows(summary, meta.servers, CASES), meta.servers, caption));
    say(`chart written to ${join(outFile, 'bench.svg')}`);
  }
}
