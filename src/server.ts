// The capsule's HTTP listener: binds first (so the advertised URL, part of the session's identity,
// is known before the session exists), then serves a Fastify app that carries both planes. The
// app-level options here are the ones the planes' guarantees need beyond the plugin: parser errors
// answered in the spec's shape without logging raw bytes, malformed targets under /resources still
// answered by the planes from the raw path, no HEAD routes.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { Logger } from 'pino';
import { Refusal, renderHttp } from './codes.js';
import { ALL_PLANES, dispatch, InFlight, isPlaneTarget, planesFrameworkErrors, resourcePlanes, sendServerError, type PlaneSet } from './planes/plugin.js';
import { rawPlaneReply } from './planes/reply.js';
import { redactHandles } from './redact.js';
import type { Metrics } from './metrics.js';
import type { Session } from './session.js';
import { HEADER } from './wire.js';

/** The readiness route of the server's own app. */
export const HEALTH_PATH = '/healthz';
/** Prometheus metrics, when enabled. */
export const METRICS_PATH = '/metrics';

/** How long shutdown lets responses being sent finish; then every connection is cut. */
export const DRAIN_TIMEOUT_MS = 10_000;

/**
 * The listener's limits against slow and many clients (README, "Limits"). Every one of them ends a
 * connection that is not making progress, so a crowd of idle or trickling clients cannot hold the
 * server; oversized request lines and headers are refused by Node's parser (431) before routing.
 */
export const LIMITS = Object.freeze({
  /** The whole header block must arrive within this. */
  headersTimeoutMs: 10_000,
  /** The whole request must arrive within this. */
  requestTimeoutMs: 30_000,
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: 5_000,
  /** A connection on which nothing moves (a client that does not drain its response) is cut after this. */
  idleTimeoutMs: 20_000,
  /** Request line plus headers. */
  maxHeaderBytes: 16 * 1024,
  /** Connections beyond this are closed as they arrive. */
  maxConnections: 1024,
});

export interface Listener {
  server: Server;
  /** The URL the listener is bound to (`unix:<path>` for a unix socket). */
  url: string;
  /** `http://localhost:<bound port>`: what a capsule advertises unless told otherwise. */
  defaultAdvertisedUrl: string;
}

/** Where to listen: a TCP address, or a unix socket path (created 0600). */
export type ListenAddress = { host: string; port: number } | { path: string };

/** Binds an HTTP listener; no request is answered until `serve` attaches an app to it. */
export async function bind(address: ListenAddress = { host: '127.0.0.1', port: 0 }): Promise<Listener> {
  const server = createServer({
    requestTimeout: LIMITS.requestTimeoutMs,
    headersTimeout: LIMITS.headersTimeoutMs,
    keepAliveTimeout: LIMITS.keepAliveTimeoutMs,
    maxHeaderSize: LIMITS.maxHeaderBytes,
  });
  server.maxConnections = LIMITS.maxConnections;
  // Inactivity on the socket, reading or writing: a response that is not drained frees its memory.
  server.setTimeout(LIMITS.idleTimeoutMs, (socket) => socket.destroy());
  // A unix socket is created with no permission for anyone but this user: the umask is narrowed for
  // the listen alone (the process is single-threaded here), so there is no window before a chmod.
  const previousUmask = 'path' in address ? process.umask(0o177) : null;
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen('path' in address ? { path: address.path } : { host: address.host, port: address.port }, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } finally {
    if (previousUmask !== null) process.umask(previousUmask);
  }
  if ('path' in address) return { server, url: `unix:${address.path}`, defaultAdvertisedUrl: 'http://localhost:0' };
  const bound = server.address() as AddressInfo;
  const shown = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
  return { server, url: `http://${shown}:${bound.port}`, defaultAdvertisedUrl: `http://localhost:${bound.port}` };
}

export interface RunningServer {
  app: FastifyInstance;
  /** The URL the listener is bound to. */
  url: string;
  /** The URL this capsule advertises (the session's identity). */
  advertisedUrl: string;
  /** New requests are refused first, the ones being answered finish (bounded), then the listener closes. */
  close(): Promise<void>;
}

/** The Fastify options the planes' guarantees need at the app level. */
export function appOptions(session: Session, logger: Logger | false, planes: PlaneSet = ALL_PLANES): FastifyServerOptions {
  return {
    loggerInstance: logger || undefined,
    logger: logger ? undefined : false,
    // Fastify's own request lines would carry redeem URLs (tokens); the plugin logs a redacted one.
    logController: new LogController({ disableRequestLogging: true }),
    exposeHeadRoutes: false,
    return503OnClosing: true,
    // A request Node's parser rejects: Fastify's default logs the error, whose rawPacket holds the
    // raw request bytes (a redeem token among them). Log the code only and answer in the spec's shape.
    clientErrorHandler: (err: NodeJS.ErrnoException, socket) => {
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
    },
    // Malformed percent-encodings are rejected by the router before any handler; under
    // /resources/ they are still answered by the planes, in the spec's shape, from the raw path.
    frameworkErrors: planesFrameworkErrors(session, planes),
  };
}

