// The memory half of `npm run stress` (issue 23): a bounded, loopback-only load on one
// `resource-plane serve --memory-budget STRESS_BUDGET_MIB` (default 64) whose root holds a listing
// of 1,000 one-byte files in a 3.5 KB-deep directory (a 3.6 MB body) and 450 files of distinct sizes
// from 600 to 1,049 KiB. For STRESS_SECONDS (default 20) it runs, at once:
//   - listing holders: STRESS_LISTING_HOLDERS (120) connections that ask for the listing and never
//     read, asking again whenever the server answers or cuts them;
//   - size cyclers: STRESS_CYCLERS (4) keep-alive clients reading the distinct-size files in turn,
//     every body checked against the file and its etag;
//   - a prober: a small read every 100 ms, which must be answered 200 throughout.
// It requires peak RSS within the budget + 48 MiB above the idle baseline, every cycled body and
// every probe right. Then a second server (--memory-budget 256Mi, max_bytes 256Mi) serves one
// 200 MiB file to STRESS_SLOW_READERS (64) slow clients at once (each reads a little, pauses, reads
// on): every one must get 200 and the whole body under a matching etag, with peak RSS within idle +
// 128 MiB (a streamed body holds two chunks, whatever its size). After each phase the budget's
// in-use gauge must be back to zero and the descriptors near their baseline.
// Every loop is bounded in time; every connection goes to 127.0.0.1. Exit status 1 on any failure.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, '..', 'dist', 'cli', 'main.js');
const num = (name, dflt) => {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isInteger(v) || v < 0 || v > 100_000) throw new Error(`${name} must be a whole number`);
  return v;
};
const SECONDS = num('STRESS_SECONDS', 20);
const HOLDERS = num('STRESS_LISTING_HOLDERS', 120);
const CYCLERS = num('STRESS_CYCLERS', 4);
const BUDGET_MIB = num('STRESS_BUDGET_MIB', 64);
const SLOW_READERS = num('STRESS_SLOW_READERS', 64);
const SLOW_MIB = 200;
const PEAK_SLACK_MIB = 48;
const FD_SLACK = 8;

const scratch = mkdtempSync(join(tmpdir(), 'rp-stress-memory-'));
let server = null;
process.on('exit', () => {
  server?.kill('SIGKILL');
  rmSync(scratch, { recursive: true, force: true });
});
for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => process.exit(130));

// ---- the capsule ----
const work = join(scratch, 'work');
const deep = join('deep', ...Array.from({ length: 14 }, (_, i) => `${String(i).padStart(2, '0')}${'d'.repeat(248)}`));
mkdirSync(join(work, 'out', deep), { recursive: true });
for (let i = 0; i < 1000; i++) writeFileSync(join(work, 'out', deep, `f${i}`), 'x');
mkdirSync(join(work, 'out', 'cycle'));
const cycle = [];
for (let i = 0; i < 450; i++) {
  const body = randomBytes((600 + i) * 1024);
  writeFileSync(join(work, 'out', 'cycle', `f${i}.bin`), body);
  cycle.push({ path: `/resources/files/cycle/f${i}.bin`, body, etag: `"sha256:${createHash('sha256').update(body).digest('hex')}"` });
}
writeFileSync(join(work, 'out', 'small.txt'), 'small');
writeFileSync(join(work, 'murmur.yaml'), 'name: stress-memory\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 2Mi\n');
const bigWork = join(scratch, 'big');
mkdirSync(join(bigWork, 'out'), { recursive: true });
const bigBody = randomBytes(SLOW_MIB << 20);
const bigEtag = `"sha256:${createHash('sha256').update(bigBody).digest('hex')}"`;
writeFileSync(join(bigWork, 'out', 'big.bin'), bigBody);
writeFileSync(join(bigWork, 'murmur.yaml'), 'name: stress-big\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 256Mi\n');

