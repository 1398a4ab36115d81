// The listening sockets of a launch, held from the first stage to the end of the server: bound
// here once (or handed over by systemd socket activation, LISTEN_FDS), then passed across the
// confined re-exec under their own descriptor numbers and served by the new image. Bound through
// the addon, not libuv: nothing in the first stage accepts, so a connection made during start-up
// waits in the kernel's backlog for the server instead of being accepted and then reset by the
// execve, and the port is never free for another process to take. Also the sd_notify socket,
// opened (and connected) before confinement, since Landlock may refuse it afterwards.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { unlinkSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { UsageError } from '../codes.js';
import { listenFailure, type ListenerRole } from '../listen-failure.js';
import * as native from '../addon/export.js';
import * as sockets from '../addon/sockets.js';

/** One listening socket the server serves: its descriptor and what it is. */
export interface HeldListener {
  role: ListenerRole;
  fd: number;
  /** `http://host:port`, or `unix:<path>`. */
  url: string;
  /** `http://localhost:<port>` (`http://localhost:0` for a unix socket). */
  defaultAdvertisedUrl: string;
  /** The socket file this launch created, removed when the server stops; null when not ours. */
  unlinkOnClose: string | null;
}

export type ListenAddress = { host: string; port: number } | { path: string };

/** What a listening socket serves: the peer plane (and the card), the operator plane, or /metrics. */
export type { ListenerRole };
export const LISTENER_ROLES: readonly ListenerRole[] = Object.freeze(['peer', 'operator', 'metrics']);

function describe(role: HeldListener['role'], fd: number, unlinkOnClose: string | null): HeldListener {
  const info = sockets.socketInfo(fd);
  if (info.family === 'unix') return { role, fd, url: `unix:${info.address}`, defaultAdvertisedUrl: 'http://localhost:0', unlinkOnClose };
  const host = info.family === 'ipv6' ? `[${info.address}]` : info.address;
  return { role, fd, url: `http://${host}:${info.port}`, defaultAdvertisedUrl: `http://localhost:${info.port}`, unlinkOnClose };
}

/** A failed listen, in the words `bind` uses for the same failure (src/http/listener.ts). */
function listenError(out: sockets.SocketOutcome, address: ListenAddress, role: ListenerRole): Error {
  const name = Object.entries(osConstants.errno).find(([, n]) => n === out.errno)?.[0] ?? `errno ${out.errno}`;
  return listenFailure(role, address, name, out.detail);
}

/** Binds one address; a host name is resolved first as Node's listen resolves it (the first address). */
async function bindOne(role: HeldListener['role'], address: ListenAddress): Promise<HeldListener> {
  if ('path' in address) {
    const out = sockets.listenUnix(address.path);
    if (!out.ok) throw listenError(out, address, role);
    return describe(role, out.fd, address.path);
  }
  const host = isIP(address.host) ? address.host : (await lookup(address.host)).address;
  const out = sockets.listenTcp(host, address.port);
  if (!out.ok) throw listenError(out, address, role);
  return describe(role, out.fd, null);
}

/** Binds the peer listener and, when asked, the operator and metrics ones; on any failure nothing stays bound. */
export async function bindListeners(peer: ListenAddress, operator: ListenAddress | null, metrics: ListenAddress | null = null): Promise<HeldListener[]> {
  const held: HeldListener[] = [];
  try {
    held.push(await bindOne('peer', peer));
    if (operator) held.push(await bindOne('operator', operator));
    if (metrics) held.push(await bindOne('metrics', metrics));
  } catch (error) {
    closeListeners(held);
    throw error;
  }
  return held;
}

/** Closes held listeners that will not be served, removing the socket files this launch made. */
export function closeListeners(held: readonly HeldListener[]): void {
  for (const l of held) {
    native.closeFd(l.fd);
    if (l.unlinkOnClose !== null) {
      try {
        unlinkSync(l.unlinkOnClose);
      } catch {
        // already gone
      }
    }
  }
}

/** The first descriptor systemd passes (sd_listen_fds). */
const LISTEN_FDS_START = 3;
/** More than a server of three listeners could use: a count above it is not ours. */
const MAX_LISTEN_FDS = LISTENER_ROLES.length;

/** The variables of a hand-over (sd_listen_fds): all removed once read, so no child inherits them. */
const ACTIVATION_VARIABLES = ['LISTEN_FDS', 'LISTEN_PID', 'LISTEN_FDNAMES'] as const;

