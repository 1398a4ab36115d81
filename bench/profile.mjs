// `npm run bench:profile`: where the time of a 1 KiB read goes, for whoever works on the hot path.
// On one 1 KiB file, under wrk -t1 -c32 (PROFILE_SECONDS each, default 6, after a 2 s warm-up):
//   1. this server (`serve --containment sealed`, trace on), the Fastify contract floor
//      (bench/peer-contract.mjs) and the raw node:http in-memory server:
//      CPU microseconds per request and context switches per request, main thread vs the other
//      threads (libuv pool, V8 platform), from /proc/<pid>/task/*/{stat,status};
//   2. this server under `node --cpu-prof`: top self time by function and by module. V8's sampler
//      ticks on wall time, so a native call during which the thread is preempted (waking a pool
//      thread, or wrk through the socket) shows as that call's self time;
//   3. with `perf` on PATH and root: this server under `perf record -g` (node --perf-basic-prof),
//      main-thread on-CPU samples grouped into phases of a request by their call chains.
// Nothing here is a pass/fail measure; `npm run bench` is.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { atExit, fetchOnce, firstJsonLine, sleep, stop, track } from './children.mjs';
import { ensureTool, findOnPath } from './tools.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, '..', 'dist', 'cli', 'main.js');
const SECONDS = Number(process.env.PROFILE_SECONDS ?? 6);
const say = (m) => process.stderr.write(`profile: ${m}\n`);

const wrk = ensureTool('wrk', 'wrk').path;
if (!wrk) {
  say('wrk is needed (apt-get install wrk)');
  process.exit(1);
}
const scratch = mkdtempSync(join(tmpdir(), 'rp-profile-'));
atExit(() => rmSync(scratch, { recursive: true, force: true }));
chmodSync(scratch, 0o755);
const capsule = join(scratch, 'capsule');
mkdirSync(join(capsule, 'out'), { recursive: true });
writeFileSync(join(capsule, 'murmur.yaml'), 'name: profile\nversion: "0.1.0"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 1Mi\n');
const bytes = randomBytes(1024);
writeFileSync(join(capsule, 'out', 'small.bin'), bytes);
const etag = `"sha256:${createHash('sha256').update(bytes).digest('hex')}"`;
const env = { ...process.env, RESOURCE_PLANE_RECORDS_DIR: join(scratch, 'records') };

async function start(nodeFlags, args, label) {
  const child = track(process.execPath, [...nodeFlags, ...args], { logFile: join(scratch, `${label}.log`), env });
  const { line } = await firstJsonLine(child, label, performance.now());
  const url = `${line.url}/resources/files/small.bin`;
  const res = await fetchOnce(url);
  if (res.status !== 200 || !res.body.equals(bytes)) throw new Error(`${label}: wrong answer`);
  if (label.startsWith('ours') && res.headers.etag !== etag) throw new Error(`${label}: wrong etag`);
  return { child, url };
}
const ours = (flags, n, extra = []) =>
  start(flags, [CLI, 'serve', '--workdir', capsule, '--containment', 'sealed', '--trace', join(scratch, `trace-${n}.jsonl`), ...extra], `ours-${n}`);

function wrkRun(url, seconds) {
  const r = spawnSync(wrk, ['-t1', '-c32', `-d${seconds}s`, url], { encoding: 'utf8' });
  return { requests: Number(/(\d+) requests in/.exec(r.stdout)?.[1] ?? 0), rps: Number(/Requests\/sec:\s+(\S+)/.exec(r.stdout)?.[1] ?? 0) };
}

function threads(pid) {
  const out = {};
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const st = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      out[tid] = {
        user: Number(f[11]) / 100,
        sys: Number(f[12]) / 100,
        vol: Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(st)[1]),
        invol: Number(/nonvoluntary_ctxt_switches:\s+(\d+)/.exec(st)[1]),
      };
    } catch {
      /* thread ended */
    }
  }
  return out;
}