// ---- the server ----
async function start(dir = work, budget = `${BUDGET_MIB}Mi`) {
  const args = ['serve', '--workdir', dir, '--trace', join(scratch, `trace-${budget}.jsonl`), '--memory-budget', budget, '--metrics'];
  server = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'ignore'], env: { ...process.env, RESOURCE_PLANE_LOG_LEVEL: 'warn' } });
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
  return { rssMiB: (Number(/VmRSS:\s+(\d+)/.exec(status)[1]) * 1024) / 1048576, fds: readdirSync(`/proc/${server.pid}/fd`).length };
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const url = await start();
let { port } = new URL(url);
await sleep(500);
const baseline = procStat();
const deadline = Date.now() + SECONDS * 1000;
const live = () => Date.now() < deadline;
const stats = { holds: 0, cycled: 0, cycleErrors: [], probes: 0, probeErrors: [], peakRssMiB: baseline.rssMiB };

function get(target, agent) {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: target, agent }, (res) => {
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

/** Asks for the listing and never reads; when the server answers or cuts it, asks again. */
async function holder() {
  while (live()) {
    await new Promise((resolve) => {
      const s = connect(Number(port), '127.0.0.1', () => s.write('GET /resources/files HTTP/1.1\r\nhost: x\r\n\r\n'));
      s.pause();
      s.on('error', () => undefined);
      s.on('close', resolve);
      const stop = setInterval(() => !live() && s.destroy(), 250);
      s.on('close', () => clearInterval(stop));
    });
    stats.holds += 1;
  }
}

async function cycler(i) {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  for (let n = i * 97; live(); n++) {
    const f = cycle[n % cycle.length];
    const r = await get(f.path, agent);
    if (r.status === 503) continue; // over_capacity while the holders have the budget: allowed
    if (r.status !== 200 || !r.body.equals(f.body) || r.headers.etag !== f.etag) stats.cycleErrors.push(`${f.path}: ${r.status} ${r.error ?? ''}`);
    stats.cycled += 1;
  }
  agent.destroy();
}

async function prober() {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  while (live()) {
    const r = await get('/resources/files/small.txt', agent);
    if (r.status !== 200 || r.body.toString() !== 'small') stats.probeErrors.push(`${r.status} ${r.error ?? r.body.toString().slice(0, 80)}`);
    stats.probes += 1;
    await sleep(100);
  }
  agent.destroy();
}

async function budgetInUse() {
  const r = await get('/metrics');
  const m = /^resource_plane_memory_budget_in_use_bytes (\d+)/m.exec(r.body.toString());
  return m ? Number(m[1]) : null;
}

const sampler = setInterval(() => {
  stats.peakRssMiB = Math.max(stats.peakRssMiB, procStat().rssMiB);
}, 100);
await Promise.all([...Array.from({ length: HOLDERS }, () => holder()), ...Array.from({ length: CYCLERS }, (_, i) => cycler(i)), prober()]);
clearInterval(sampler);

let after = procStat();
for (let i = 0; i < 40 && after.fds > baseline.fds + FD_SLACK; i++) {
  await sleep(250);
  after = procStat();
}
let inUse = await budgetInUse();
for (let i = 0; i < 40 && inUse !== 0; i++) {
  await sleep(250);
  inUse = await budgetInUse();
}
server.kill('SIGTERM');
const exit = await new Promise((r) => server.on('exit', (code, signal) => r({ code, signal })));
server = null;

// ---- phase two: 64 slow readers of one 200 MiB file ----
const bigUrl = await start(bigWork, '256Mi');
port = new URL(bigUrl).port;
await sleep(500);
const bigBaseline = procStat();
let bigPeak = bigBaseline.rssMiB;
const bigSampler = setInterval(() => {
  bigPeak = Math.max(bigPeak, procStat().rssMiB);
}, 100);
/** Reads the whole body slowly: a pause of 20 ms after every 4 MiB. */
function slowRead() {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/resources/files/big.bin', agent: false }, (res) => {
      const hash = createHash('sha256');
      let got = 0;
      let sincePause = 0;
      res.on('data', (d) => {
        hash.update(d);
        got += d.length;
        sincePause += d.length;
        if (sincePause >= 4 << 20) {
          sincePause = 0;
          res.pause();
          setTimeout(() => res.resume(), 20);
        }
      });
      res.on('end', () =>
        resolve({
          status: res.statusCode,
          whole: got === bigBody.length,
          etagOk: res.headers.etag === bigEtag && `"sha256:${hash.digest('hex')}"` === bigEtag,
        }),
      );
      res.on('error', (e) => resolve({ status: 0, error: e.message }));
    });
    req.on('error', (e) => resolve({ status: 0, error: e.message }));
    req.setTimeout(120_000, () => req.destroy(new Error('client timeout')));
    req.end();
  });
}
const slow = await Promise.all(Array.from({ length: SLOW_READERS }, () => slowRead()));
clearInterval(bigSampler);
let bigInUse = await budgetInUse();
for (let i = 0; i < 40 && bigInUse !== 0; i++) {
  await sleep(250);
  bigInUse = await budgetInUse();
}
let bigAfter = procStat();
for (let i = 0; i < 40 && bigAfter.fds > bigBaseline.fds + FD_SLACK; i++) {
  await sleep(250);
  bigAfter = procStat();
}
server.kill('SIGTERM');
const bigExit = await new Promise((r) => server.on('exit', (code, signal) => r({ code, signal })));
server = null;
const slowBad = slow.filter((r) => r.status !== 200 || !r.whole || !r.etagOk);

