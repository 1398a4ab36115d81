// systemd socket activation and readiness (issue 25), with no systemd as PID 1:
// `systemd-socket-activate` (the systemd package) binds the sockets, passes them as LISTEN_FDS
// and spawns serve on the first connection, which serve then answers through the socket it was
// given, confined with Landlock, having bound nothing itself. Readiness: a datagram socket this
// test binds (python3) is NOTIFY_SOCKET, and serve sends it READY=1 once it serves and
// STOPPING=1 when it stops.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { activatedListeners, openNotifySocket } from '../../src/launch/sockets.js';
import type { Confinement } from '../../src/session/confinement.js';
import { landlockAbi } from '../../src/addon/landlock.js';
import { defer } from '../helpers/cleanup.js';
import { CLI, runCliAsync, startServe } from '../helpers/cli.js';
import { readTrace } from '../helpers/http.js';
import { scratch } from '../helpers/tree.js';
import { capsuleDir } from '../helpers/capsule.js';

const ABI = landlockAbi().abi;
const ACTIVATE = '/usr/bin/systemd-socket-activate';
const HAVE_ACTIVATE = existsSync(ACTIVATE);
const HAVE_PYTHON = spawnSync('python3', ['-c', 'import socket'], { stdio: 'ignore' }).status === 0;

function capsule(): { workdir: string; trace: string } {
  return { workdir: capsuleDir(['out/a.txt: hello']), trace: join(scratch(), 'trace.jsonl') };
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

/** One GET over raw TCP or a unix socket; resolves with the whole answer. */
function get(target: { port: number } | { path: string }, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = 'port' in target ? connect({ host: '127.0.0.1', port: target.port }) : connect({ path: target.path });
    let text = '';
    socket.once('connect', () => socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`));
    socket.on('data', (d: Buffer) => (text += d.toString()));
    socket.once('end', () => resolve(text));
    socket.once('error', reject);
  });
}

/** systemd-socket-activate with `listen` addresses, running serve; resolves once its socket(s) accept. */
async function activate(listen: string[], fdnames: string | null, serveArgs: string[], env: NodeJS.ProcessEnv = {}) {
  const args = [...listen.flatMap((l) => ['-l', l]), ...(fdnames ? [`--fdname=${fdnames}`] : []), '--', process.execPath, CLI, 'serve', ...serveArgs];
  const child = spawn(ACTIVATE, args, { env: { ...process.env, ...env } });
  let stderr = '';
  let stdout = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  defer(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  });
  // systemd-socket-activate says when it listens ("Listening on ..."), once per socket.
  for (let i = 0; i < 10_000 && (stderr.match(/Listening on/g) ?? []).length < listen.length && child.exitCode === null; i++) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return { child, stderr: () => stderr, stdout: () => stdout };
}

describe.skipIf(!HAVE_ACTIVATE)('systemd socket activation', () => {
  it.skipIf(ABI === 0)('one TCP socket: serve answers through it, confined, binding nothing', async () => {
    const { workdir, trace } = capsule();
    const port = await freePort();
    const a = await activate([`127.0.0.1:${port}`], null, ['--workdir', workdir, '--trace', trace]);
    // The first connection spawns serve, and is answered by it.
    const answer = await get({ port }, '/resources/files/a.txt');
    expect(answer, a.stderr()).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer).toContain('hello');
    const start = readTrace(trace)[0]!;
    const confinement = start.confinement as Confinement;
    expect(confinement.applied).toBe(true);
    if (ABI >= 4) expect(confinement.bind_ports).toEqual([]);
    expect(JSON.parse(a.stdout().split('\n')[0]!).url).toBe(`http://127.0.0.1:${port}`);
  });

  it.skipIf(ABI === 0)('two named sockets, peer (TCP) and operator (unix): each plane on its own', async () => {
    const { workdir, trace } = capsule();
    const port = await freePort();
    const dir = join(scratch(), 'run');
    mkdirSync(dir, { mode: 0o700 });
    const sock = join(dir, 'operator.sock');
    const a = await activate([`127.0.0.1:${port}`, sock], 'peer:operator', ['--workdir', workdir, '--trace', trace]);
    // The operator plane is on the unix socket only; the peer listener refuses /resources/files.
    const operator = await get({ path: sock }, '/resources/files/a.txt');
    expect(operator, a.stderr()).toMatch(/^HTTP\/1\.1 200 /);
    expect(operator).toContain('hello');
    const peer = await get({ port }, '/resources/files/a.txt');
    expect(peer).toMatch(/^HTTP\/1\.1 404 /);
    expect((readTrace(trace)[0]!.confinement as Confinement).applied).toBe(true);
    const ready = JSON.parse(a.stdout().split('\n')[0]!);
    expect(ready.operator_url).toBe(`unix:${sock}`);
  });

  it('three sockets named peer:operator:metrics: /metrics is served on its own socket only', async () => {
    const { workdir, trace } = capsule();
    const port = await freePort();
    const metricsPort = await freePort();
    const dir = join(scratch(), 'run');
    mkdirSync(dir, { mode: 0o700 });
    const sock = join(dir, 'operator.sock');
    const a = await activate([`127.0.0.1:${port}`, sock, `127.0.0.1:${metricsPort}`], 'peer:operator:metrics', ['--workdir', workdir, '--trace', trace]);
    const metrics = await get({ port: metricsPort }, '/metrics');
    expect(metrics, a.stderr()).toMatch(/^HTTP\/1\.1 200 /);
    expect(metrics).toContain('resource_plane_requests_total');
    expect(await get({ path: sock }, '/metrics')).toMatch(/^HTTP\/1\.1 404 /);
    expect(await get({ port: metricsPort }, '/resources/files/a.txt')).toMatch(/^HTTP\/1\.1 404 /);
    expect(JSON.parse(a.stdout().split('\n')[0]!).metrics_url).toBe(`http://127.0.0.1:${metricsPort}`);
  });

  it('refuses --operator-listen beside handed-over sockets', async () => {
    const { workdir, trace } = capsule();
    const port = await freePort();
    const a = await activate([`127.0.0.1:${port}`], null, ['--workdir', workdir, '--trace', trace, '--operator-listen', '127.0.0.1:0']);
    await get({ port }, '/').catch(() => '');
    await new Promise<void>((resolve) => a.child.once('exit', () => resolve()));
    expect(a.stderr()).toContain('the listening sockets come from systemd (LISTEN_FDS)');
    expect(existsSync(trace)).toBe(false);
  });
});

