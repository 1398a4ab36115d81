// Every process the bench starts goes through here: it is tracked from spawn to exit and killed,
// by its own PID, when the bench ends however it ends (normal exit, an exception, Ctrl-C, SIGTERM).
// nginx's master forks its worker, which the master's death does not end: the worker PIDs are read
// from /proc and killed too.
import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { get } from 'node:http';

const children = new Set();
const cleanups = [];

/** /proc/<pid>/task/<pid>/children: the direct children of one process (nginx's workers). */
export function childPids(pid) {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function killNow() {
  for (const child of children) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const grandchildren = child.killGrandchildren ? childPids(child.pid) : [];
    try {
      child.kill('SIGKILL');
    } catch {
      /* gone */
    }
    for (const pid of grandchildren) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
  children.clear();
  for (const fn of cleanups.splice(0)) {
    try {
      fn();
    } catch {
      /* best effort */
    }
  }
}

process.on('exit', killNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    process.stderr.write(`bench: ${signal}, stopping every child\n`);
    process.exit(130);
  });
}
process.on('uncaughtException', (error) => {
  process.stderr.write(`bench: ${error?.stack ?? error}\n`);
  process.exit(1);
});

/** Run `fn` at exit, after the children are killed (the scratch directory's removal). */
export function atExit(fn) {
  cleanups.push(fn);
}

/** Spawn and track. `opts.logFile` receives stderr (and stdout when `opts.stdout` is 'log'). */
export function track(command, args, { logFile, stdin = 'ignore', stdout = 'pipe', env = process.env, killGrandchildren = false } = {}) {
  const log = logFile ? openSync(logFile, 'a') : 'ignore';
  const child = spawn(command, args, {
    stdio: [stdin, stdout === 'log' ? log : stdout, log],
    env,
  });
  if (logFile) closeSync(log);
  child.killGrandchildren = killGrandchildren;
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** SIGTERM by PID, SIGKILL after `ms`. Resolves to the exit code (or signal name). */
export function stop(child, ms = 5_000) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode ?? child.signalCode);
  return new Promise((resolve) => {
    const grandchildren = child.killGrandchildren ? childPids(child.pid) : [];
    const timer = setTimeout(() => {
      try {
        child.kill('SIGKILL');
      } catch {
        /* gone */
      }
      for (const pid of grandchildren) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* gone */
        }
      }
    }, ms);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve(code ?? signal);
    });
    child.kill('SIGTERM');
  });
}

/**
 * Resolve with the first line `child` prints on stdout, parsed as JSON, and the time from `t0`
 * (a performance.now() taken just before spawn) to that line.
 */
export function firstJsonLine(child, label, t0, timeoutMs = 15_000) {
  return new Promise((resolve, reject) => {
    let buffered = '';
    const timer = setTimeout(() => done(new Error(`${label}: no ready line within ${timeoutMs} ms`)), timeoutMs);
    const onExit = (code, signal) => done(new Error(`${label} exited (${code ?? signal}) before its ready line`));
    const onData = (chunk) => {
      buffered += chunk;
      const end = buffered.indexOf('\n');
      if (end < 0) return;
      const ms = performance.now() - t0;
      const line = buffered.slice(0, end);
      try {
        done(null, { line: JSON.parse(line), ms });
      } catch (error) {
        done(new Error(`${label}: bad ready line ${JSON.stringify(line)}: ${error.message}`));
      }
    };
    function done(error, value) {
      clearTimeout(timer);
      child.off('exit', onExit);
      child.stdout.off('data', onData);
      child.stdout.resume(); // keep draining whatever else comes
      if (error) reject(error);
      else resolve(value);
    }
    child.once('exit', onExit);
    child.stdout.on('data', onData);
  });
}

/** One GET on a fresh connection; the whole body buffered. */
export function fetchOnce(url, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = get(url, { agent: false, timeout: 30_000, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`timeout fetching ${url}`)));
    req.on('error', reject);
  });
}

/** VmRSS of a live process, in bytes. */
export function rssBytes(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