async function perRequest(label, server) {
  wrkRun(server.url, 2);
  const a = threads(server.child.pid);
  const { requests, rps } = wrkRun(server.url, SECONDS);
  const b = threads(server.child.pid);
  const g = { main: { user: 0, sys: 0, vol: 0, invol: 0 }, others: { user: 0, sys: 0, vol: 0, invol: 0 } };
  for (const tid of Object.keys(b)) {
    if (!a[tid]) continue;
    const k = Number(tid) === server.child.pid ? 'main' : 'others';
    for (const f of ['user', 'sys', 'vol', 'invol']) g[k][f] += b[tid][f] - a[tid][f];
  }
  const line = (k) =>
    `${k.padEnd(6)} CPU ${(((g[k].user + g[k].sys) * 1e6) / requests).toFixed(1).padStart(5)} µs/req (user ${((g[k].user * 1e6) / requests).toFixed(1)}, sys ${((g[k].sys * 1e6) / requests).toFixed(1)}); context switches/req: voluntary ${(g[k].vol / requests).toFixed(2)}, involuntary ${(g[k].invol / requests).toFixed(2)}`;
  console.log(`\n${label}: ${Math.round(rps)} req/s over ${SECONDS} s`);
  console.log(`  ${line('main')}`);
  console.log(`  ${line('others')}`);
}

// ---- V8 profile analysis ----
function analyseCpuProfile(file, top = 25) {
  const p = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map();
  for (let i = 0; i < p.samples.length; i++) self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0));
  const fns = new Map();
  const modules = new Map();
  let busy = 0;
  for (const [id, t] of self) {
    const cf = byId.get(id).callFrame;
    if (cf.functionName === '(idle)') continue;
    busy += t;
    const url = cf.url.replace(/^file:\/\//, '').replace(/^.*\/(dist|node_modules)\//, '$1/');
    const fn = `${cf.functionName || '(anonymous)'}${url ? `  ${url}:${cf.lineNumber + 1}` : ''}`;
    fns.set(fn, (fns.get(fn) ?? 0) + t);
    const mod = !url
      ? cf.functionName.startsWith('(')
        ? cf.functionName
        : 'native code called from JS (no frame of its own)'
      : url.startsWith('dist/')
        ? `ours: ${url.split(':')[0]}`
        : url.startsWith('node_modules/')
          ? `dependency: ${url.split('/')[1]}`
          : url.startsWith('node:')
            ? 'node core'
            : url;
    modules.set(mod, (modules.get(mod) ?? 0) + t);
  }
  const show = (m, n) =>
    [...m]
      .sort((x, y) => y[1] - x[1])
      .slice(0, n)
      .map(([k, v]) => `  ${((100 * v) / busy).toFixed(1).padStart(5)}%  ${k}`)
      .join('\n');
  console.log(`\nV8 CPU profile (main thread, ${(busy / 1e6).toFixed(1)} s not idle): self time by module`);
  console.log(show(modules, 15));
  console.log('\nself time by function');
  console.log(show(fns, top));
}

// ---- perf phases ----
const PHASES = [
  ['GC', /v8::internal::(Heap::|Scavenger|MarkCompact|MinorMarkSweep|ConcurrentMarking|IncrementalMarking)/],
  ['trace: event id (uuid v7, randomFillSync)', /newEventId|uuid|randomFill|JS:\*v7 |JS:\*rng /],
  ['trace: render line (JSON.stringify + replacer, bounding, redaction)', /JS:\*render |JsonStringif|boundedField|redactHandles/],
  ['trace: fs.write (queued on the libuv pool)', /node::fs::WriteBuffer|uv_fs_write|JS:\*write node:fs/],
  ['trace: completion (fs callback, promise)', /node::fs::FSReqCallback|node::fs::AfterInteger/],
  ['native read: call (options, uv_queue_work)', /rp::Read\b|napi_queue_async_work/],
  [
    'native read: completion (result, Buffer, promise)',
    /Napi::AsyncWorker::OnWorkComplete|Napi::AsyncWorker::OnAsyncWorkComplete|ReadWorker::Result|PromiseWorker/,
  ],
  ['socket write (the response)', /node::StreamBase::Write|node::LibuvStreamWrap::DoTryWrite|uv_try_write|__GI___writev|uv_write/],
  ['socket read + HTTP parse', /llhttp|parserOnHeadersComplete|parserOnIncoming|uv__read|node::LibuvStreamWrap::OnUvRead/],
  ['epoll / event loop', /uv__io_poll|epoll_wait|uv__async_io/],
  [
    'ours: http/ handlers (headers, reply, and whatever the JIT inlined into them)',
    /http\/reply\.js|http\/files\.js|setHeader|_storeHeader|checkInvalidHeaderChar|writeHead/,
  ],
  ['ours: export-view, budget, paths', /export-view\.js|budget\.js|paths\.js|dist\/native\.js/],
  ['fastify routing + reply', /fastify\/lib|find-my-way|planes\/plugin\.js/],
  ['node http objects + streams', /node:_http|node:internal\/streams|node:events|node:net/],
  ['promises, nextTick, microtasks', /RunMicrotasks|processTicksAndRejections|PromiseFulfill|AsyncFunction/],
];

