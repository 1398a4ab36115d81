// Socket activation (SPEC 10: the launch has no window; the operator plane apart; issue 39). The
// real `serve` command is started as systemd would start it: listening sockets handed over as
// descriptors 3, 4, 5… with LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES, here under generated
// environments: one to three sockets (TCP or unix, or a descriptor that is no listening socket: a
// file, or a connected TCP stream that is a stream socket but not listening),
// LISTEN_FDS equal to the count, another count or not a number, LISTEN_PID naming the launched
// process, this test's process (a parent that was activated and did not clear the variables),
// PID 1, empty or absent, and LISTEN_FDNAMES absent, empty, or names from peer, operator,
// metrics, unknown and strays, in any order, with duplicates and missing ones. The launched process
// gets its own PID into LISTEN_PID through `sh -c 'LISTEN_PID=$$ exec …'` (exec keeps the PID).
// The model is sd_listen_fds(3) and src/launch/sockets.ts's documented rule, written apart:
//  - the variables count only when LISTEN_PID is exactly the launched process's PID; otherwise
//    serve binds its own listener and no handed-over socket is ever answered;
//  - LISTEN_FDS must be 1 to 3; one socket is the peer listener (named nothing, `peer`, `unknown`
//    or empty); two or three must be named, each once, `peer` among them; each named descriptor
//    must be a listening stream socket; anything else is a usage error (status 2) and nothing is
//    answered on any socket;
//  - once adopted, each socket serves by its name, whatever the order: the operator plane
//    (`/resources/files/…` 200) only on the socket named `operator`, or on the peer socket when no
//    socket is named `operator` (never on the peer socket otherwise: 404 there); `/metrics` only on
//    the socket named `metrics`; a socket past LISTEN_FDS is never answered; the ready line names
//    the peer socket as `url` and the operator and metrics sockets as `operator_url`, `metrics_url`.
import { spawn } from 'node:child_process';
import { mkdirSync, openSync, closeSync, writeFileSync } from 'node:fs';
import { type AddressInfo, connect, createServer } from 'node:net';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect } from 'vitest';
import * as native from '../../src/addon/export.js';
import * as sockets from '../../src/addon/sockets.js';
import { defer } from '../helpers/cleanup.js';
import { CLI } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';
import { fuzzIt, guard } from './runner.js';

type Slot = 'tcp' | 'unix' | 'file' | 'connected';
type Pid = 'self' | 'parent' | 'init' | 'empty' | 'absent';
const NAMES = ['peer', 'operator', 'metrics', 'unknown', '', 'Peer', 'x'] as const;
interface Case {
  slots: Slot[];
  /** LISTEN_FDS: the slots' count, or another value. */
  fds: { k: 'count' } | { k: 'other'; value: string } | { k: 'absent' };
  pid: Pid;
  names: string[] | null;
}

const YAML = 'name: act\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n';
const BODY = 'activated\n';

type Target = { port: number } | { path: string };
interface Opened {
  slot: Slot;
  fd: number;
  target: Target | null;
  url: string | null;
}

/** One socket or a plain file descriptor, made here (never accepted on by this process). */
async function open(slot: Slot, dir: string, i: number): Promise<Opened> {
  if (slot === 'connected') {
    // A stream socket that is not listening: the client end of a loopback connection.
    const server = createServer((s) => s.on('error', () => undefined));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const client = connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port });
    await new Promise<void>((r) => client.once('connect', () => r()));
    client.on('error', () => undefined);
    defer(async () => {
      client.destroy();
      server.close();
    });
    return { slot, fd: (client as unknown as { _handle: { fd: number } })._handle.fd, target: null, url: null };
  }
  if (slot === 'file') {
    const path = join(dir, `not-a-socket-${i}`);
    writeFileSync(path, '');
    return { slot, fd: openSync(path, 'r'), target: null, url: null };
  }
  const out = slot === 'tcp' ? sockets.listenTcp('127.0.0.1', 0) : sockets.listenUnix(join(dir, `s${i}.sock`));
  if (!out.ok) throw new Error(`harness: cannot listen: ${out.detail}`);
  const info = sockets.socketInfo(out.fd);
  if (slot === 'tcp') return { slot, fd: out.fd, target: { port: info.port }, url: `http://127.0.0.1:${info.port}` };
  return { slot, fd: out.fd, target: { path: info.address }, url: `unix:${info.address}` };
}