/**
 * A parent that was itself socket-activated and did not clear the variables: serve is spawned by
 * systemd-socket-activate through `env -u LISTEN_PID` (env execs, so the PID stays; only the
 * variable is gone), so fd 3 is a listening socket and LISTEN_FDS=1 says so, but nothing says the
 * hand-over is for this process. sd_listen_fds ignores such variables; so must serve.
 */
describe.skipIf(!HAVE_ACTIVATE)('a stray LISTEN_FDS (no LISTEN_PID) is not a hand-over', () => {
  for (const [name, extra] of [
    ['without --listen (confined)', []],
    ['with --listen (unconfined)', ['--listen', '127.0.0.1:0', '--no-landlock']],
  ] as const) {
    it(`${name}: serve binds its own listener, and fd 3 is left alone`, async () => {
      const { workdir, trace } = capsule();
      const port = await freePort();
      const args = [
        `-l`,
        `127.0.0.1:${port}`,
        '--',
        '/usr/bin/env',
        '-u',
        'LISTEN_PID',
        process.execPath,
        CLI,
        'serve',
        '--workdir',
        workdir,
        '--trace',
        trace,
        ...extra,
      ];
      const child = spawn(ACTIVATE, args, { env: process.env });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      defer(async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        await exited;
      });
      for (let i = 0; i < 10_000 && !stderr.includes('Listening on') && child.exitCode === null; i++) await new Promise((resolve) => setTimeout(resolve, 5));
      // The first connection spawns serve; it is never answered (nobody serves fd 3), so it is dropped.
      const trigger = connect({ host: '127.0.0.1', port });
      trigger.on('error', () => undefined);
      defer(() => {
        trigger.destroy();
      });
      for (let i = 0; i < 10_000 && !stdout.includes('\n') && child.exitCode === null; i++) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(stderr).not.toContain('come from systemd');
      const ready = JSON.parse(stdout.split('\n')[0]!) as { url: string };
      // Its own listener, not the one on fd 3.
      expect(ready.url).not.toBe(`http://127.0.0.1:${port}`);
      const answer = await get({ port: Number(new URL(ready.url).port) }, '/resources/files/a.txt');
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    });
  }
});

