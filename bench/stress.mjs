// `npm run stress`: a bounded, loopback-only hostile load test of `resource-plane serve`. For
// STRESS_SECONDS (default 20) it runs, at once:
//   - good clients: keep-alive GETs of small files, every body and etag checked;
//   - hostile clients: escapes (`..`, encoded `..`, escaping and absolute links, NUL, over-long
//     paths), methods, malformed targets and handles, oversized headers;
//   - never-reading clients: GETs of an 8 MiB file whose responses are never read;
//   - slow clients: header bytes trickled forever;
//   - listing clients: listings of a root that also holds a 1 TiB sparse file, some abandoned;
//   - pipelining attackers: 64 KiB of pipelined GETs of a 60 KiB file per connection, never read;
//   - reset-mid-queue attackers: a 12 MiB and a 3 MiB read pipelined, the connection reset a few
//     ms later, over and over;
//   - address-rotating refusers: traced refusals (a PUT, an escape), each from another source
//     address in 127.0.0.0/8, so no per-address allowance is ever used up (at most
//     STRESS_ROTATE_MAX each).
// The server runs with --memory-budget STRESS_BUDGET_MIB (default 64). Then it stops the load and
// requires: zero errors for good requests, zero outside bytes anywhere, peak RSS within the budget
// (plus one 8 MiB buffer per pool thread and the runtime's slack) above the baseline, the budget's
// in-use gauge back to zero, the server's descriptors back to within a few of its baseline and its
// RSS near its baseline, and the trace's refusal lines within the server-wide rate.
// Every loop is bounded in time; every connection goes to 127.0.0.1. Exit status 1 on any failure.
// Env: STRESS_SECONDS, STRESS_GOOD (connections, default 100), STRESS_HOSTILE (50),
// STRESS_NEVER_READ (64), STRESS_SLOW (200), STRESS_LISTERS (4), STRESS_PIPELINERS (8),
// STRESS_RESETTERS (4), STRESS_ROTATORS (16), STRESS_ROTATE_MAX (20000), STRESS_BUDGET_MIB (64).
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, '..', 'dist', 'cli', 'main.js');
const { SERVER_REFUSAL_BURST, SERVER_REFUSALS_PER_SECOND } = await import(join(HERE, '..', 'dist', 'limits.js'));
const num = (name, dflt) => {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isInteger(v) || v < 0 || v > 100_000) throw new Error(`${name} must be a whole number`);
  return v;
};
const SECONDS = num('STRESS_SECONDS', 20);
const GOOD = num('STRESS_GOOD', 100);
const HOSTILE = num('STRESS_HOSTILE', 50);
const NEVER_READ = num('STRESS_NEVER_READ', 64);
const SLOW = num('STRESS_SLOW', 200);
const LISTERS = num('STRESS_LISTERS', 4);
const PIPELINERS = num('STRESS_PIPELINERS', 8);
const RESETTERS = num('STRESS_RESETTERS', 4);
const ROTATORS = num('STRESS_ROTATORS', 16);
const ROTATE_MAX = num('STRESS_ROTATE_MAX', 20_000);
const BUDGET_MIB = num('STRESS_BUDGET_MIB', 64);
/** Above the baseline, besides the budget: one 8 MiB buffer per pool thread, and the runtime. */
const PEAK_SLACK_MIB = 4 * 8 + 48;
const SECRET = 'STRESS-OUTSIDE-SECRET-5b1d';
const RSS_SLACK_MIB = 64;
const FD_SLACK = 8;

const scratch = mkdtempSync(join(tmpdir(), 'rp-stress-'));
let server = null;
process.on('exit', () => {
  server?.kill('SIGKILL');
  rmSync(scratch, { recursive: true, force: true });
});
for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => process.exit(130));

