// A stand-in peer on loopback: any node:net, node:http or node:https server a test writes to lie,
// stall or just count, listening on an ephemeral 127.0.0.1 port, with every connection it accepts
// counted and tracked, and closed (open sockets dropped) when the running test finishes.
import type { Server, Socket } from 'node:net';
import { defer } from './cleanup.js';

export interface Loopback {
  port: number;
  /** `127.0.0.1:<port>`. */
  address: string;
  /** How many connections the server has accepted (less those `ignored` leaves out). */
  connections(): number;
  /** Resolves when the n-th accepted connection (from 1, less those `ignored` leaves out) has closed. */
  closed(n?: number): Promise<void>;
  /** Drops open connections and stops listening now; the deferred close then does nothing. */
  close(): Promise<void>;
}

export interface LoopbackOptions {
  /**
   * Connections that `connections()` and `closed()` do not count (a peer's agent-card fetch, say).
   * Asked when those are called, so a connection can be recognised after it was accepted.
   */
  ignored?: (socket: Socket) => boolean;
}

export async function listenLoopback(server: Server, opts: LoopbackOptions = {}): Promise<Loopback> {
  const accepted: Array<{ socket: Socket; closed: Promise<void> }> = [];
  server.on('connection', (socket: Socket) => {
    accepted.push({ socket, closed: new Promise((resolve) => socket.on('close', () => resolve())) });
  });
  const counted = () => (opts.ignored ? accepted.filter((c) => !opts.ignored!(c.socket)) : accepted);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  let closing: Promise<void> | undefined;
  const close = () => (closing ??= new Promise<void>((resolve) => {
    for (const c of accepted) c.socket.destroy();
    server.close(() => resolve());
  }));
  defer(close);
  const port = (server.address() as { port: number }).port;
  return {
    port,
    address: `127.0.0.1:${port}`,
    connections: () => counted().length,
    closed: (n = 1) => counted()[n - 1]?.closed ?? Promise.reject(new Error('no such connection')),
    close,
  };
}
