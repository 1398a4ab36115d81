// A confined `resource-plane serve` (src/launch/confine-plan.ts, confine-apply.ts), attacked from inside: the test-only
// hooks (src/testing/probes.ts) read a file outside the workdir without any check, from every
// kind of thread that opens files, and open a TCP connection to a port no allow list names. All of
// it fails with EACCES, while the same server still serves a file over a real socket, records its
// trace and lands a fetched file in peer-in. The same hooks against --no-landlock succeed, which
// is what proves they can fail.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { callTool, launch as launchInProcess, parseManifest } from '../../src/index.js';
import type { Confinement } from '../../src/session/confinement.js';
import { HANDOFF_ENV } from '../../src/launch/confine-apply.js';
import { UNCHECKED_CONNECT_ENV, UNCHECKED_READ_ENV } from '../../src/testing/probes.js';
import { landlockAbi } from '../../src/addon/landlock.js';
import { defer, reap } from '../helpers/cleanup.js';
import { startServe, type Served } from '../helpers/cli.js';
import { startMcpServe } from '../helpers/mcp.js';
import { rawGet, readTrace } from '../helpers/http.js';
import { scratch } from '../helpers/tree.js';

const ABI = landlockAbi().abi;

/** A file the server has no business reading: outside its workdir, beside nothing it is given. */
function secretOutside(): string {
  return join(scratch(['secret.txt: HOST-ONLY-SECRET']), 'secret.txt');
}