// ---- the capsule ----
const work = join(scratch, 'work');
mkdirSync(join(work, 'out', 'sub'), { recursive: true });
mkdirSync(join(scratch, 'outside'));
writeFileSync(join(scratch, 'outside', 'secret.txt'), SECRET);
const small = [];
for (let i = 0; i < 20; i++) {
  const body = Buffer.from(`small file ${i} `.repeat(1 + i * 7));
  writeFileSync(join(work, 'out', 'sub', `f${i}.txt`), body);
  small.push({ path: `sub/f${i}.txt`, body, etag: `"sha256:${createHash('sha256').update(body).digest('hex')}"` });
}
writeFileSync(join(work, 'out', 'eight.bin'), Buffer.alloc(8 << 20, 3));
writeFileSync(join(work, 'out', 'sixty.bin'), Buffer.alloc(60 << 10, 4));
writeFileSync(join(work, 'out', 'twelve.bin'), Buffer.alloc(12 << 20, 5));
writeFileSync(join(work, 'out', 'three.bin'), Buffer.alloc(3 << 20, 6));
execFileSync('truncate', ['-s', '1T', join(work, 'out', 'sparse.bin')]);
symlinkSync('../../outside/secret.txt', join(work, 'out', 'escape'));
symlinkSync(join(scratch, 'outside', 'secret.txt'), join(work, 'out', 'absolute'));
writeFileSync(join(work, 'murmur.yaml'), 'name: stress\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 16Mi\n');

