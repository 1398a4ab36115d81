// The launch has no window (issue 25): the first stage binds the port once and the confined
// image serves that same socket. From outside, over raw TCP, on real starts of `serve`:
//   - a client that connects and sends a GET in a tight loop from the moment serve is spawned gets
//     an answer on every connection that was accepted, and is never reset (the connections made
//     during start-up wait in the backlog for the confined image);
//   - a rival that tries to bind the port once serve holds it never gets it, through the re-exec.
import { spawn } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { defer } from '../helpers/cleanup.js';
import { CLI } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';
import { capsuleDir } from '../helpers/capsule.js';

const STARTS = Number(process.env.WINDOW_STARTS ?? 20);
/** Refused connects tolerated per start before the port is bound (a cap, not a clock). */
const MAX_ATTEMPTS = 500_000;

function capsule(): { workdir: string; records: string } {
  return { workdir: capsuleDir(), records: scratch() };
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

type Outcome = 'refused' | 'answered' | 'reset' | 'closed';

/** One connection: connect, send a GET, read until the status line (or the end). */
function attempt(port: number): Promise<{ outcome: Outcome; text: string }> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    let text = '';
    let connected = false;
    const done = (outcome: Outcome) => {
      socket.destroy();
      resolve({ outcome, text });
    };
    socket.once('connect', () => {
      connected = true;
      socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    });
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      if (text.includes('\r\n\r\n')) done('answered');
    });
    socket.once('error', (e: NodeJS.ErrnoException) => done(!connected && e.code === 'ECONNREFUSED' ? 'refused' : 'reset'));
    socket.once('end', () => done(text.includes('\r\n') ? 'answered' : 'closed'));
  });
}

function rivalBind(port: number): Promise<string> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
    s.listen({ host: '127.0.0.1', port, exclusive: true }, () => s.close(() => resolve('bound')));
  });
}

/** Spawns serve on `port`; `ready` flips once its ready line is out. */
function spawnServe(port: number, workdir: string, records: string) {
  const child = spawn(process.execPath, [CLI, 'serve', '--workdir', workdir, '--listen', `127.0.0.1:${port}`], {
    env: { ...process.env, RESOURCE_PLANE_RECORDS_DIR: records },
  });
  const state = { ready: false, exited: false, stderr: '' };
  child.stdout.on('data', (d: Buffer) => {
    if (d.toString().includes('\n')) state.ready = true;
  });
  child.stderr.on('data', (d: Buffer) => (state.stderr += d.toString()));
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      state.exited = true;
      resolve();
    }),
  );
  const stop = async () => {
    if (!state.exited) child.kill('SIGTERM');
    await exited;
  };
  defer(stop);
  return { state, stop };
}

describe('a start of serve has no window', () => {
  it(`answers every connection made from the moment it is spawned, never a reset (${STARTS} starts)`, async () => {
    const { workdir, records } = capsule();
    let answeredBeforeReady = 0;
    for (let start = 0; start < STARTS; start++) {
      const port = await freePort();
      const serve = spawnServe(port, workdir, records);
      const outcomes: Outcome[] = [];
      let refused = 0;
      // Until the server is ready and has answered once more after that.
      for (let answeredAfterReady = 0; answeredAfterReady < 1 && refused < MAX_ATTEMPTS && !serve.state.exited; ) {
        const wasReady = serve.state.ready;
        const { outcome, text } = await attempt(port);
        if (outcome === 'refused') {
          refused++;
          continue;
        }
        outcomes.push(outcome);
        expect(outcome, `start ${start}: ${text} ${serve.state.stderr}`).toBe('answered');
        expect(text).toMatch(/^HTTP\/1\.1 200 /);
        if (wasReady) answeredAfterReady++;
        else answeredBeforeReady++;
      }
      expect(serve.state.exited, serve.state.stderr).toBe(false);
      expect(outcomes.length).toBeGreaterThan(0);
      await serve.stop();
    }
    // Connections made during start-up (before the ready line) were among them, and answered.
    expect(answeredBeforeReady).toBeGreaterThan(0);
  }, 240_000);

  it(`keeps its port from the first bind on: a rival never binds it (${STARTS} starts)`, async () => {
    const { workdir, records } = capsule();
    let rivalTries = 0;
    for (let start = 0; start < STARTS; start++) {
      const port = await freePort();
      const serve = spawnServe(port, workdir, records);
      // Wait until serve holds the port (a connect is accepted into its backlog)...
      let held = false;
      for (let i = 0; i < MAX_ATTEMPTS && !held && !serve.state.exited; i++) {
        const s = await new Promise<boolean>((resolve) => {
          const c = connect({ host: '127.0.0.1', port });
          c.once('connect', () => {
            c.destroy();
            resolve(true);
          });
          c.once('error', () => resolve(false));
        });
        held = s;
      }
      expect(held, serve.state.stderr).toBe(true);
      // ...then bind against it through the re-exec until it is ready, and once more after.
      for (let afterReady = 0; afterReady < 2 && !serve.state.exited; ) {
        if (serve.state.ready) afterReady++;
        expect(await rivalBind(port), `start ${start}`).toBe('EADDRINUSE');
        rivalTries++;
        // A refused bind errors on the next tick: let I/O (serve's ready line) in between tries.
        await new Promise((resolve) => setImmediate(resolve));
      }
      expect(serve.state.exited, serve.state.stderr).toBe(false);
      await serve.stop();
    }
    expect(rivalTries).toBeGreaterThan(STARTS * 2);
  }, 240_000);
});