const figures = {
  seconds: SECONDS,
  budget_mib: BUDGET_MIB,
  listing_holds: stats.holds,
  cycled_reads: stats.cycled,
  cycle_errors: stats.cycleErrors.length,
  probes: stats.probes,
  probe_errors: stats.probeErrors.length,
  budget_in_use_after: inUse,
  rss_mib: { baseline: Math.round(baseline.rssMiB), peak: Math.round(stats.peakRssMiB), after: Math.round(after.rssMiB) },
  fds: { baseline: baseline.fds, after: after.fds },
  exit,
  slow_readers: {
    clients: SLOW_READERS,
    file_mib: SLOW_MIB,
    failed: slowBad.length,
    budget_in_use_after: bigInUse,
    rss_mib: { baseline: Math.round(bigBaseline.rssMiB), peak: Math.round(bigPeak), after: Math.round(bigAfter.rssMiB) },
    fds: { baseline: bigBaseline.fds, after: bigAfter.fds },
    exit: bigExit,
  },
};
console.log(JSON.stringify(figures, null, 2));
const failures = [];
if (stats.cycled === 0) failures.push('no cycled read completed');
if (stats.cycleErrors.length) failures.push(`cycled reads failed: ${stats.cycleErrors.slice(0, 5).join('; ')}`);
if (stats.probes === 0 || stats.probeErrors.length)
  failures.push(`small reads were not answered while the listings were held: ${stats.probeErrors.slice(0, 5).join('; ')}`);
if (stats.peakRssMiB - baseline.rssMiB > BUDGET_MIB + PEAK_SLACK_MIB) {
  failures.push(
    `peak RSS passed idle + budget + ${PEAK_SLACK_MIB} MiB: ${Math.round(baseline.rssMiB)} → ${Math.round(stats.peakRssMiB)} MiB with a ${BUDGET_MIB} MiB budget`,
  );
}
if (inUse !== 0) failures.push(`the memory budget did not come back to zero: ${inUse} bytes in use`);
if (after.fds > baseline.fds + FD_SLACK) failures.push(`descriptors did not come back: ${baseline.fds} → ${after.fds}`);
if (exit.code !== 0) failures.push(`serve did not exit 0 on SIGTERM: ${JSON.stringify(exit)}`);
if (slowBad.length)
  failures.push(
    `${slowBad.length} of ${SLOW_READERS} slow readers did not get the whole ${SLOW_MIB} MiB body under a matching etag: ${JSON.stringify(slowBad.slice(0, 3))}`,
  );
if (bigPeak - bigBaseline.rssMiB > 128)
  failures.push(`peak RSS with ${SLOW_READERS} slow readers passed idle + 128 MiB: ${Math.round(bigBaseline.rssMiB)} → ${Math.round(bigPeak)} MiB`);
if (bigInUse !== 0) failures.push(`the memory budget did not come back to zero after the slow readers: ${bigInUse} bytes in use`);
if (bigAfter.fds > bigBaseline.fds + FD_SLACK) failures.push(`descriptors did not come back after the slow readers: ${bigBaseline.fds} → ${bigAfter.fds}`);
if (bigExit.code !== 0) failures.push(`the second serve did not exit 0 on SIGTERM: ${JSON.stringify(bigExit)}`);
if (failures.length) {
  console.error(`stress (memory): FAILED\n- ${failures.join('\n- ')}`);
  process.exit(1);
}
console.log('stress (memory): passed');
