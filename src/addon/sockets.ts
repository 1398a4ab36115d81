// Sockets (native/bind_sockets.cc): the first stage's listeners, socket activation, sd_notify.
import { addon } from './load.js';

/** Every code a socket call can fail with. */
export type SocketCode = 'SOCKET_FAILED' | 'BIND_FAILED' | 'LISTEN_FAILED' | 'NOT_A_LISTENER' | 'CONNECT_FAILED' | 'SEND_FAILED';

export interface SocketOutcome {
  ok: boolean;
  code: 'OK' | SocketCode;
  errno: number;
  detail: string;
  /** The new descriptor (close-on-exec), or -1. */
  fd: number;
}

export interface SocketInfo {
  ok: boolean;
  errno: number;
  detail: string;
  family: 'ipv4' | 'ipv6' | 'unix' | 'other';
  stream: boolean;
  listening: boolean;
  /** The numeric host, or the unix socket's path ('' when unnamed or abstract). */
  address: string;
  port: number;
}

export interface UnixSocketProbe {
  /** live: something accepts there; stale: nobody listens (ECONNREFUSED); error: see errno. */
  state: 'live' | 'stale' | 'error';
  /** The listener's pid (SO_PEERCRED) when live and known, else 0. */
  pid: number;
  errno: number;
  detail: string;
}

const binding = addon as {
  socketCodes: string[];
  listenTcp(call: { address: string; port: number; backlog: number }): SocketOutcome;
  listenUnix(call: { path: string; backlog: number }): SocketOutcome;
  socketInfo(call: { fd: number }): SocketInfo;
  setCloexec(call: { fd: number }): number;
  probeUnixSocket(call: { path: string }): UnixSocketProbe;
  notifyOpen(call: { target: string }): SocketOutcome;
  notifySend(call: { fd: number; message: string }): SocketOutcome;
};

export const SOCKET_CODES: readonly string[] = binding.socketCodes;

/** The backlog libuv (and so Node's listen) uses. */
export const LISTEN_BACKLOG = 511;

/** A listening TCP socket on a numeric address that nothing accepts on until it is served. */
export function listenTcp(address: string, port: number): SocketOutcome {
  return binding.listenTcp({ address, port, backlog: LISTEN_BACKLOG });
}

/** A listening unix socket at `path`, created 0600. */
export function listenUnix(path: string): SocketOutcome {
  return binding.listenUnix({ path, backlog: LISTEN_BACKLOG });
}

export function socketInfo(fd: number): SocketInfo {
  return binding.socketInfo({ fd });
}

/** Marks `fd` close-on-exec; 0 or an errno. */
export function setCloexec(fd: number): number {
  return binding.setCloexec({ fd });
}

export function probeUnixSocket(path: string): UnixSocketProbe {
  return binding.probeUnixSocket({ path });
}

/** A datagram socket connected to NOTIFY_SOCKET (`/path` or `@abstract`). */
export function notifyOpen(target: string): SocketOutcome {
  return binding.notifyOpen({ target });
}

export function notifySend(fd: number, message: string): SocketOutcome {
  return binding.notifySend({ fd, message });
}
