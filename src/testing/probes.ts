// Test-only probes that show what the served process can reach, bypassing every check the server
// makes (no resolver, no allow list). Never in the published package: package.json's `files` leaves
// out dist/testing/, and the CLI imports this module only when a RESOURCE_PLANE_TEST_* variable is
// set. They read nothing the caller did not name, and report on stderr only.
//
// RESOURCE_PLANE_TEST_UNCHECKED_READ=/abs/path: once the session serves, read that path from every
// kind of thread that opens files (the main thread, libuv's pool through fs and through the
// addon's AsyncWorkers, a worker_threads thread) and print the outcome of each as one JSON line:
// {"test_hook":"unchecked_read", ...}, with "ok" or the errno code. A confined server answers
// EACCES from all of them.
// RESOURCE_PLANE_TEST_UNCHECKED_CONNECT=HOST:PORT: open one TCP connection there, outside the
// allow list's check, and report the outcome in the same line.
// RESOURCE_PLANE_TEST_PAUSE_BEFORE_EXEC=/abs/path: a confined launch's first stage, its trace made,
// prints {"test_hook":"paused_before_exec"} and waits until that path exists before re-executing,
// so a test can act in the window between the two stages.
import { readFile } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { constants } from 'node:os';
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';
import * as native from '../addon/export.js';

export const UNCHECKED_READ_ENV = 'RESOURCE_PLANE_TEST_UNCHECKED_READ';
export const UNCHECKED_CONNECT_ENV = 'RESOURCE_PLANE_TEST_UNCHECKED_CONNECT';
/** Waits (see the header) until RESOURCE_PLANE_TEST_PAUSE_BEFORE_EXEC's path exists. */
export async function pauseBeforeExec(): Promise<void> {
  const path = process.env.RESOURCE_PLANE_TEST_PAUSE_BEFORE_EXEC;
  if (path === undefined) return;
  process.stderr.write(`${JSON.stringify({ test_hook: 'paused_before_exec' })}\n`);
  while (!existsSync(path)) await new Promise((resolve) => setTimeout(resolve, 10));
}

/** More concurrent operations than libuv has pool threads (4 unless UV_THREADPOOL_SIZE says), so each thread takes some. */
const CONCURRENT = 16;

const errnoName = (errno: number): string => Object.entries(constants.errno).find(([, n]) => n === Math.abs(errno))?.[0] ?? `errno ${errno}`;

function outcome(error: unknown): string {
  const e = error as { code?: unknown; errno?: unknown };
  if (typeof e?.code === 'string' && e.code !== 'IO_ERROR') return e.code;
  if (typeof e?.errno === 'number' && e.errno !== 0) return errnoName(e.errno);
  return String(e?.code ?? error);
}

function fromWorkerThread(path: string): Promise<string> {
  const source = `
    const { readFileSync } = require('node:fs');
    const { parentPort, workerData } = require('node:worker_threads');
    try { readFileSync(workerData); parentPort.postMessage('ok'); } catch (e) { parentPort.postMessage(e.code ?? String(e)); }`;
  return new Promise((resolve) => {
    const worker = new Worker(source, { eval: true, workerData: path });
    worker.once('message', (m: string) => resolve(m));
    worker.once('error', (e) => resolve(outcome(e)));
  });
}

function tcpConnect(target: string): Promise<string> {
  const colon = target.lastIndexOf(':');
  return new Promise((resolve) => {
    const socket = connect({ host: target.slice(0, colon), port: Number(target.slice(colon + 1)) });
    const done = (result: string) => {
      socket.destroy();
      resolve(result);
    };
    socket.setTimeout(5_000, () => done('ETIMEDOUT'));
    socket.once('connect', () => done('ok'));
    socket.once('error', (e) => done(outcome(e)));
  });
}

/** Runs the probes the environment asks for; a no-op otherwise. */
export async function runTestHooks(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const path = env[UNCHECKED_READ_ENV];
  const target = env[UNCHECKED_CONNECT_ENV];
  if (!path && !target) return;
  const line: Record<string, unknown> = { test_hook: 'unchecked_read', path: path ?? null };
  if (path) {
    const many = <T>(op: () => Promise<T>) => Promise.all(Array.from({ length: CONCURRENT }, op));
    try {
      readFileSync(path);
      line.main_thread = 'ok';
    } catch (e) {
      line.main_thread = outcome(e);
    }
    line.fs_pool = await many(() => readFile(path).then(() => 'ok', outcome));
    // The addon's own open, on its AsyncWorkers: the directory holding the path (O_RDONLY|O_DIRECTORY).
    line.native_pool = await many(() =>
      native.openDirectory(dirname(path)).then((fd) => {
        native.closeFd(fd);
        return 'ok';
      }, outcome),
    );
    line.worker_thread = await fromWorkerThread(path);
  }
  if (target) line.connect = await tcpConnect(target);
  process.stderr.write(`${JSON.stringify(line)}\n`);
}
