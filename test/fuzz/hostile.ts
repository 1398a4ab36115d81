// A hostile HTTP/1.1 server on a real loopback socket, for the properties that check the clients
// (fetch-peer-file, `ls`, `get`): each request head it reads is recorded with every byte the
// connection carried, and answered by a generated script with raw bytes, framed (or misframed) as
// the script says and ended as it says: FIN, kept open, or reset. Nothing here knows what a right
// answer is; the properties hold the model.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { createServer, type Server, type Socket } from 'node:net';

/** How the body is framed: honestly, a content-length short or long by `by` bytes, none (the close ends it), chunked, or chunked and cut before its last chunk. */
export type Framing =
  | { kind: 'exact' }
  | { kind: 'short'; by: number }
  | { kind: 'long'; by: number }
  | { kind: 'none' }
  | { kind: 'chunked' }
  | { kind: 'chunked-cut' };

/** What ends the answer: a FIN, the connection kept open (the client must end it), or an RST. */
export type Ending = 'close' | 'keep-alive' | 'reset';

/** One scripted answer: status line, header lines (in order, raw), the body, its framing and its end. */
export interface Scripted {
  status: number;
  reason?: string;
  headers: Array<[string, string]>;
  body: Buffer;
  framing: Framing;
  ending: Ending;
}

export interface Received {
  method: string;
  target: string;
  head: string;
}

export interface Hostile {
  port: number;
  address: string;
  /** Every request head read, in order. */
  requests: Received[];
  /** Every byte every connection carried to the server, concatenated. */
  bytes(): Buffer;
  close(): Promise<void>;
}

/** The bytes of an answer exactly as scripted (its framing's lies included). */
export function answerBytes(a: Scripted): Buffer {
  const lines = [`HTTP/1.1 ${a.status} ${a.reason ?? 'Whatever'}`];
  for (const [n, v] of a.headers) lines.push(`${n}: ${v}`);
  const f = a.framing;
  let body = a.body;
  if (f.kind === 'exact') lines.push(`content-length: ${a.body.length}`);
  else if (f.kind === 'short') lines.push(`content-length: ${Math.max(0, a.body.length - f.by)}`);
  else if (f.kind === 'long') lines.push(`content-length: ${a.body.length + f.by}`);
  else if (f.kind === 'chunked' || f.kind === 'chunked-cut') {
    lines.push('transfer-encoding: chunked');
    const parts: Buffer[] = [];
    // Chunks of up to 16 KiB, then the last chunk unless cut.
    for (let i = 0; i < a.body.length; i += 16_384) {
      const c = a.body.subarray(i, i + 16_384);
      parts.push(Buffer.from(`${c.length.toString(16)}\r\n`), c, Buffer.from('\r\n'));
    }
    if (f.kind === 'chunked') parts.push(Buffer.from('0\r\n\r\n'));
    body = Buffer.concat(parts);
  }
  if (a.ending !== 'keep-alive') lines.push('connection: close');
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]);
}

/**
 * Listens on 127.0.0.1 and answers each request head with `script(request)`. A reset follows the
 * answer's bytes once they have been handed to the kernel.
 */
export async function hostileServer(script: (r: Received) => Scripted): Promise<Hostile> {
  const requests: Received[] = [];
  const carried: Buffer[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    let head = Buffer.alloc(0);
    let answered = false;
    socket.on('data', (chunk: Buffer) => {
      carried.push(chunk);
      if (answered) return;
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      answered = true;
      const text = head.subarray(0, end).toString('latin1');
      const [method = '', target = ''] = text.split('\r\n')[0]!.split(' ');
      const r = { method, target, head: text };
      requests.push(r);
      const a = script(r);
      socket.write(answerBytes(a), () => {
        if (a.ending === 'reset') setImmediate(() => socket.resetAndDestroy());
      });
      if (a.ending === 'close') socket.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    address: `127.0.0.1:${port}`,
    requests,
    bytes: () => Buffer.concat(carried),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Deterministic bytes of `size` from `seed`: SHA-256 in counter mode. */
export function bytesFrom(seed: number, size: number): Buffer {
  const out = Buffer.alloc(size);
  for (let i = 0, block = 0; i < size; block++) {
    const h = createHash('sha256').update(`${seed}:${block}`).digest();
    i += h.copy(out, i);
  }
  return out;
}

export const sha256Hex = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/**
 * A framing and an ending a model can judge: every byte sent arrives unless the framing cut it
 * first, and a reset only where no byte's arrival decides anything (the bytes sent and declared
 * stay within `max`, the most the client takes). A short or long body is off by 1 to `maxBy`.
 */
export function framingAndEnding(size: number, max: number, maxBy: number): fc.Arbitrary<{ framing: Framing; ending: Ending }> {
  const by = fc.integer({ min: 1, max: maxBy });
  return fc.oneof(
    fc.record({ framing: fc.constant<Framing>({ kind: 'exact' }), ending: fc.constantFrom<Ending>('close', 'keep-alive') }),
    fc.record({ framing: fc.constant<Framing>({ kind: 'chunked' }), ending: fc.constantFrom<Ending>('close', 'keep-alive') }),
    fc.record({ framing: by.map((n): Framing => ({ kind: 'short', by: n })), ending: fc.constant<Ending>('close') }),
    fc.record({ framing: fc.constant<Framing>({ kind: 'none' }), ending: fc.constant<Ending>('close') }),
    fc.record({
      framing: by.map((n): Framing => ({ kind: 'long', by: n })),
      ending: fc.constantFrom<Ending>(...(size + maxBy <= max ? (['close', 'reset'] as const) : (['close'] as const))),
    }),
    fc.record({
      framing: fc.constant<Framing>({ kind: 'chunked-cut' }),
      ending: fc.constantFrom<Ending>(...(size <= max ? (['close', 'reset'] as const) : (['close'] as const))),
    }),
  );
}
