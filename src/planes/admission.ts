// The gate in front of every request on a capsule's listener (src/server/listener.ts, and buildApp given a
// server): 503 while stopping, the in-flight count, HTTP/1.x only; then /resources straight to the
// planes on the bare Node request and response (no framework on the hot path), anything else to the
// app. Also the answer to a request Node's parser rejects, in the spec's shape.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { Refusal, renderHttp } from '../codes.js';
import type { Metrics } from '../server/metrics.js';
import { dispatch, isPlaneTarget, sendServerError, type InFlight, type PlaneSet } from './plugin.js';
import { rawPlaneReply } from './reply.js';
import { redactHandles } from '../redact.js';
import type { Session } from '../session.js';
import { HEADER } from '../wire.js';

/** The readiness route of the server's own app. */
export const HEALTH_PATH = '/healthz';
/** Prometheus metrics, when enabled. */
export const METRICS_PATH = '/metrics';

/**
 * What a request Node's parser rejects is answered with: a JSON 400 (431 for headers over the
 * limit, 408 for a timeout) in the spec's shape. Fastify's default would log the error, whose
 * rawPacket holds the raw request bytes (a redeem token among them): only the code is logged.
 */
export function clientErrorResponder(session: Session, logger: Logger | false) {
  return (err: NodeJS.ErrnoException, socket: Socket): void => {
    if (logger) logger.debug({ code: err.code }, 'client error');
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    const reason = status === 431 ? 'Request Header Fields Too Large' : status === 408 ? 'Request Timeout' : 'Bad Request';
    const { body } = renderHttp('server', new Refusal('bad_request'));
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\n${HEADER.containment}: ${session.containment}\r\n` +
        `content-length: ${body.length}\r\nconnection: close\r\n\r\n${body.toString()}`,
    );
  };
}

export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * The listener's gate: while stopping, 503; otherwise the response is counted in flight, a request
 * that is not HTTP/1.x is refused, a target under /resources is answered by the planes, and
 * anything else goes to `next` (the Fastify app).
 */
export function attachGate(
  server: Server,
  session: Session,
  inflight: InFlight,
  planes: PlaneSet,
  logger: Logger | false,
  metrics: Metrics | undefined,
  next: Handler,
): void {
  const logError = logger ? (fields: object, message: string) => logger.error(fields, message) : undefined;
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (inflight.closing) {
      res.shouldKeepAlive = false; // connection: close
      sendServerError(rawPlaneReply(req, res, session.containment), new Refusal('shutting_down'));
      return;
    }
    inflight.track(res);
    // Node accepts a request line ended by a bare LF as HTTP/0.9 and reads what follows as
    // headers, so `GET /resources/files/a<LF>X: y HTTP/1.1` is a request for `a`, where anything
    // in front of this server may have seen another target. Only HTTP/1.x is answered.
    if (req.httpVersionMajor !== 1) {
      res.shouldKeepAlive = false;
      sendServerError(rawPlaneReply(req, res, session.containment), new Refusal('bad_request'));
      return;
    }
    if (!isPlaneTarget(req.url ?? '/')) {
      next(req, res);
      return;
    }
    // The planes answer from the raw target anyway: no framework work on the hot path.
    const reply = rawPlaneReply(req, res, session.containment, logError);
    const started = logger && logger.isLevelEnabled('debug') ? performance.now() : 0;
    if (started && logger) {
      res.once('finish', () => logger.debug({ method: req.method, url: redactHandles(req.url ?? ''), status: res.statusCode, ms: Math.round(performance.now() - started) }, 'request'));
    }
    dispatch(session, req, reply, planes, metrics).catch((err: unknown) => {
      logError?.({ err: redactHandles(String(err)) }, 'unhandled error');
      if (!res.headersSent) sendServerError(reply, new Refusal('io_error', 'internal error'));
      else res.destroy();
    });
  });
}

