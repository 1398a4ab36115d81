// What runs when a response closes (src/http/admission.ts onceClosed, src/http/exchange.ts
// clientGone), on a real listening socket: every callback once, in the order asked; a client that
// leaves before its answer aborts the
// request's signal, and an answer that was sent aborts nothing (an abort builds a DOMException with
// its stack, which every answered request used to pay for).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { onceClosed } from '../../src/http/closing.js';
import { Exchange } from '../../src/http/exchange.js';
import type { PlaneReply } from '../../src/http/reply.js';
import type { Trace } from '../../src/trace/trace.js';

let server: Server | null = null;
afterEach(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = null;
});

/** A server whose one request is handed to `handle`; resolves with its port. */
async function serveOnce(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<number> {
  server = createServer(handle);
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** Sends one GET; `leave` resets the connection once `leaveWhen` resolves instead of reading the answer. */
function get(port: number, leaveWhen?: Promise<void>): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    let got = '';
    socket.on('data', (d) => (got += d.toString()));
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
    void leaveWhen?.then(() => socket.resetAndDestroy());
  });
}

const exchangeOf = (req: IncomingMessage, res: ServerResponse) =>
  new Exchange({ reply: { req, raw: res } as unknown as PlaneReply, trace: null as unknown as Trace, context: 'files', refusalHeaders: [] });

describe('onceClosed', () => {
  it('runs every callback once, in order', async () => {
    const ran: string[] = [];
    const closed = new Promise<void>((done) => {
      void serveOnce((req, res) => {
        for (const name of ['a', 'b', 'c']) onceClosed(req, res, () => ran.push(name));
        onceClosed(req, res, () => done());
        res.end('ok');
      }).then((port) => get(port));
    });
    await closed;
    expect(ran).toEqual(['a', 'b', 'c']);
  });

  it('runs a callback asked for after the close at once', async () => {
    let late = false;
    const port = await serveOnce((req, res) => {
      res.end('ok');
      res.once('close', () => onceClosed(req, res, () => (late = true)));
    });
    await get(port);
    await new Promise((r) => setTimeout(r, 20));
    expect(late).toBe(true);
  });
});

describe('clientGone', () => {
  it('aborts when the client leaves before its answer', async () => {
    let signal: AbortSignal | null = null;
    let arrived!: () => void;
    const arrival = new Promise<void>((r) => (arrived = r));
    const aborted = new Promise<void>((done) => {
      void serveOnce((req, res) => {
        signal = exchangeOf(req, res).clientGone();
        signal.addEventListener('abort', () => done());
        arrived();
      }).then((port) => get(port, arrival));
    });
    await aborted;
    expect(signal!.aborted).toBe(true);
  });

  it('aborts nothing once the answer was sent', async () => {
    let signal: AbortSignal | null = null;
    let closedRes!: () => void;
    const closed = new Promise<void>((r) => (closedRes = r));
    const port = await serveOnce((req, res) => {
      signal = exchangeOf(req, res).clientGone();
      onceClosed(req, res, closedRes);
      res.end('ok');
    });
    expect(await get(port)).toMatch(/^HTTP\/1\.1 200/);
    await closed;
    expect(signal!.aborted).toBe(false);
  });
});