async function perfPhases(perf) {
  // Unconfined: under Landlock, V8 cannot write the /tmp/perf-<pid>.map that --perf-basic-prof
  // keeps open, and the process dies (SIGTRAP) before its ready line.
  const s = await ours(['--perf-basic-prof'], 'perf', ['--no-landlock']);
  wrkRun(s.url, 2);
  const data = join(scratch, 'perf.data');
  const load = track(wrk, ['-t1', '-c32', `-d${SECONDS + 2}s`, s.url], { stdout: 'pipe' });
  let out = '';
  load.stdout.on('data', (c) => {
    out += c;
  });
  await sleep(1000);
  spawnSync(perf, ['record', '-F', '2999', '-g', '-t', String(s.child.pid), '-o', data, '--', 'sleep', String(SECONDS)], { stdio: 'ignore' });
  await new Promise((r) => (load.exitCode !== null ? r() : load.once('exit', r)));
  await stop(s.child);
  const script = execFileSync(perf, ['script', '-i', data, '-F', 'ip,sym'], { encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'ignore'] });
  const samples = script
    .split('\n\n')
    .map((b) =>
      b
        .split('\n')
        .map((l) => l.trim().replace(/^[0-9a-f]+ /, ''))
        .filter(Boolean),
    )
    .filter((x) => x.length);
  const counts = new Map();
  let switched = 0;
  for (const frames of samples) {
    let phase = null;
    for (const f of frames) {
      for (const [name, re] of PHASES)
        if (re.test(f)) {
          phase = name;
          break;
        }
      if (phase) break;
    }
    if (/finish_task_switch|try_to_wake_up|_raw_spin_unlock_irqrestore/.test(frames.slice(0, 3).join(' '))) switched++;
    counts.set(phase ?? 'other', (counts.get(phase ?? 'other') ?? 0) + 1);
  }
  console.log(`\nperf, main thread on CPU (${samples.length} samples at 2999 Hz; wrk: ${/Requests\/sec:\s+(\S+)/.exec(out)?.[1]} req/s under perf)`);
  for (const [k, v] of [...counts].sort((a, b) => b[1] - a[1])) console.log(`  ${((100 * v) / samples.length).toFixed(1).padStart(5)}%  ${k}`);
  console.log(`  (${((100 * switched) / samples.length).toFixed(1)}% of all samples are in the scheduler: a context switch or a wake-up of another thread.`);
  console.log('   JS functions the JIT inlined have no frame of their own: small JS phases move between runs; native ones do not.)');
}

try {
  {
    const s = await ours([], 'plain');
    await perRequest('ours, 1 KiB read', s);
    await stop(s.child);
  }
  {
    const s = await start([], [join(HERE, 'peer-contract.mjs'), join(capsule, 'out'), join(scratch, 'trace-contract.jsonl')], 'contract');
    await perRequest('Fastify contract floor (bench/peer-contract.mjs), 1 KiB read', s);
    await stop(s.child);
  }
  {
    const s = await start([], [join(HERE, 'peer-memory.mjs'), join(capsule, 'out')], 'memory');
    await perRequest('raw node:http from memory, 1 KiB', s);
    await stop(s.child);
  }
  {
    const dir = join(scratch, 'cpuprof');
    // Unconfined: a Landlock domain would not let the profile be written where V8 puts it.
    const s = await ours(['--cpu-prof', `--cpu-prof-dir=${dir}`, '--cpu-prof-interval', '200'], 'cpuprof', ['--no-landlock']);
    wrkRun(s.url, 2);
    wrkRun(s.url, SECONDS);
    await stop(s.child);
    const [file] = readdirSync(dir);
    analyseCpuProfile(join(dir, file));
  }
  const perf = findOnPath('perf', ['/usr/sbin']);
  if (perf && process.getuid?.() === 0) await perfPhases(perf);
  else console.log('\n(perf not on PATH or not root: no perf phases)');
} catch (error) {
  say(error?.stack ?? String(error));
  process.exit(1);
}
