// Admission: what every request passes before anything answers it, in one place. The planes'
// plugin runs it on its own routes; the CLI's app runs it on every route; the two answers Fastify
// gives without a route (a request Node's parser rejects, a target its router refuses) run it too.
//
//   - while stopping: 503 shutting_down, connection closed;
//   - counted in flight until the response or its socket closes, whichever is first (on Node 20 a
//     pipelined response queued behind one whose socket died never emits 'close');
//   - HTTP/1.x only, a Host on HTTP/1.1 and never two, no Expect but 100-continue: 400/417 bad_request;
//   - one response at a time per connection: a pipelined request waits until the response before
//     it has closed, so a connection pins at most one body whatever the client pipelines, and a
//     connection with more than MAX_QUEUED_PER_CONNECTION requests waiting is cut; a refusal waits
//     too (its head must follow the `100 Continue` Node may have queued for it);
//   - the socket's idle timer is off while the server works on the request (a listing may take
//     its whole budget) and back on once the answer is handed to Node.
//
// The raw target's rewrite for the router is in targets.ts, CONNECT's answer in connect.ts, and
// when a response is over (its own close or its socket's) in closing.ts.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { STATUS_CODES } from './node-http.js';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BAD_REQUEST_STATUSES as BAD_REQUEST, Refusal, renderHttp } from '../codes.js';
import { redactHandles } from '../redact.js';
import { onceClosed } from './closing.js';
import { LIMITS, MAX_QUEUED_PER_CONNECTION } from '../limits.js';
import { HEADER } from '../wire.js';
import { sendError, fastifyPlaneReply } from './reply.js';
import { logTarget, rawTarget } from './targets.js';

/** Why a request is refused before routing, if it is: HTTP/0.9, no Host on 1.1 or two Hosts, an unknown Expect, CONNECT's authority form. */
function protocolProblem(req: IncomingMessage): { status: number } | null {
  // Node reads a request line cut by a bare LF as HTTP/0.9 and what follows as headers, so
  // `GET /resources/files/a<LF>X: y HTTP/1.1` would be a request for `a` where a proxy in front
  // may have seen another target.
  if (req.httpVersionMajor !== 1) return { status: 400 };
  if (req.httpVersionMinor >= 1 && req.headers.host === undefined) return { status: 400 };
  // More than one Host line is a 400 in any version (RFC 9112 section 3.2): Node keeps the first
  // and drops the rest, so a proxy in front that read another one saw another request.
  if (hostLines(req) > 1) return { status: 400 };
  const expect = req.headers.expect;
  if (expect !== undefined && !/^\s*100-continue\s*$/i.test(expect)) return { status: BAD_REQUEST.expectation.status };
  // `CONNECT host:port` asks for a tunnel, which this server never makes; no route can name it.
  if (req.method === 'CONNECT' && !(req.url ?? '').startsWith('/')) return { status: 400 };
  return null;
}

/** How many Host header lines the request carried (req.headers keeps only the first). */
function hostLines(req: IncomingMessage): number {
  let n = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i]!.length === 4 && req.rawHeaders[i]!.toLowerCase() === 'host') n++;
  return n;
}

interface Connection {
  /** Admitted requests on this socket whose response has not closed yet. */
  waiting: number;
  /** Resolves when the newest admitted request's response has closed. */
  tail: Promise<void> | null;
  /** An answer to write once every admitted request here has closed (a parser error after them). */
  afterLast?: () => void;
  /** The newest admitted request. */
  last?: IncomingMessage;
}

/** What the access line is written with: the CLI's access log, or Fastify's request logger. */
export interface AccessLogger {
  info(fields: object, msg: string): void;
  debug(fields: object, msg: string): void;
  isLevelEnabled?(level: string): boolean;
  /** The same line as info/debug with these fields, written without building them (the CLI's log). */
  completed?(level: 'info' | 'debug', line: CompletedLine): void;
}

/** An access line's fields, flat. */
export interface CompletedLine {
  reqId: string;
  method: string;
  url: string;
  statusCode: number;
  responseTime: number;
  bytes: number;
}

export class Admission {
  private count = 0;
  private waiters: Array<() => void> = [];
  private installed = false;
  private readonly connections = new WeakMap<Socket, Connection>();
  /** Set when stopping: every new request is answered 503. */
  closing = false;