/** A Fastify app serving `session`, its listener not yet bound (tests, and the plugin's own use). */
export interface AppExtras {
  /** Counted on this app's planes; `GET /metrics` is served here when `serveMetrics`. */
  metrics?: Metrics;
  serveMetrics?: boolean;
}

export function buildApp(
  session: Session,
  logger: Logger | false = false,
  server?: Server,
  planes: PlaneSet = ALL_PLANES,
  extras: AppExtras = {},
): { app: FastifyInstance; inflight: InFlight } {
  const options = appOptions(session, logger, planes);
  const inflight = new InFlight();
  if (server) {
    // The gate and the in-flight count sit in front of Fastify, so every request passes them,
    // including those Fastify answers itself (a target it fails to parse goes to frameworkErrors).
    inflight.gatedAtListener = true;
    options.serverFactory = (handler) =>
      server.on('request', (req, res) => {
        if (inflight.closing) {
          const { body } = renderHttp('server', new Refusal('shutting_down'));
          res.writeHead(503, {
            'content-type': 'application/json',
            [HEADER.containment]: session.containment,
            'retry-after': '1',
            'content-length': body.length,
            connection: 'close',
          });
          res.end(body);
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
        // The planes answer from the raw target anyway, so /resources goes to them directly: the
        // hot path pays for no framework work. Everything else (health, metrics, the card, 404s)
        // is Fastify's.
        if (isPlaneTarget(req.url ?? '/')) {
          const reply = rawPlaneReply(req, res, session.containment, logger ? (fields, message) => logger.error(fields, message) : undefined);
          const started = logger && logger.isLevelEnabled('debug') ? performance.now() : 0;
          if (started) {
            res.once('finish', () => logger && logger.debug({ method: req.method, url: redactHandles(req.url ?? ''), status: res.statusCode, ms: Math.round(performance.now() - started) }, 'request'));
          }
          dispatch(session, req, reply, planes, extras.metrics).catch((err: unknown) => {
            if (logger) logger.error({ err: redactHandles(String(err)) }, 'unhandled error');
            if (!res.headersSent) sendServerError(reply, new Refusal('io_error', 'internal error'));
            else res.destroy();
          });
          return;
        }
        handler(req, res);
      });
  }
  const app = Fastify(options) as unknown as FastifyInstance;
  // Everything else on this listener: no route, in the JSON error shape, with the class header.
  app.setNotFoundHandler((_req, reply) => {
    reply.header(HEADER.containment, session.containment);
    sendServerError(reply, new Refusal('not_found'));
  });
  // Readiness for an orchestrator: untraced, and says nothing about the capsule. While the server
  // is stopping it answers 503 like every other request (the gate sits in front).
  app.get(HEALTH_PATH, { exposeHeadRoute: false }, (_req, reply) => {
    reply.header('content-type', 'application/json').header('cache-control', 'no-store').send('{"status":"ok"}');
  });
  if (extras.metrics && extras.serveMetrics) {
    const registry = extras.metrics.registry;
    // Untraced, like /healthz; counts only, never a path, a handle or an audience.
    app.get(METRICS_PATH, { exposeHeadRoute: false }, async (_req, reply) => {
      reply.header('content-type', registry.contentType).header('cache-control', 'no-store').send(await registry.metrics());
    });
  }
  app.register(resourcePlanes, { session, inflight, planes, metrics: extras.metrics });
  return { app, inflight };
}

/** Serves `session` on `listener` (see `bind`): both planes, or those `planes` names. */
export async function serve(
  session: Session,
  listener: Listener,
  logger: Logger | false = false,
  planes: PlaneSet = ALL_PLANES,
  extras: AppExtras = {},
): Promise<RunningServer> {
  // The card and the audience say where this capsule is: a session without that identity cannot serve.
  if (session.advertisedUrl === null) throw new Error('a session is served only with the advertised URL it was opened with');
  const advertisedUrl = session.advertisedUrl;
  const { app, inflight } = buildApp(session, logger, listener.server, planes, extras);
  await app.ready();
  let closing: Promise<void> | null = null;
  return {
    app,
    url: listener.url,
    advertisedUrl,
    close: () =>
      (closing ??= (async () => {
        inflight.closing = true;
        // Not closed before the drain: server.close() destroys every connection whose response has
        // ended, even while its body is still queued for the socket. New requests meanwhile get 503.
        await inflight.drained(DRAIN_TIMEOUT_MS);
        const closed = new Promise<void>((resolve) => listener.server.close(() => resolve()));
        // Whatever is still being sent (a client that reads slowly) is cut: shutdown has a bound.
        listener.server.closeAllConnections();
        await app.close();
        await closed;
      })()),
  };
}
