// `npm run bench`: how fast does our operator plane serve a file, next to the servers it could be
// replaced by? It builds a temp capsule with a 1 KiB and a 4 MiB file under out/, then, one server
// at a time, measures GET /resources/files/<file> over loopback with 32 connections: requests per
// second for 1 KiB (per-request overhead: routing, openat2, trace, headers) and body MB/s for
// 4 MiB (the data path: read + SHA-256 of every byte). The peers are
//   - Fastify 5 + @fastify/static (wildcard: false): the ordinary way to serve a directory from
//     Node, on the same framework we use, without hashing — what "just use a static plugin" costs;
//   - plain node:http doing readFile + node:crypto sha256 per request: the obvious way to serve a
//     file *with* its content hash as etag, which is the guarantee we give.
// Every server must first answer both files with the right bytes (and ours with etag = sha256), so
// a broken server cannot look fast. Load: wrk when on PATH, else autocannon (which cannot push
// much more than ~50 MB/s of body, so 4 MiB numbers under autocannon measure autocannon).
// Env: BENCH_SECONDS (default 8, per case), BENCH_LOADGEN=wrk|autocannon (default: wrk if found).
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { accessSync, constants, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { cpus, release, tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, '..', 'dist', 'cli.js');
const CONNECTIONS = 32;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const WARMUP_SECONDS = 2;
const START_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 5_000;
const CASES = [
  { name: '1 KiB req/s', file: 'small.bin', size: 1024, metric: 'rps' },
  { name: '4 MiB MB/s', file: 'large.bin', size: 4 * 1024 * 1024, metric: 'mbps' },
];

if (!Number.isInteger(SECONDS) || SECONDS < 1 || SECONDS > 600) fail('BENCH_SECONDS must be an integer from 1 to 600');
if (!existsSync(CLI)) fail(`${CLI} is missing: run \`npm run build\` first`);

// ---- children: every one is tracked, and killed when this process ends, however it ends ----
const children = new Set();
let scratch = null;
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(130));

function fail(message) {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(1);
}

