// A stand-in peer on loopback: any node:net, node:http or node:https server a test writes to lie,
// stall or just count, listening on an ephemeral 127.0.0.1 port, with every connection it accepts
// counted and tracked, and closed (open sockets dropped) when the running test finishes.
import { createHash } from 'node:crypto';
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
  const close = () =>
    (closing ??= new Promise<void>((resolve) => {
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

/**
 * Reads one request head on a raw socket (up to its blank line, errors ignored: a lying server's
 * client may reset) and hands it to `answer`, which writes whatever the test's server says.
 */
export function onRequestHead(socket: Socket, answer: (head: string) => void): void {
  socket.on('error', () => undefined);
  let head = '';
  const onData = (chunk: Buffer) => {
    head += chunk.toString('latin1');
    if (!head.includes('\r\n\r\n')) return;
    socket.off('data', onData);
    answer(head);
  };
  socket.on('data', onData);
}

export type BodyEnding = 'close' | 'keep-alive' | 'unframed' | 'early-close' | 'reset';

/**
 * Answers 200 with `body` under a true etag and `extraHeaders`, ended as `ending` says: closed,
 * kept alive, with no content-length (delimited by the close), cut short (ten bytes promised more
 * than sent, then closed) or reset `resetAfterMs` after the bytes went.
 */
export function answerBody(socket: Socket, body: Buffer, ending: BodyEnding, resetAfterMs: number, contentType: string, extraHeaders: string[] = []): void {
  const cut = ending === 'early-close' || ending === 'reset';
  const lines = [
    'HTTP/1.1 200 OK',
    `content-type: ${contentType}`,
    `etag: "sha256:${createHash('sha256').update(body).digest('hex')}"`,
    ...(ending === 'unframed' ? [] : [`content-length: ${body.length + (cut ? 10 : 0)}`]),
    ...extraHeaders,
    ...(ending === 'keep-alive' ? [] : ['connection: close']),
  ];
  socket.write(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]));
  if (ending === 'close' || ending === 'unframed' || ending === 'early-close') socket.end();
  // After the bytes have gone: the reset must find them already in the client's socket.
  else if (ending === 'reset') setTimeout(() => socket.resetAndDestroy(), resetAfterMs);
}