describe('the hand-over variables', () => {
  it('count only with LISTEN_PID equal to this process, and are removed either way', () => {
    for (const env of [
      { LISTEN_FDS: '1' },
      { LISTEN_FDS: '1', LISTEN_PID: String(process.pid + 1), LISTEN_FDNAMES: 'peer' },
      { LISTEN_FDS: '1', LISTEN_PID: '' },
    ]) {
      const copy: NodeJS.ProcessEnv = { ...env, OTHER: 'kept' };
      expect(activatedListeners(copy, process.pid)).toBeNull();
      expect(copy).toEqual({ OTHER: 'kept' });
    }
  });

  it('a vsock NOTIFY_SOCKET is said to be unsupported, and the launch goes on without readiness', () => {
    const said: string[] = [];
    expect(openNotifySocket({ NOTIFY_SOCKET: 'vsock:2:9999' }, (why) => said.push(why))).toBeNull();
    expect(said).toHaveLength(1);
    expect(said[0]).toMatch(/NOTIFY_SOCKET 'vsock:2:9999' is an AF_VSOCK address, which this server does not support/);
  });
});

/** A datagram socket bound by python3 at `path`, printing each message it receives as a line. */
function notifyReceiver(path: string) {
  const script = `import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print('bound', flush=True)
while True:
    data = s.recv(4096)
    print(data.decode().replace('\\n', ' '), flush=True)`;
  const child = spawn('python3', ['-c', script, path]);
  defer(() => {
    child.kill('SIGKILL');
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const until = async (text: string) => {
    for (let i = 0; i < 20_000 && !out.includes(text); i++) await new Promise((resolve) => setTimeout(resolve, 5));
    return out;
  };
  return { until, lines: () => out.split('\n').filter(Boolean) };
}

describe.skipIf(!HAVE_PYTHON)('readiness with NOTIFY_SOCKET', () => {
  for (const [name, extra] of [
    ['confined', []],
    ['with --no-landlock', ['--no-landlock']],
  ] as const) {
    it(`${name}: READY=1 once it serves, STOPPING=1 when it stops`, async () => {
      const { workdir, trace } = capsule();
      const path = join(scratch(), 'notify.sock');
      const receiver = notifyReceiver(path);
      await receiver.until('bound');
      const s = await startServe(['--workdir', workdir, '--trace', trace, ...extra], { NOTIFY_SOCKET: path });
      expect(await receiver.until('READY=1')).toContain('READY=1');
      // It really serves by then.
      const r = await runCliAsync(['ls', s.ready.url]);
      expect(r.stdout).toContain('a.txt');
      s.child.kill('SIGTERM');
      await s.exited;
      await receiver.until('STOPPING=1');
      expect(receiver.lines()).toEqual(['bound', 'READY=1', 'STOPPING=1']);
    });
  }

  it('a vsock NOTIFY_SOCKET (systemd 253+): serve starts, serves, and says readiness is not sent', async () => {
    const { workdir, trace } = capsule();
    const s = await startServe(['--workdir', workdir, '--trace', trace], { NOTIFY_SOCKET: 'vsock:2:9999' });
    defer(async () => {
      s.child.kill('SIGTERM');
      await s.exited;
    });
    const r = await runCliAsync(['ls', s.ready.url]);
    expect(r.stdout).toContain('a.txt');
    expect(s.stderr()).toContain("NOTIFY_SOCKET 'vsock:2:9999' is an AF_VSOCK address, which this server does not support");
  });

  it('an unreachable NOTIFY_SOCKET fails the launch before anything exists', async () => {
    const { workdir, trace } = capsule();
    const r = await runCliAsync(['serve', '--workdir', workdir, '--trace', trace], { NOTIFY_SOCKET: join(scratch(), 'nobody.sock') });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('NOTIFY_SOCKET');
    expect(existsSync(trace)).toBe(false);
  });
});