/** Spawn a server, wait for its one JSON line on stdout, return { child, url }. */
function startServer(label, args, logFile, env = process.env) {
  const log = openSync(logFile, 'a');
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', log], env });
  closeSync(log);
  children.add(child);
  child.once('exit', () => children.delete(child));
  return new Promise((resolve, reject) => {
    let buffered = '';
    const timer = setTimeout(() => reject(new Error(`${label}: no listening line within ${START_TIMEOUT_MS} ms (log: ${logFile})`)), START_TIMEOUT_MS);
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${label} exited with ${code} before listening (log: ${logFile})`)); });
    child.stdout.on('data', (chunk) => {
      if (buffered === null) return; // keep draining, but the line is already read
      buffered += chunk;
      const end = buffered.indexOf('\n');
      if (end < 0) return;
      const line = buffered.slice(0, end);
      buffered = null;
      clearTimeout(timer);
      try {
        const { url } = JSON.parse(line);
        if (new URL(url).hostname !== '127.0.0.1') throw new Error(`not loopback: ${url}`);
        resolve({ child, url });
      } catch (error) {
        reject(new Error(`${label}: bad listening line ${JSON.stringify(line)}: ${error.message}`));
      }
    });
  });
}

/** SIGTERM by PID, SIGKILL if it has not exited after STOP_TIMEOUT_MS. Resolves to the exit code. */
function stopServer({ child }) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
    child.once('exit', (code, signal) => { clearTimeout(timer); resolve(code ?? signal); });
    process.kill(child.pid, 'SIGTERM');
  });
}

function fetchOnce(url) {
  return new Promise((resolve, reject) => {
    const req = get(url, { agent: false, timeout: 10_000 }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`timeout fetching ${url}`)));
    req.on('error', reject);
  });
}

/** Refuse to time a server that does not answer the exact bytes (and, for ours, the right etag). */
async function verify(label, url, file, checkEtag) {
  const res = await fetchOnce(url);
  if (res.status !== 200) throw new Error(`${label}: ${url} answered ${res.status}`);
  if (!res.body.equals(file.bytes)) throw new Error(`${label}: ${url} answered ${res.body.length} bytes that differ from the file`);
  if (checkEtag && res.headers.etag !== `"sha256:${file.sha256}"`) {
    throw new Error(`${label}: etag ${res.headers.etag} is not "sha256:${file.sha256}"`);
  }
}

// ---- load generators: both return { rps, mbps, errors } where only 2xx responses count ----
function findOnPath(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    try { accessSync(join(dir, name), constants.X_OK); return join(dir, name); } catch { /* next */ }
  }
  return null;
}

const WRK_REPORT = `done = function(s, latency, requests)
  io.write(string.format('\\n{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}\\n',
    s.requests, s.duration, s.errors.connect, s.errors.read, s.errors.write, s.errors.status, s.errors.timeout))
end
`;

function runWrk(wrk, script, url, seconds, size) {
  const args = ['-t2', `-c${CONNECTIONS}`, `-d${seconds}s`, '--timeout', '10s', '-s', script, url];
  return new Promise((resolve, reject) => {
    const child = spawn(wrk, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    const timer = setTimeout(() => child.kill('SIGKILL'), (seconds + 30) * 1000);
    let out = '';
    child.stdout.on('data', (c) => { out += c; });
    child.stderr.on('data', (c) => { out += c; });
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      children.delete(child);
      const line = out.split('\n').reverse().find((l) => l.startsWith('{"requests"'));
      if (code !== 0 || !line) return reject(new Error(`wrk exited with ${code}:\n${out}`));
      const r = JSON.parse(line);
      const ok = r.requests - r.status; // wrk counts non-2xx/3xx answers in errors.status
      const secs = r.duration_us / 1e6;
      resolve({ rps: ok / secs, mbps: (ok * size) / secs / 1e6, errors: r.connect + r.read + r.write + r.status + r.timeout });
    });
  });
}

async function runAutocannon(autocannon, url, seconds, size) {
  const instance = autocannon({ url, connections: CONNECTIONS, duration: seconds, timeout: 10 });
  const guard = setTimeout(() => instance.stop(), (seconds + 30) * 1000);
  try {
    const r = await instance;
    const ok = r['2xx'];
    return { rps: ok / r.duration, mbps: (ok * size) / r.duration / 1e6, errors: r.errors + r.timeouts + r.non2xx };
  } finally {
    clearTimeout(guard);
  }
}

// ---- the run ----
scratch = mkdtempSync(join(tmpdir(), 'rp-bench-'));
const workdir = join(scratch, 'capsule');
const outDir = join(workdir, 'out');
mkdirSync(outDir, { recursive: true });
writeFileSync(join(workdir, 'murmur.yaml'), 'name: bench\nversion: "0.1.0"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 64Mi\n');
const files = {};
for (const c of CASES) {
  const bytes = randomBytes(c.size);
  writeFileSync(join(outDir, c.file), bytes);
  files[c.file] = { bytes, sha256: createHash('sha256').update(bytes).digest('hex') };
}

const wanted = process.env.BENCH_LOADGEN;
if (wanted && wanted !== 'wrk' && wanted !== 'autocannon') fail('BENCH_LOADGEN must be wrk or autocannon');
const wrk = wanted === 'autocannon' ? null : findOnPath('wrk');
if (wanted === 'wrk' && !wrk) fail('BENCH_LOADGEN=wrk but wrk is not on PATH (apt-get install wrk)');
let load;
let loadgenName;
if (wrk) {
  const script = join(scratch, 'report.lua');
  writeFileSync(script, WRK_REPORT);
  load = (url, seconds, size) => runWrk(wrk, script, url, seconds, size);
  loadgenName = `wrk (${wrk}, 2 threads)`;
} else {
  const { default: autocannon } = await import('autocannon');
  load = (url, seconds, size) => runAutocannon(autocannon, url, seconds, size);
  const { version } = JSON.parse(readFileSync(join(HERE, '..', 'node_modules', 'autocannon', 'package.json'), 'utf8'));
  loadgenName = `autocannon ${version} (in-process)`;
}

const servers = [
  {
    label: 'ours', column: 'ours', etag: true,
    args: [CLI, 'serve', '--workdir', workdir, '--containment', 'sealed', '--trace', join(scratch, 'trace.jsonl')],
    env: { ...process.env, RESOURCE_PLANE_RECORDS_DIR: join(scratch, 'records') },
  },
  { label: '@fastify/static', column: 'fastify-static', args: [join(HERE, 'peer-static.mjs'), outDir] },
  { label: 'readFile+sha256', column: 'naive-sha256', args: [join(HERE, 'peer-naive.mjs'), outDir] },
];

const results = {}; // results[column][case.name] = { value, errors }
const odd = [];
let failure = null;
try {
  for (const s of servers) {
    process.stderr.write(`bench: ${s.label} …\n`);
    const server = await startServer(s.label, s.args, join(scratch, `${s.column}.log`), s.env);
    try {
      for (const c of CASES) await verify(s.label, `${server.url}/resources/files/${c.file}`, files[c.file], s.etag);
      results[s.column] = {};
      for (const c of CASES) {
        const url = `${server.url}/resources/files/${c.file}`;
        await load(url, WARMUP_SECONDS, c.size);
        const r = await load(url, SECONDS, c.size);
        results[s.column][c.name] = { value: r[c.metric], errors: r.errors };
        if (r.errors) odd.push(`${s.label}, ${c.name}: ${r.errors} errors or non-2xx answers during timing`);
      }
      // After the load, it must still answer right.
      for (const c of CASES) await verify(s.label, `${server.url}/resources/files/${c.file}`, files[c.file], s.etag);
    } finally {
      const code = await stopServer(server);
      if (code !== 0) odd.push(`${s.label} exited with ${code} on SIGTERM`);
    }
  }
} catch (error) {
  failure = error;
} finally {
  await Promise.all([...children].map((child) => stopServer({ child })));
  rmSync(scratch, { recursive: true, force: true });
}
if (failure) fail(failure.message);

// ---- the table ----
const fmt = (v) => (v >= 100 ? Math.round(v).toString() : v.toFixed(1));
const peers = servers.slice(1);
const header = ['case', 'ours', ...peers.flatMap((p) => [p.label, `ours/${p.column}`])];
const rows = CASES.map((c) => {
  const ours = results.ours[c.name].value;
  return [c.name, fmt(ours), ...peers.flatMap((p) => {
    const v = results[p.column][c.name].value;
    return [fmt(v), `${(ours / v).toFixed(2)}x`];
  })];
});
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
const line = (cells) => cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join('  ');
const cpu = cpus();
console.log(`load generator: ${loadgenName}, ${CONNECTIONS} connections, ${SECONDS} s per case after a ${WARMUP_SECONDS} s warm-up, servers one at a time`);
console.log(`machine: ${cpu.length} cores (${cpu[0]?.model.trim() ?? 'unknown'}), Linux ${release()}, Node ${process.version}`);
console.log(`MB/s = 10^6 body bytes per second from 2xx answers only; ours runs --containment sealed, trace on, log level ${process.env.RESOURCE_PLANE_LOG_LEVEL ?? 'info'}`);
console.log();
console.log(line(header));
console.log(line(widths.map((w) => '-'.repeat(w))));
for (const r of rows) console.log(line(r));
if (!wrk) console.log('\nnote: autocannon tops out near ~50 MB/s of body; the 4 MiB row measures autocannon more than the servers. Install wrk.');
for (const o of odd) console.log(`odd: ${o}`);
