// Round three's wire helpers: a raw connection that sends any number of requests (one at a time or
// pipelined) and parses every answer with its exact header list, a reader that can pause, reset or
// half-close part-way through a body, and the trace read line by line as it grows. Nothing here
// interprets an answer beyond HTTP/1.1 framing; the properties hold the model.
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { parseResponse, type RawResponse } from '../helpers/http.js';

export interface WireRequest {
  method: string;
  target: string;
  headers: Array<[string, string]>;
  /** The request line's version (default `HTTP/1.1`); `''` sends none, which Node reads as HTTP/0.9. */
  version?: string;
  /** The Host lines, sent first (default one, `127.0.0.1`; none for `[]`). */
  hosts?: string[];
}

export function requestBytes(r: WireRequest, close: boolean): Buffer {
  const version = r.version ?? 'HTTP/1.1';
  const lines = [
    `${r.method} ${r.target}${version === '' ? '' : ` ${version}`}`,
    ...(r.hosts ?? ['127.0.0.1']).map((h) => `Host: ${h}`),
    ...r.headers.map(([n, v]) => `${n}: ${v}`),
  ];
  if (close) lines.push('Connection: close');
  return Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
}

/** A final answer, with the statuses of the interim (1xx) answers that came before it. */
export type WireResponse = RawResponse & { interim: number[] };

/**
 * Sends `requests` on one connection, all at once (`pipelined`) or each after the previous answer
 * arrived, the last with `Connection: close`; resolves with every answer once the server closes.
 * One at a time, nothing more is sent once an answer said `connection: close`. An interim answer
 * (`100 Continue`) is kept with the final one that follows it. A HEAD's answer and a 304 carry no
 * body whatever their headers say (RFC 9112 6.3).
 */
export function exchangeAll(port: number, requests: WireRequest[], pipelined: boolean, localAddress?: string): Promise<WireResponse[]> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress });
    let buf = Buffer.alloc(0);
    const out: WireResponse[] = [];
    let interim: number[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer in 20 s (${out.length} of ${requests.length} answers arrived)`));
    }, 20_000);
    const send = (i: number) => socket.write(requestBytes(requests[i]!, i === requests.length - 1));
    const parseMore = () => {
      while (out.length < requests.length) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = parseResponse(buf.subarray(0, end + 4), true);
        if (head.status >= 100 && head.status < 200 && head.status !== 101) {
          interim.push(head.status);
          buf = buf.subarray(end + 4);
          continue;
        }
        const bodiless = requests[out.length]!.method === 'HEAD' || head.status === 304 || head.status === 204;
        const length = bodiless ? 0 : Number(head.header('content-length') ?? 0);
        if (buf.length < end + 4 + length) return;
        const one = parseResponse(buf.subarray(0, end + 4 + length), bodiless);
        buf = buf.subarray(end + 4 + length);
        out.push({ ...one, interim });
        interim = [];
        if (!pipelined && out.length < requests.length && one.header('connection')?.toLowerCase() !== 'close') send(out.length);
      }
    };
    socket.on('connect', () => {
      if (pipelined) socket.write(Buffer.concat(requests.map((r, i) => requestBytes(r, i === requests.length - 1))));
      else send(0);
    });
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      parseMore();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      if (buf.length > 0) out.push({ ...parseResponse(Buffer.from('HTTP/1.1 999 trailing\r\n\r\n')), trailing: buf, interim });
      resolve(out);
    });
  });
}

/** One streamed answer read by a client that may stop part-way. */
export interface Partial {
  status: number | null;
  headers: Map<string, string>;
  body: Buffer;
  /** The whole content-length arrived. */
  complete: boolean;
  /** The connection was reset (by the server, or by us). */
  reset: boolean;
  /** The server ended the connection cleanly (a FIN) before it was reset or closed. */
  fin: boolean;
}

export interface ReaderPlan {
  /** Once this many body bytes arrived, `at` runs (the reader paused meanwhile), then `then`. */
  pauseAfter: number;
  at?: () => Promise<void>;
  then: 'read-on' | 'reset' | 'half-close';
}

/**
 * GETs `targets` (pipelined on one connection, the last with Connection: close) and reads the
 * first answer under `plan`; resolves once the connection is gone with what arrived of each.
 */
export function readUnder(port: number, targets: string[], plan: ReaderPlan): Promise<Partial[]> {
  return new Promise((resolve) => {
    const socket: Socket = connect({ host: '127.0.0.1', port });
    const got: Partial[] = [];
    let buf = Buffer.alloc(0);
    let cur: Partial | null = null;
    let want = 0;
    let acted = false;
    let done = false;
    let reset = false;
    let fin = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      seal();
      for (const g of got) {
        g.reset = reset;
        g.fin = fin;
      }
      resolve(got);
    };
    const timer = setTimeout(() => socket.destroy(), 30_000);
    let parts: Buffer[] = [];
    let have = 0;
    const seal = () => {
      if (cur) cur.body = Buffer.concat(parts);
      cur = null;
    };
    const parse = () => {
      for (;;) {
        if (cur === null) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const head = parseResponse(buf.subarray(0, end + 4), true);
          const headers = new Map(head.rawHeaders.map(([n, v]) => [n.toLowerCase(), v] as [string, string]));
          buf = buf.subarray(end + 4);
          cur = { status: head.status, headers, body: Buffer.alloc(0), complete: false, reset: false, fin: false };
          parts = [];
          have = 0;
          got.push(cur);
          want = Number(headers.get('content-length') ?? 0);
        }
        const take = Math.min(want - have, buf.length);
        // Chunks kept in a list and joined once: concatenating each into the body is quadratic.
        parts.push(buf.subarray(0, take));
        have += take;
        buf = buf.subarray(take);
        if (got.length === 1 && !acted && have >= Math.min(plan.pauseAfter, want) && have < want) {
          acted = true;
          socket.pause();
          void (plan.at ?? (async () => undefined))().then(() => {
            if (plan.then === 'reset') {
              reset = true;
              socket.resetAndDestroy();
              finish();
            } else {
              if (plan.then === 'half-close') socket.end();
              socket.resume();
            }
          });
          return;
        }
        if (have < want) return;
        cur.complete = true;
        seal();
      }
    };
    socket.on('connect', () =>
      socket.write(Buffer.concat(targets.map((t, i) => requestBytes({ method: 'GET', target: t, headers: [] }, i === targets.length - 1)))),
    );
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      parse();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNRESET') reset = true;
    });
    socket.on('end', () => (fin = true));
    socket.on('close', finish);
  });
}

/** A trace file read as it grows: each call returns the lines written since the last. */
export class TraceTail {
  private seen = 0;
  constructor(private readonly path: string) {}

  all(): Array<Record<string, unknown>> {
    return readFileSync(this.path, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  /** Lines since the last call. */
  next(): Array<Record<string, unknown>> {
    const lines = this.all();
    const fresh = lines.slice(this.seen);
    this.seen = lines.length;
    return fresh;
  }

  /** Waits (up to `ms`) until at least `n` new lines are there, then returns every new line. */
  async wait(n: number, ms = 2_000): Promise<Array<Record<string, unknown>>> {
    const until = Date.now() + ms;
    for (;;) {
      const count = this.all().length - this.seen;
      if (count >= n || Date.now() > until) return this.next();
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}

/** A line's event fields (what follows the five common ones), keys in order. */
export function fieldsOf(line: Record<string, unknown>): Record<string, unknown> {
  const { event_type: _t, event_id: _i, parent_id: _p, session_id: _s, timestamp: _ts, ...rest } = line;
  return { event_type: line.event_type, ...rest };
}