  /**
   * `containment`: the class header every admission answer carries. `accessLog`: one `info` line
   * per request (else the same line at `debug`). `log`: where that line goes, naming its request
   * (`reqId`); without it, the request's own logger (a host's, which binds `reqId` itself).
   */
  constructor(
    private readonly containment: string,
    private readonly options: { accessLog?: boolean; log?: AccessLogger } = {},
  ) {}

  /** Responses not yet closed. */
  get inFlight(): number {
    return this.count;
  }

  /**
   * The onRequest hook. Stops the request with an answer, or lets it through once it is this
   * connection's turn. It runs once per request: an Admission is installed in one context only.
   */
  readonly onRequest = async (request: FastifyRequest, reply: FastifyReply): Promise<unknown> => {
    const req = request.raw;
    if (this.closing) {
      reply.header('connection', 'close');
      sendError(fastifyPlaneReply(reply), renderHttp('server', new Refusal('shutting_down')));
      return reply;
    }
    const turn = this.enter(req, reply.raw);
    // A refusal waits its turn like any answer: written while an answer before it still holds
    // the socket, its head would land in front of the `100 Continue` Node already queued for it.
    if (turn) await turn;
    const socket = req.socket;
    // The connection ended while this request waited (reset, or `Connection: close` on the one
    // before it): nothing will be sent, so nothing is done or traced.
    if (socket.destroyed || !socket.writable) {
      reply.hijack();
      return reply;
    }
    const problem = protocolProblem(req);
    if (problem) {
      reply.header('connection', 'close');
      const rendered = renderHttp('server', new Refusal('bad_request'));
      sendError(fastifyPlaneReply(reply), { ...rendered, status: problem.status });
      return reply;
    }
    socket.setTimeout(0);
    return undefined;
  };

