// The outside programs the bench drives: wrk (load), nginx (the reference server) and apt-get to
// install them when they are absent and we are root. Nothing here decides what is measured.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { childPids, track } from './children.mjs';

export function findOnPath(name, extra = []) {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter), ...extra]) {
    if (!dir) continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      /* next */
    }
  }
  return null;
}

const SBIN = ['/usr/sbin', '/sbin', '/usr/local/sbin'];

/**
 * Find `binary`, or install the Debian `pkg` that provides it when we are root. Returns
 * { path, note }: path null when it is not there and could not be had, note saying why.
 */
export function ensureTool(binary, pkg) {
  const found = findOnPath(binary, SBIN);
  if (found) return { path: found, note: null };
  if (process.getuid?.() !== 0) return { path: null, note: `${binary} is not installed and the bench is not root (apt-get install ${pkg})` };
  process.stderr.write(`bench: ${binary} absent, apt-get install ${pkg} …\n`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () =>
    spawnSync('apt-get', ['install', '-y', '-q', '--no-install-recommends', pkg], { env, stdio: ['ignore', 'ignore', 'pipe'], timeout: 300_000 });
  let r = install();
  if (r.status !== 0) {
    spawnSync('apt-get', ['update', '-q'], { env, stdio: 'ignore', timeout: 300_000 });
    r = install();
  }
  const path = findOnPath(binary, SBIN);
  if (r.status !== 0 || !path)
    return {
      path: null,
      note: `apt-get install ${pkg} failed: ${
        String(r.stderr ?? '')
          .trim()
          .split('\n')
          .pop() ?? r.error
      }`,
    };
  return { path, note: `installed ${pkg} with apt-get` };
}

export function toolVersion(path, args) {
  const r = spawnSync(path, args, { encoding: 'utf8' });
  return (
    `${r.stdout ?? ''}${r.stderr ?? ''}`
      .split('\n')
      .find((l) => l.trim())
      ?.trim() ?? 'unknown'
  );
}

// ---- wrk ----

// wrk's own summary goes to stdout; this script adds one JSON line we parse (latency in µs).
const WRK_REPORT = `done = function(s, latency, requests)
  io.write(string.format('\\n{"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50_us":%d,"p99_us":%d}\\n',
    s.requests, s.duration, s.bytes, s.errors.connect, s.errors.read, s.errors.write, s.errors.status, s.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
`;

/**
 * A load function (url, seconds, size, headers) → { rps, mbps, p99_ms, errors } over
 * `connections` keep-alive connections on one wrk thread. Only 2xx answers count; MB/s is body
 * bytes (size × good answers) per second, 10^6 bytes to the MB.
 */
export function wrkLoad(wrk, scratch, connections) {
  const script = join(scratch, 'report.lua');
  writeFileSync(script, WRK_REPORT);
  return async (url, seconds, size, headers = {}) => {
    const args = ['-t1', `-c${connections}`, `-d${seconds}s`, '--timeout', '10s', '--latency', '-s', script];
    for (const [k, v] of Object.entries(headers)) args.push('-H', `${k}: ${v}`);
    args.push(url);
    const r = await runWrk(wrk, args, seconds);
    const ok = r.requests - r.status; // wrk counts non-2xx/3xx answers in errors.status
    const secs = r.duration_us / 1e6;
    return {
      rps: ok / secs,
      mbps: (ok * size) / secs / 1e6,
      p50_ms: r.p50_us / 1000,
      p99_ms: r.p99_us / 1000,
      errors: r.connect + r.read + r.write + r.status + r.timeout,
    };
  };
}

/**
 * wrk over a cycle of paths (one request per path in turn, on every connection): the measure of a
 * client mirroring an export. Resolves to { rps, mbps (every byte wrk read, headers included),
 * errors }.
 */
export function wrkCycle(wrk, scratch, connections) {
  let n = 0;
  return async (baseUrl, paths, seconds) => {
    const script = join(scratch, `cycle-${n++}.lua`);
    writeFileSync(
      script,
      `${WRK_REPORT}
local paths = {${paths.map((p) => JSON.stringify(p)).join(',')}}
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
`,
    );
    const r = await runWrk(wrk, ['-t1', `-c${connections}`, `-d${seconds}s`, '--timeout', '10s', '-s', script, baseUrl], seconds);
    const secs = r.duration_us / 1e6;
    return { rps: (r.requests - r.status) / secs, mbps: r.bytes / secs / 1e6, errors: r.connect + r.read + r.write + r.status + r.timeout };
  };
}

/** Runs wrk with `args` (a script ending in WRK_REPORT) and resolves to the JSON line it printed. */
function runWrk(wrk, args, seconds) {
  return new Promise((resolve, reject) => {
    const child = track(wrk, args, { stdout: 'pipe' });
    const timer = setTimeout(() => child.kill('SIGKILL'), (seconds + 30) * 1000);
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      const line = out
        .split('\n')
        .reverse()
        .find((l) => l.startsWith('{"requests"'));
      if (code !== 0 || !line) return reject(new Error(`wrk exited with ${code}:\n${out}`));
      resolve(JSON.parse(line));
    });
  });
}

/** The same contract on autocannon (in process; it cannot push much more than ~50 MB/s of body). */
export function autocannonLoad(autocannon, connections) {
  return async (url, seconds, size, headers = {}) => {
    const instance = autocannon({ url, connections, duration: seconds, timeout: 10, headers });
    const guard = setTimeout(() => instance.stop(), (seconds + 30) * 1000);
    try {
      const r = await instance;
      const ok = r['2xx'];
      return {
        rps: ok / r.duration,
        mbps: (ok * size) / r.duration / 1e6,
        p50_ms: r.latency.p50,
        p99_ms: r.latency.p99,
        errors: r.errors + r.timeouts + r.non2xx,
      };
    } finally {
      clearTimeout(guard);
    }
  };
}

// ---- nginx ----

/**
 * Write an nginx config into `dir` serving `root` under /resources/files/ on 127.0.0.1:`port`:
 * one worker, sendfile, keep-alive, no access log; start it as a tracked child (daemon off, so the
 * master is our direct child and its worker is killed with it).
 */
export function startNginx(nginx, dir, root, port, logFile) {
  const asRoot = process.getuid?.() === 0;
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `# written by bench/run.mjs
worker_processes 1;
daemon off;
master_process on;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'nginx-error.log')} warn;
${asRoot ? 'user nobody nogroup;' : ''}
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 65;
  keepalive_requests 1000000;
  types { }
  default_type application/octet-stream;
  client_body_temp_path ${join(dir, 'nginx-body')};
  server {
    listen 127.0.0.1:${port};
    location /resources/files/ { alias ${root}/; }
  }
}
`,
  );
  const child = track(nginx, ['-p', dir, '-c', conf, '-e', join(dir, 'nginx-error.log')], { logFile, stdout: 'log', killGrandchildren: true });
  return child;
}

export { childPids };