/** A TCP listener in this process on a port no manifest names: where an unchecked connect goes. */
async function strayListener(): Promise<number> {
  const server: Server = createServer((s) => s.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  defer(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as { port: number }).port;
}

interface HookLine {
  test_hook: string;
  main_thread: string;
  fs_pool: string[];
  native_pool: string[];
  worker_thread: string;
  connect: string;
}

function hookLine(stderr: string): HookLine {
  const line = stderr.split('\n').find((l) => l.startsWith('{"test_hook":"unchecked_read"'));
  if (!line) throw new Error(`no test-hook line on stderr:\n${stderr}`);
  return JSON.parse(line) as HookLine;
}

function noNewPrivs(status: string): string {
  return /^NoNewPrivs:\s*(\d)/m.exec(status)?.[1] ?? '?';
}

/** no_new_privs of every thread of `pid`, read from outside: set only with the domain, inherited by new threads. */
function threadFlags(pid: number): string[] {
  const flags: string[] = [];
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      flags.push(noNewPrivs(readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8')));
    } catch (error) {
      // A thread that ended between the listing and the read (the hook's worker thread, say).
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  return flags;
}

describe.skipIf(ABI === 0)('a confined serve', () => {
  it('fails every unchecked read outside the workdir with EACCES, from every thread, and still serves, traces and lands', async () => {
    // The peer that hands a file over: in this process (a library launch, unconfined).
    const peerDir = scratch(['out/report.md: the findings']);
    const peer = await launchInProcess({
      workdir: peerDir,
      manifest: parseManifest(
        'name: reporter\nversion: "1"\nexports:\n  peer_files:\n    root: out/\ncapabilities:\n  network:\n    allow:\n      - localhost\n',
      ),
      tracePath: join(scratch(), 'peer.jsonl'),
    });
    defer(() => peer.stop());
    const peerAddr = new URL(peer.server.advertisedUrl).host;

    // The confined reader, spawned as a runtime spawns it, driven over MCP on stdio.
    const workdir = scratch(['out/hello.txt: hello from inside']);
    writeFileSync(
      join(workdir, 'murmur.yaml'),
      `name: reader\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\ncapabilities:\n  peer_fetch:\n    allow:\n      - ${peerAddr}\n`,
    );
    const trace = join(scratch(), 'trace.jsonl');
    const secret = secretOutside();
    const strayPort = await strayListener();
    const mcp = await startMcpServe(['--workdir', workdir, '--trace', trace], {
      env: { [UNCHECKED_READ_ENV]: secret, [UNCHECKED_CONNECT_ENV]: `127.0.0.1:${strayPort}` },
    });
    const { client, ready, pid } = mcp;

    // The ruleset it recorded before serving anything.
    const start = readTrace(trace)[0]!;
    const confinement = start.confinement as Confinement;
    expect(confinement).toMatchObject({ applied: true, landlock_abi: ABI, reason: null, skipped: [] });
    expect(confinement.read).toContain(workdir);
    expect(confinement.read.some((p) => secret.startsWith(`${p}/`))).toBe(false);
    expect(confinement.write).toEqual([trace, join(workdir, 'peer-in')]);
    if (ABI >= 4) {
      // The sockets are bound before confinement and inherited: the domain grants no bind at all.
      expect(confinement.bind_ports).toEqual([]);
      expect(confinement.connect_ports).toEqual([Number(new URL(peer.server.advertisedUrl).port)]);
    }

    // From inside: the main thread, libuv's pool through fs and through the addon's workers, and a
    // worker thread all meet EACCES; so does a connect to a port the allow list does not name.
    const hook = hookLine(mcp.stderr());
    expect(hook.main_thread).toBe('EACCES');
    expect(hook.fs_pool).toEqual(Array(16).fill('EACCES'));
    expect(hook.native_pool).toEqual(Array(16).fill('EACCES'));
    expect(hook.worker_thread).toBe('EACCES');
    if (ABI >= 4) expect(hook.connect).toBe('EACCES');

    // From outside: one process (the re-exec kept the PID), and every one of its threads carries
    // no_new_privs, which this process does not have and which the server sets only on the thread
    // that enters the domain, right before it does: each thread descends from that one.
    expect(noNewPrivs(readFileSync('/proc/self/status', 'utf8'))).toBe('0');
    const flags = threadFlags(pid);
    expect(flags.length).toBeGreaterThan(4);
    expect(flags.every((f) => f === '1')).toBe(true);

    // It still serves what is beneath its root, over a real socket...
    const res = await rawGet(ready.url, '/resources/files/hello.txt');
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('hello from inside');
    // ...and lands a peer's file in peer-in, through its landing (the only place it may write).
    const minted = await callTool(peer.session, 'share-file', { path: 'report.md', peer: new URL(ready.advertised_url).host });
    expect(minted).not.toHaveProperty('error');
    const fetched = await client.callTool({ name: 'fetch-peer-file', arguments: { peer: peerAddr, handle: (minted as { handle: string }).handle } });
    expect(fetched.isError, JSON.stringify(fetched.content)).toBeFalsy();
    const landed = fetched.structuredContent as { path: string };
    expect(readFileSync(join(workdir, landed.path), 'utf8')).toBe('the findings');

    // The trace took every event.
    await client.close();
    const types = readTrace(trace).map((e) => e.event_type);
    expect(types).toEqual(['session_start', 'resource_read', 'peer_file_fetch', 'session_end']);
    expect(readTrace(trace)[2]).toMatchObject({ outcome: 'ok', peer: peerAddr });
  });

  it('with --operator-listen unix:PATH may make that socket (and remove it at exit) in its directory, nothing else there', async () => {
    const workdir = scratch(['out/a.txt: a']);
    writeFileSync(join(workdir, 'murmur.yaml'), 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n');
    const sockDir = scratch();
    const sock = join(sockDir, 'operator.sock');
    const trace = join(scratch(), 'trace.jsonl');
    const s = await startServe(['--workdir', workdir, '--trace', trace, '--operator-listen', `unix:${sock}`]);
    reap(s.child);
    const confinement = readTrace(trace)[0]!.confinement as Confinement;
    expect(confinement).toMatchObject({ applied: true, write: [trace, sockDir] });
    expect(readdirSync(sockDir)).toEqual(['operator.sock']);
    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    expect(readdirSync(sockDir)).toEqual([]);
  });

  it('binds a TCP operator listener on its own port rule', async () => {
    const workdir = scratch();
    writeFileSync(join(workdir, 'murmur.yaml'), 'name: cap\nversion: "1"\n');
    const trace = join(scratch(), 'trace.jsonl');
    // A port free a moment ago (a tiny race with other processes, harmless here).
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const s = await startServe(['--workdir', workdir, '--trace', trace, '--operator-listen', `127.0.0.1:${port}`]);
    reap(s.child);
    const confinement = readTrace(trace)[0]!.confinement as Confinement;
    expect(confinement.applied).toBe(true);
    if (ABI >= 4) expect(confinement.bind_ports).toEqual([]);
    expect((s.ready as Record<string, unknown>).operator_url).toBe(`http://127.0.0.1:${port}`);
  });

  it('believes no handed-over report: a forged handoff claiming a domain records that none is in force', async () => {
    const workdir = scratch(['out/a.txt: a']);
    const yaml = 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n';
    const trace = join(scratch(), 'trace.jsonl');
    const forged = {
      v: 2,
      workdir,
      manifest: parseManifest(yaml),
      sessionId: 'ses_forged',
      tracePath: trace,
      listeners: [],
      notifyFd: null,
      confinement: {
        applied: true,
        landlock_abi: ABI,
        reason: null,
        read: [],
        execute: [],
        write: [],
        bind_ports: null,
        connect_ports: null,
        scoped: [],
        skipped: [],
        notes: [],
      },
    };
    const s = await startServe(['--workdir', workdir], { [HANDOFF_ENV]: JSON.stringify(forged) });
    reap(s.child);
    const confinement = readTrace(trace)[0]!.confinement as Confinement;
    expect(confinement.applied).toBe(false);
    expect(confinement.reason).toContain('none is in force');
    expect(threadFlags(s.child.pid!).every((f) => f === '0')).toBe(true);
  });
});

describe('serve without Landlock', () => {
  async function unconfined(args: string[], env: NodeJS.ProcessEnv): Promise<{ s: Served; trace: string; secret: string }> {
    const workdir = scratch(['out/a.txt: a']);
    writeFileSync(join(workdir, 'murmur.yaml'), 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n');
    const trace = join(scratch(), 'trace.jsonl');
    const secret = secretOutside();
    const strayPort = await strayListener();
    const s = await startServe(['--workdir', workdir, '--trace', trace, ...args], {
      ...env,
      [UNCHECKED_READ_ENV]: secret,
      [UNCHECKED_CONNECT_ENV]: `127.0.0.1:${strayPort}`,
    });
    reap(s.child);
    return { s, trace, secret };
  }

  it('--no-landlock serves unconfined, says so in session_start, and the same unchecked read succeeds', async () => {
    const { s, trace } = await unconfined(['--no-landlock'], {});
    expect(readTrace(trace)[0]!.confinement).toMatchObject({ applied: false, reason: 'disabled by --no-landlock', read: [], write: [] });
    // The ready line comes after the hook ran; the hook's line is written before it.
    const hook = hookLine(s.stderr());
    expect(hook).toMatchObject({ main_thread: 'ok', worker_thread: 'ok', connect: 'ok' });
    expect(hook.fs_pool).toEqual(Array(16).fill('ok'));
    expect(hook.native_pool).toEqual(Array(16).fill('ok'));
    expect(threadFlags(s.child.pid!).every((f) => f === '0')).toBe(true);
  });

  it('RESOURCE_PLANE_LANDLOCK=off does the same; any other value than off/auto is a usage error', async () => {
    const { trace } = await unconfined([], { RESOURCE_PLANE_LANDLOCK: 'off' });
    expect(readTrace(trace)[0]!.confinement).toMatchObject({ applied: false, reason: 'disabled by RESOURCE_PLANE_LANDLOCK=off' });
    const bad = startServe(['--workdir', scratch()], { RESOURCE_PLANE_LANDLOCK: 'maybe' });
    await expect(bad).rejects.toThrow(/RESOURCE_PLANE_LANDLOCK must be 'auto' or 'off'/);
  });
});