  /**
   * The onSend hook: every answer carries the class header (last, unless the plane placed it), and
   * the idle timer is back on once the answer is handed to Node.
   */
  readonly onSend = async (request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> => {
    if (!reply.hasHeader(HEADER.containment)) reply.header(HEADER.containment, this.containment);
    const socket = request.raw.socket;
    if (!socket.destroyed) socket.setTimeout(LIMITS.idleTimeoutMs);
    return payload;
  };

  /**
   * The onResponse hook: the access log, one line per request in the shape pino-http writes
   * (`req`, `res`, `responseTime` in ms) plus the body's `bytes`; the logger's bindings add the
   * session id. Tokens travel in redeem URLs, so the target is redacted; the trace is the record,
   * this is an operator's echo of it.
   */
  readonly onResponse = (request: FastifyRequest, reply: FastifyReply, done: () => void): void => {
    // A callback hook, not an async one: no promise per request for a line that waits for nothing.
    try {
      this.logCompleted(request, reply);
    } finally {
      done();
    }
  };

  private logCompleted(request: FastifyRequest, reply: FastifyReply): void {
    const level = this.options.accessLog ? 'info' : 'debug';
    const own = this.options.log;
    const log: AccessLogger = own ?? request.log;
    // Nothing is built for a line the logger would drop (pino's isLevelEnabled; a no-op logger has none).
    if (log.isLevelEnabled?.(level) === false) return;
    const length = Number(reply.getHeader('content-length') ?? 0);
    const method = request.raw.method ?? '';
    const url = logTarget(rawTarget(request.raw));
    const statusCode = reply.statusCode;
    const responseTime = Math.round(reply.elapsedTime * 1000) / 1000;
    const bytes = Number.isFinite(length) ? length : 0;
    if (own?.completed) {
      own.completed(level, { reqId: request.id, method, url, statusCode, responseTime, bytes });
      return;
    }
    log[level]({ ...(own ? { reqId: request.id } : {}), req: { method, url }, res: { statusCode }, responseTime, bytes }, 'request completed');
  }

  /** The error handler: a 500 io_error that echoes nothing (an error's text may hold a path). */
  readonly errorHandler = (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void => {
    request.log.error({ err: redactHandles(String(error)) }, 'unhandled error');
    sendError(fastifyPlaneReply(reply), renderHttp('server', new Refusal('io_error', 'internal error')));
  };

  /** Puts the hooks and the error handler on `app` (and every route registered in its context). */
  install(app: FastifyInstance): void {
    // A second install would admit each request twice: it would wait behind its own turn.
    if (this.installed) throw new TypeError('capsule-resource-plane: an Admission is installed in one context only');
    this.installed = true;
    app.addHook('onRequest', this.onRequest);
    app.addHook('onSend', this.onSend);
    app.addHook('onResponse', this.onResponse);
    app.setErrorHandler(this.errorHandler);
  }

  /**
   * For an answer Fastify writes without hooks (a target the router refuses): the same gate and
   * count, then `answer` unless stopping, once it is this connection's turn (as in onRequest).
   */
  admitUnrouted(request: FastifyRequest, reply: FastifyReply, answer: () => void): void {
    reply.header(HEADER.containment, this.containment);
    if (this.closing) {
      reply.header('connection', 'close');
      sendError(fastifyPlaneReply(reply), renderHttp('server', new Refusal('shutting_down')));
      return;
    }
    const turn = this.enter(request.raw, reply.raw);
    if (turn === null) {
      answer();
      return;
    }
    void turn.then(() => {
      const socket = request.raw.socket;
      if (!socket.destroyed && socket.writable) answer();
    });
  }

  /**
   * Fastify's `clientErrorHandler`: a request Node's parser rejects, answered in the spec's shape
   * (431 headers too large, 408 too slow, else 400; 503 while stopping) and counted until the
   * socket is done. Only the code is logged: the error's rawPacket holds the request's bytes.
   */
  clientErrorHandler(log?: (fields: object, message: string) => void) {
    return (err: NodeJS.ErrnoException, socket: Socket): void => {
      log?.({ code: err.code }, 'client error');
      if (!socket.writable) {
        socket.destroy();
        return;
      }
      const conn = this.connections.get(socket);
      // Bytes after a request that said `Connection: close`: the server must not process them
      // (RFC 9112 section 9.6), and the answer still being prepared must not be replaced by an
      // error; Node closes the connection once that answer is sent.
      if (err.code === 'HPE_CLOSED_CONNECTION') {
        if (!conn || conn.waiting === 0) socket.end();
        return;
      }
      const cause = err.code === 'HPE_HEADER_OVERFLOW' ? BAD_REQUEST.header_overflow : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? BAD_REQUEST.timeout : null;
      const refusal = new Refusal(this.closing ? 'shutting_down' : 'bad_request');
      const rendered = renderHttp('server', refusal);
      const { body } = rendered;
      const status = this.closing || cause === null ? rendered.status : cause.status;
      const reason = this.closing || cause === null ? STATUS_CODES[status] : cause.reason;
      const answer = () => {
        this.count += 1;
        socket.once('close', () => this.leave());
        socket.end(
          `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\n${status === 503 ? 'retry-after: 1\r\n' : ''}` +
            `${HEADER.containment}: ${this.containment}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body.toString()}`,
        );
      };
      // A bad request after complete ones: those are answered first, in order, and the error
      // last. An error inside a request already dispatched (its body cannot be framed) is that
      // request's answer: now, and the connection ends (RFC 9112 section 6.1).
      if (conn && conn.waiting > 0 && conn.last?.complete) conn.afterLast = answer;
      else answer();
    };
  }

  /** Resolves once every admitted response has closed, or after `timeoutMs`. */
  drained(timeoutMs: number): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Counts the request in flight and queues it on its connection; returns what it must wait for. */
  private enter(req: IncomingMessage, res: ServerResponse): Promise<void> | null {
    this.count += 1;
    const socket = req.socket;
    let conn = this.connections.get(socket);
    if (!conn) {
      conn = { waiting: 0, tail: null };
      this.connections.set(socket, conn);
    }
    const c = conn;
    c.last = req;
    const before = c.tail;
    let ended!: () => void;
    const mine = new Promise<void>((resolve) => (ended = resolve));
    c.tail = mine;
    c.waiting += 1;
    onceClosed(req, res, () => {
      c.waiting -= 1;
      if (c.tail === mine) c.tail = null;
      ended();
      this.leave();
      if (c.waiting === 0 && c.afterLast) {
        const answer = c.afterLast;
        c.afterLast = undefined;
        if (socket.writable) answer();
      }
    });
    // A client that pipelines this many requests without reading the answers is cut: whatever it
    // sent is parsed into objects that would otherwise wait here without bound.
    if (c.waiting > MAX_QUEUED_PER_CONNECTION) socket.destroy();
    return before;
  }

  private leave(): void {
    this.count -= 1;
    if (this.count === 0) for (const w of this.waiters.splice(0)) w();
  }
}