/**
 * The sockets systemd socket activation hands over, or null when there is no hand-over for this
 * process. sd_listen_fds' rule exactly: the variables count only when LISTEN_PID names this process
 * (the first stage: the confined re-exec keeps its PID and never reads them again). A LISTEN_FDS
 * without LISTEN_PID, or with another process's, was left behind by a parent that was itself
 * activated and did not clear them: whatever fd 3 is then is not ours to serve. Either way the
 * variables are removed, so nothing this process starts inherits them either.
 * One socket is the peer listener; two or three must be named by LISTEN_FDNAMES
 * (FileDescriptorName=): `peer`, and `operator` and/or `metrics`, each at most once.
 * Each must be a listening stream socket (TCP or unix). They are marked close-on-exec.
 */
export function activatedListeners(env: NodeJS.ProcessEnv = process.env, pid = process.pid): HeldListener[] | null {
  const count = env.LISTEN_FDS;
  const forUs = count !== undefined && env.LISTEN_PID === String(pid);
  const names = env.LISTEN_FDNAMES;
  for (const name of ACTIVATION_VARIABLES) delete env[name];
  if (!forUs) return null;
  const n = /^[0-9]{1,3}$/.test(count) ? Number(count) : NaN;
  if (!(n >= 1 && n <= MAX_LISTEN_FDS)) {
    throw new UsageError(`LISTEN_FDS must be 1 to ${MAX_LISTEN_FDS} sockets (peer, then operator and/or metrics) (got '${count}')`);
  }
  let roles: HeldListener['role'][];
  const given = names === undefined || names === '' ? [] : names.split(':');
  if (n === 1) {
    if (given.length > 1 || (given.length === 1 && !['peer', 'unknown', ''].includes(given[0]!))) {
      throw new UsageError(`LISTEN_FDNAMES must name the one socket 'peer' (got '${names}')`);
    }
    roles = ['peer'];
  } else {
    const known = given.every((g) => (LISTENER_ROLES as readonly string[]).includes(g)) && new Set(given).size === given.length;
    if (given.length !== n || !known || !given.includes('peer')) {
      throw new UsageError(`LISTEN_FDNAMES must name the ${n} sockets, each once: 'peer', and 'operator' and/or 'metrics' (got '${names ?? ''}')`);
    }
    roles = given as HeldListener['role'][];
  }
  return roles.map((role, i) => {
    const fd = LISTEN_FDS_START + i;
    const info = sockets.socketInfo(fd);
    if (!info.ok || !info.stream || !info.listening || info.family === 'other') {
      throw new UsageError(`LISTEN_FDS: descriptor ${fd} ('${role}') is not a listening TCP or unix stream socket${info.ok ? '' : ` (${info.detail})`}`);
    }
    sockets.setCloexec(fd);
    return describe(role, fd, null);
  });
}

/** `vsock:CID:PORT` (systemd 253+; `vsock-stream:`, `vsock-dgram:`, `vsock-seqpacket:` later): a VM's host. */
const VSOCK_NOTIFY = /^vsock(-stream|-dgram|-seqpacket)?:/;

/**
 * The sd_notify socket NOTIFY_SOCKET names, connected now, or null when it is unset. A unix socket
 * (a path, or `@name`) that cannot be reached fails the launch: a unit of Type=notify would
 * otherwise wait out its start timeout for a READY=1 that never comes. The AF_VSOCK forms are not
 * supported (the addon speaks AF_UNIX only): the launch goes on without readiness, and
 * `unsupported` is told why, so the operator reads it in the log rather than in a start timeout.
 */
export function openNotifySocket(env: NodeJS.ProcessEnv = process.env, unsupported?: (why: string) => void): number | null {
  const target = env.NOTIFY_SOCKET;
  if (target === undefined || target === '') return null;
  if (VSOCK_NOTIFY.test(target)) {
    unsupported?.(
      `NOTIFY_SOCKET '${target}' is an AF_VSOCK address, which this server does not support: it serves without sending READY=1 or STOPPING=1 (use a unix socket path, or Type=simple/exec)`,
    );
    return null;
  }
  const out = sockets.notifyOpen(target);
  if (!out.ok) throw new UsageError(`NOTIFY_SOCKET '${target}' cannot be reached: ${out.detail || out.code}`);
  return out.fd;
}

/** Sends one sd_notify message; a failure is returned, never thrown (readiness is advisory to us). */
export function notify(fd: number | null, message: string): string | null {
  if (fd === null) return null;
  const out = sockets.notifySend(fd, message);
  return out.ok ? null : `${out.code}: ${out.detail}`;
}