/** GET `path` on `target`: the status, or null when nothing answers within `waitMs`. */
function ask(target: Target, path: string, waitMs: number): Promise<number | null> {
  return new Promise((resolve) => {
    const socket = 'port' in target ? connect({ host: '127.0.0.1', port: target.port }) : connect({ path: target.path });
    let text = '';
    const done = (v: number | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(null), waitMs);
    socket.once('connect', () => socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`));
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3}) /.exec(text);
      if (m) done(Number(m[1]));
    });
    socket.once('error', () => done(null));
    socket.once('end', () => done(null));
  });
}

type Role = 'peer' | 'operator' | 'metrics';
/** What the model says serve does with this environment. */
type Verdict = { kind: 'ignored' } | { kind: 'refused'; why: string } | { kind: 'served'; roles: Role[] };

function model(c: Case, listenFds: string | undefined): Verdict {
  if (listenFds === undefined || c.pid !== 'self') return { kind: 'ignored' };
  if (!/^[0-9]{1,3}$/.test(listenFds)) return { kind: 'refused', why: 'LISTEN_FDS' };
  const n = Number(listenFds);
  if (n < 1 || n > 3) return { kind: 'refused', why: 'LISTEN_FDS' };
  const given = c.names === null || c.names.join(':') === '' ? [] : c.names.join(':').split(':');
  let roles: Role[];
  if (n === 1) {
    if (given.length > 1 || (given.length === 1 && !['peer', 'unknown', ''].includes(given[0]!))) return { kind: 'refused', why: 'LISTEN_FDNAMES' };
    roles = ['peer'];
  } else {
    const ok =
      given.length === n && given.every((g) => g === 'peer' || g === 'operator' || g === 'metrics') && new Set(given).size === n && given.includes('peer');
    if (!ok) return { kind: 'refused', why: 'LISTEN_FDNAMES' };
    roles = given as Role[];
  }
  for (let i = 0; i < n; i++)
    if (c.slots[i] === undefined || c.slots[i] === 'file' || c.slots[i] === 'connected') return { kind: 'refused', why: 'LISTEN_FDS' };
  return { kind: 'served', roles };
}

const caseArb: fc.Arbitrary<Case> = fc.record({
  slots: fc.array(fc.constantFrom<Slot>('tcp', 'tcp', 'unix', 'unix', 'file', 'connected'), { minLength: 1, maxLength: 3 }),
  fds: fc.oneof(
    { weight: 6, arbitrary: fc.constant({ k: 'count' as const }) },
    { weight: 2, arbitrary: fc.constantFrom('0', '1', '2', '3', '4', '01', ' 2', '2a', '', '-1', '1000').map((value) => ({ k: 'other' as const, value })) },
    { weight: 1, arbitrary: fc.constant({ k: 'absent' as const }) },
  ),
  pid: fc.constantFrom<Pid>('self', 'self', 'self', 'parent', 'init', 'empty', 'absent'),
  names: fc.option(fc.array(fc.constantFrom(...NAMES), { minLength: 0, maxLength: 4 }), { nil: null, freq: 4 }),
});

/** Picks names that make a valid hand-over more often than chance would: a permutation of roles. */
const validArb: fc.Arbitrary<Case> = fc
  .record({
    roles: fc.shuffledSubarray(['operator', 'metrics'] as Role[], { minLength: 1, maxLength: 2 }),
    at: fc.nat(2),
    kinds: fc.array(fc.constantFrom<Slot>('tcp', 'unix'), { minLength: 3, maxLength: 3 }),
    extra: fc.boolean(),
    pid: fc.constantFrom<Pid>('self', 'self', 'self', 'parent'),
  })
  .map(({ roles, at, kinds, extra, pid }) => {
    const names: string[] = [...roles];
    names.splice(Math.min(at, names.length), 0, 'peer');
    const slots = kinds.slice(0, names.length + (extra && names.length < 3 ? 1 : 0));
    return { slots, fds: { k: 'other' as const, value: String(names.length) }, pid, names };
  });

async function runCase(c: Case): Promise<void> {
  const dir = scratch(['out/']);
  writeFileSync(join(dir, 'murmur.yaml'), YAML);
  writeFileSync(join(dir, 'out', 'a.txt'), BODY);
  const run = join(scratch(), 'run');
  mkdirSync(run, { mode: 0o700 });
  const opened = await Promise.all(c.slots.map((s, i) => open(s, run, i)));
  const listenFds = c.fds.k === 'count' ? String(c.slots.length) : c.fds.k === 'other' ? c.fds.value : undefined;
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const v of ['LISTEN_FDS', 'LISTEN_PID', 'LISTEN_FDNAMES']) delete env[v];
  if (listenFds !== undefined) env.LISTEN_FDS = listenFds;
  if (c.names !== null) env.LISTEN_FDNAMES = c.names.join(':');
  if (c.pid === 'parent') env.LISTEN_PID = String(process.pid);
  if (c.pid === 'init') env.LISTEN_PID = '1';
  if (c.pid === 'empty') env.LISTEN_PID = '';
  // `exec` keeps the shell's PID, so $$ is the PID of the serve process itself.
  const script = c.pid === 'self' ? 'LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"' : 'exec "$0" "$@"';
  const trace = join(run, 'trace.jsonl');
  const child = spawn('/bin/sh', ['-c', script, process.execPath, CLI, 'serve', '--workdir', dir, '--trace', trace], {
    env,
    stdio: ['ignore', 'pipe', 'pipe', ...opened.map((o) => o.fd)],
  });
  // This process keeps no copy: only the child holds the sockets now.
  // (A connected socket's descriptor is its Node socket's, closed by its cleanup.)
  for (const o of opened) if (o.slot !== 'connected') o.slot === 'file' ? closeSync(o.fd) : native.closeFd(o.fd);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  defer(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  for (let i = 0; i < 6_000 && !stdout.includes('\n') && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 5));
  const want = model(c, listenFds);
  const label = `${JSON.stringify({ ...c, listenFds })} → ${JSON.stringify(want)}; stderr: ${stderr.slice(0, 400)}`;
  const sockets = opened.filter((o) => o.target !== null);
  if (want.kind === 'refused') {
    const code = await exited;
    expect(code, `${label}: a hand-over that is not one serve can take is a usage error`).toBe(2);
    expect(stderr, label).toContain(want.why);
    expect(stdout, `${label}: no ready line`).toBe('');
    for (const o of sockets) expect(await ask(o.target!, '/resources/files/a.txt', 150), `${label}: nothing answers on ${o.url}`).toBeNull();
    return;
  }
  expect(stdout, `${label}: serve is ready`).toContain('\n');
  const ready = JSON.parse(stdout.split('\n')[0]!) as { url: string; operator_url?: string; metrics_url?: string };
  if (want.kind === 'ignored') {
    // Its own listener (both planes on it), and not one of the sockets it was handed.
    expect(
      opened.map((o) => o.url),
      `${label}: serve bound its own listener`,
    ).not.toContain(ready.url);
    const own = ready.url.startsWith('unix:') ? { path: ready.url.slice(5) } : { port: Number(new URL(ready.url).port) };
    expect(await ask(own, '/resources/files/a.txt', 5_000), `${label}: its own listener serves the operator plane`).toBe(200);
    for (const o of sockets)
      expect(await ask(o.target!, '/resources/files/a.txt', 150), `${label}: a hand-over meant for another process is never served (${o.url})`).toBeNull();
  } else {
    const at = (role: Role) => want.roles.indexOf(role);
    const peer = opened[at('peer')]!;
    expect(ready.url, `${label}: the ready line's url is the peer socket`).toBe(peer.url);
    expect(ready.operator_url, `${label}: operator_url`).toBe(at('operator') >= 0 ? opened[at('operator')]!.url! : undefined);
    expect(ready.metrics_url, `${label}: metrics_url`).toBe(at('metrics') >= 0 ? opened[at('metrics')]!.url! : undefined);
    for (let i = 0; i < opened.length; i++) {
      const o = opened[i]!;
      if (o.target === null) continue;
      const role = want.roles[i];
      const files = await ask(o.target, '/resources/files/a.txt', role === undefined ? 150 : 5_000);
      const metrics = role === undefined ? null : await ask(o.target, '/metrics', 5_000);
      if (role === undefined) {
        expect(files, `${label}: socket ${i} is past LISTEN_FDS and never answered`).toBeNull();
      } else {
        const operatorHere = role === 'operator' || (role === 'peer' && at('operator') < 0);
        expect(files, `${label}: socket ${i} (${role}) ${operatorHere ? 'serves' : 'never serves'} the operator plane`).toBe(operatorHere ? 200 : 404);
        expect(metrics, `${label}: socket ${i} (${role}) ${role === 'metrics' ? 'serves' : 'never serves'} /metrics`).toBe(role === 'metrics' ? 200 : 404);
      }
    }
  }
  child.kill('SIGTERM');
  expect(await exited, `${label}: stops cleanly`).toBe(0);
}

describe('socket activation', () => {
  fuzzIt({
    name: 'socket-activation',
    file: import.meta.filename,
    runs: 4,
    timeoutMs: 120_000,
    // Fixed cases: the names out of order (operator first), all three shuffled, a hand-over for the
    // parent process, a duplicate name, one socket named nothing, one socket named operator, a
    // stream socket that is not listening.
    examples: (): Array<[Case]> => [
      [{ slots: ['unix', 'tcp'], fds: { k: 'count' }, pid: 'self', names: ['operator', 'peer'] }],
      [{ slots: ['tcp', 'unix', 'tcp'], fds: { k: 'count' }, pid: 'self', names: ['metrics', 'operator', 'peer'] }],
      [{ slots: ['tcp', 'unix'], fds: { k: 'count' }, pid: 'parent', names: ['peer', 'operator'] }],
      [{ slots: ['tcp', 'tcp'], fds: { k: 'count' }, pid: 'self', names: ['peer', 'peer'] }],
      [{ slots: ['tcp', 'unix'], fds: { k: 'other', value: '1' }, pid: 'self', names: null }],
      [{ slots: ['tcp'], fds: { k: 'count' }, pid: 'self', names: ['operator'] }],
      [{ slots: ['connected'], fds: { k: 'count' }, pid: 'self', names: ['peer'] }],
    ],
    // Invariant: a hand-over counts only for the PID it names; adopted sockets serve by name (operator plane only where named, or on the peer socket when none is; /metrics only on its own); a malformed hand-over is status 2 and nothing is answered.
    property: () => fc.asyncProperty(fc.oneof(caseArb, validArb), guard(runCase)),
  });
});