// ---- the server ----
async function start() {
  const args = [
    'serve',
    '--workdir',
    work,
    '--containment',
    'sealed',
    '--trace',
    join(scratch, 'trace.jsonl'),
    '--memory-budget',
    `${BUDGET_MIB}Mi`,
    '--metrics',
  ];
  server = spawn(process.execPath, [CLI, ...args], {
    stdio: ['ignore', 'pipe', 'ignore'],
    env: { ...process.env, RESOURCE_PLANE_LOG_LEVEL: 'warn' },
  });
  let out = '';
  return new Promise((resolve, reject) => {
    server.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]).url);
    });
    server.on('exit', (code) => reject(new Error(`serve exited ${code}`)));
  });
}
const procStat = () => {
  const status = readFileSync(`/proc/${server.pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+(\d+)/.exec(status)[1]) * 1024;
  return { rssMiB: rss / 1048576, fds: readdirSync(`/proc/${server.pid}/fd`).length };
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const url = await start();
const { port } = new URL(url);
await sleep(500);
const baseline = procStat();
const deadline = Date.now() + SECONDS * 1000;
const live = () => Date.now() < deadline;
const stats = { good: 0, goodErrors: [], hostile: 0, outsideBytes: 0, neverRead: 0, slow: 0, listings: {}, peakRssMiB: baseline.rssMiB };
const checkNoSecret = (buf) => {
  if (buf.includes(SECRET)) stats.outsideBytes += 1;
};

/** One raw request (target sent as typed), the whole response read. */
function raw(target, headers = {}, method = 'GET', agent = undefined, localAddress = undefined) {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: target, method, headers, agent, localAddress }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts) }));
      res.on('error', (e) => resolve({ status: 0, error: e.message, body: Buffer.alloc(0) }));
    });
    req.on('error', (e) => resolve({ status: 0, error: e.message, body: Buffer.alloc(0) }));
    req.setTimeout(30_000, () => req.destroy(new Error('client timeout')));
    req.end();
  });
}

async function goodClient(i) {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  for (let n = 0; live(); n++) {
    const f = small[(i + n) % small.length];
    const r = await raw(`/resources/files/${f.path}`, {}, 'GET', agent);
    checkNoSecret(r.body);
    if (r.status !== 200 || !r.body.equals(f.body) || r.headers.etag !== f.etag) {
      stats.goodErrors.push(`${f.path}: ${r.status} ${r.error ?? r.body.toString().slice(0, 120)}`);
    }
    stats.good += 1;
  }
  agent.destroy();
}

const HOSTILE_REQUESTS = [
  ['/resources/files/../outside/secret.txt'],
  ['/resources/files/%2e%2e/%2e%2e/outside/secret.txt'],
  ['/resources/files/escape'],
  ['/resources/files/absolute'],
  ['/resources/files/sub%00/f1.txt'],
  [`/resources/files/${'a/'.repeat(400)}x`],
  ['/resources/files/x%ZZ'],
  ['/resources/files/sub/f1.txt', {}, 'PUT'],
  ['/resources/peer/mh1.AAAA.BBBB', { 'x-murmur-audience': 'x'.repeat(8000) }],
  ['/resources/files/sub/f1.txt', { 'x-big': 'b'.repeat(20_000) }],
  ['//resources/files/escape'],
  ['/resources/files//etc/passwd'],
];
async function hostileClient(i) {
  for (let n = 0; live(); n++) {
    const [target, headers, method] = HOSTILE_REQUESTS[(i + n) % HOSTILE_REQUESTS.length];
    const r = await raw(target, headers, method);
    checkNoSecret(r.body);
    stats.hostile += 1;
  }
}

/** Sends `bytes` on a new connection and never reads; resolves when the server (or the end) cuts it. */
function sendAndNeverRead(bytes) {
  return new Promise((resolve) => {
    const s = connect(Number(port), '127.0.0.1', () => s.write(bytes));
    s.pause();
    s.on('error', () => undefined);
    s.on('close', resolve);
    const stop = setInterval(() => {
      if (!live()) s.destroy();
    }, 250);
    s.on('close', () => clearInterval(stop));
  });
}

/** Asks for 8 MiB and never reads; when the server cuts it, asks again. */
async function neverReader() {
  while (live()) {
    await sendAndNeverRead('GET /resources/files/eight.bin HTTP/1.1\r\nhost: x\r\n\r\n');
    stats.neverRead += 1;
  }
}

/** Trickles header bytes until cut. */
async function slowClient() {
  while (live()) {
    await new Promise((resolve) => {
      const s = connect(Number(port), '127.0.0.1', () => s.write('GET /resources/files/sub/f1.txt HTTP/1.1\r\nhost: x\r\n'));
      const t = setInterval(() => (live() ? s.write('x-slow: y\r\n') : s.destroy()), 1000);
      s.on('error', () => undefined);
      s.on('close', () => {
        clearInterval(t);
        resolve();
      });
    });
    stats.slow += 1;
  }
}

/** Lists (the root holds a 1 TiB sparse file); every other listing is abandoned after 300 ms. */
async function lister(i) {
  for (let n = 0; live(); n++) {
    if ((i + n) % 2) {
      await new Promise((resolve) => {
        const s = connect(Number(port), '127.0.0.1', () => s.write('GET /resources/files HTTP/1.1\r\nhost: x\r\n\r\n'));
        s.on('error', () => undefined);
        setTimeout(() => {
          s.destroy();
          resolve();
        }, 300);
      });
      stats.listings.abandoned = (stats.listings.abandoned ?? 0) + 1;
    } else {
      const r = await raw('/resources/files');
      checkNoSecret(r.body);
      const key = r.status === 200 ? 'ok' : `${r.status} ${r.body.length ? JSON.parse(r.body).error : r.error}`;
      stats.listings[key] = (stats.listings[key] ?? 0) + 1;
    }
  }
}

/** 64 KiB of pipelined GETs of a 60 KiB file, never read; when the server cuts it, again. */
async function pipeliner() {
  const one = 'GET /resources/files/sixty.bin HTTP/1.1\r\nhost: x\r\n\r\n';
  const burst = one.repeat(Math.floor((64 << 10) / one.length));
  while (live()) {
    await sendAndNeverRead(burst);
    stats.pipelined = (stats.pipelined ?? 0) + 1;
  }
}

/** A 12 MiB and a 3 MiB read pipelined, the connection reset a few ms later. */
async function resetter() {
  while (live()) {
    await new Promise((resolve) => {
      const s = connect(Number(port), '127.0.0.1', () => {
        s.write('GET /resources/files/twelve.bin HTTP/1.1\r\nhost: x\r\n\r\nGET /resources/files/three.bin HTTP/1.1\r\nhost: x\r\n\r\n');
        setTimeout(() => s.resetAndDestroy(), 2 + Math.floor(Math.random() * 8));
      });
      s.pause();
      s.on('error', () => undefined);
      s.on('close', resolve);
    });
    stats.resets = (stats.resets ?? 0) + 1;
  }
}

/**
 * Traced refusals, each from the next source address in 127.<i+2>.0.0/16: a fresh per-address
 * allowance every time. Refused before any filesystem access (a write verb, an escape), so they do
 * not queue behind the listings on the thread pool.
 */
async function rotator(i) {
  for (let n = 0; live() && n < ROTATE_MAX; n++) {
    const [target, method, status] = n % 2 ? ['/resources/files/%2e%2e/rotating', 'GET', 403] : ['/resources/files/rotating', 'PUT', 405];
    // agent false: one connection per request, closed after it (a keep-alive pool per address
    // would pile up idle connections to the server's connection cap).
    const r = await raw(target, {}, method, false, `127.${2 + (i % 200)}.${(n >> 8) & 255}.${n & 255 || 1}`);
    stats.rotated = (stats.rotated ?? 0) + 1;
    // Like a hostile client's, a request the loaded server did not answer in time is no failure.
    if (r.status === 0) stats.rotateUnanswered = (stats.rotateUnanswered ?? 0) + 1;
    else if (r.status !== status) {
      stats.rotateErrors = (stats.rotateErrors ?? 0) + 1;
      stats.rotateWhy = `${r.status} ${r.error ?? r.body.toString().slice(0, 100)}`;
    }
  }
}

/** The budget's in-use gauge, from /metrics. */
async function budgetInUse() {
  const r = await raw('/metrics');
  const m = /^resource_plane_memory_budget_in_use_bytes (\d+)/m.exec(r.body.toString());
  return m ? Number(m[1]) : null;
}

const sampler = setInterval(() => {
  stats.peakRssMiB = Math.max(stats.peakRssMiB, procStat().rssMiB);
}, 250);
const started = Date.now();
await Promise.all([
  ...Array.from({ length: GOOD }, (_, i) => goodClient(i)),
  ...Array.from({ length: HOSTILE }, (_, i) => hostileClient(i)),
  ...Array.from({ length: NEVER_READ }, () => neverReader()),
  ...Array.from({ length: SLOW }, () => slowClient()),
  ...Array.from({ length: LISTERS }, (_, i) => lister(i)),
  ...Array.from({ length: PIPELINERS }, () => pipeliner()),
  ...Array.from({ length: RESETTERS }, () => resetter()),
  ...Array.from({ length: ROTATORS }, (_, i) => rotator(i)),
]);
clearInterval(sampler);
const loadSeconds = (Date.now() - started) / 1000;

// Settle: cut connections drain, the memory budget is released, GC gets a chance. Nothing forces a
// collection (none is ever forced), so the heap shrinks when V8's memory reducer runs once the
// server is idle: within 10 s on one VM, after 25-30 s on another (2026-12-03). Up to 60 s.
const settleStarted = Date.now();
let after = procStat();
for (let i = 0; i < 240 && (after.fds > baseline.fds + FD_SLACK || after.rssMiB > baseline.rssMiB + RSS_SLACK_MIB); i++) {
  await sleep(250);
  after = procStat();
}
const settleSeconds = (Date.now() - settleStarted) / 1000;
let inUse = await budgetInUse();
for (let i = 0; i < 40 && inUse !== 0; i++) {
  await sleep(250);
  inUse = await budgetInUse();
}
server.kill('SIGTERM');
const exit = await new Promise((r) => server.on('exit', (code, signal) => r({ code, signal })));
server = null;

// Every refusal goes through the refusal limit: together they may not outgrow the server-wide
// bucket (its burst, its rate over the session, a second of slack), whatever the addresses.
const REQUEST_EVENTS = new Set(['resource_read', 'resource_list', 'peer_handle_redeem']);
const traceLines = readFileSync(join(scratch, 'trace.jsonl'), 'utf8')
  .trim()
  .split('\n')
  .map((l) => JSON.parse(l));
const sessionMs = traceLines.at(-1).timestamp - traceLines[0].timestamp;
const refusalLines = traceLines.filter((l) => REQUEST_EVENTS.has(l.event_type) && l.outcome !== 'ok' && l.outcome !== 'not_modified').length;
const summaryLines = traceLines.filter((l) => l.event_type === 'refusals_suppressed');
const refusalAllowance = Math.floor(SERVER_REFUSAL_BURST + (SERVER_REFUSALS_PER_SECOND * (sessionMs + 1000)) / 1000);

const figures = {
  seconds: Math.round(loadSeconds),
  good_requests: stats.good,
  good_req_per_s: Math.round(stats.good / loadSeconds),
  good_errors: stats.goodErrors.length,
  hostile_requests: stats.hostile,
  outside_bytes_seen: stats.outsideBytes,
  never_read_8MiB_requests: stats.neverRead,
  slow_clients_cut: stats.slow,
  pipelining_connections: stats.pipelined ?? 0,
  reset_mid_queue_connections: stats.resets ?? 0,
  rotating_refusals: stats.rotated ?? 0,
  rotating_unanswered: stats.rotateUnanswered ?? 0,
  trace_refusal_lines: {
    traced: refusalLines,
    allowance: refusalAllowance,
    summary_lines: summaryLines.length,
    suppressed: summaryLines.reduce((n, l) => n + l.suppressed, 0),
  },
  budget_mib: BUDGET_MIB,
  budget_in_use_after: inUse,
  listings: stats.listings,
  rss_mib: {
    baseline: Math.round(baseline.rssMiB),
    peak: Math.round(stats.peakRssMiB),
    after: Math.round(after.rssMiB),
    settled_after_s: Math.round(settleSeconds),
  },
  fds: { baseline: baseline.fds, after: after.fds },
  exit,
};
console.log(JSON.stringify(figures, null, 2));
const failures = [];
if (stats.good === 0) failures.push('no good request completed');
if (stats.goodErrors.length) failures.push(`good requests failed: ${stats.goodErrors.slice(0, 5).join('; ')}`);
if (stats.peakRssMiB - baseline.rssMiB > BUDGET_MIB + PEAK_SLACK_MIB) {
  failures.push(`peak RSS passed the budget: ${Math.round(baseline.rssMiB)} → ${Math.round(stats.peakRssMiB)} MiB with a ${BUDGET_MIB} MiB budget`);
}
if (inUse !== 0) failures.push(`the memory budget did not come back to zero after the crowd left: ${inUse} bytes in use`);
if (stats.outsideBytes) failures.push(`outside bytes were served ${stats.outsideBytes} times`);
if (after.fds > baseline.fds + FD_SLACK) failures.push(`descriptors did not come back: ${baseline.fds} → ${after.fds}`);
if (after.rssMiB > baseline.rssMiB + RSS_SLACK_MIB)
  failures.push(`RSS did not come back near baseline: ${Math.round(baseline.rssMiB)} → ${Math.round(after.rssMiB)} MiB`);
if (stats.rotateErrors) failures.push(`${stats.rotateErrors} rotating refusals were not refused as expected (last: ${stats.rotateWhy})`);
if (refusalLines > refusalAllowance) failures.push(`the trace took ${refusalLines} refusal lines, past the server-wide allowance of ${refusalAllowance}`);
if (exit.code !== 0) failures.push(`serve did not exit 0 on SIGTERM: ${JSON.stringify(exit)}`);
if (failures.length) {
  console.error(`stress: FAILED\n- ${failures.join('\n- ')}`);
  process.exit(1);
}
console.log('stress: passed');
