// The CLI's Fastify app: the planes' plugin registered like any host would, plus readiness, metrics
// and the 404, all behind one admission (src/http/admission.ts) installed at the root so every
// request on the listener passes it, including the ones Fastify answers without a route: a target
// under the planes its router cannot decode is routed anyway (the planes read the raw target), any
// other it refuses gets a 400, and a request Node's parser rejects is answered in the spec's shape.
import type { Server } from 'node:http';
import * as fastify from 'fastify';
import Fastify, { type FastifyInstance } from 'fastify';

// Absent before Fastify 5.11 (a namespace read, so an older peer's module still links).
const LogController = (fastify as { LogController?: typeof fastify.LogController }).LogController;
import type { Logger } from 'pino';
import { Refusal } from '../codes.js';
import { Admission, type AccessLogger } from './admission.js';
import { answerConnect } from './connect.js';
import { routeRawTargets } from './targets.js';
import { ALL_PLANES, resourcePlanes, sendServerError, type PlaneSet, type PlanesOptions } from './plugin.js';
import type { Session } from '../session/session.js';
import { attachRequestHandler, createLimitedServer, releaseRequests } from './limited-server.js';
import type { Metrics } from './metrics.js';

/** The readiness route. */
export const HEALTH_PATH = '/healthz';
/** Prometheus metrics, when enabled. */
export const METRICS_PATH = '/metrics';

export interface AppOptions {
  logger?: Logger | false;
  /** Default: both planes. */
  planes?: PlaneSet;
  /** Counted on this app's planes; `GET /metrics` is served here when `serveMetrics`. */
  metrics?: Metrics;
  serveMetrics?: boolean;
  /** One `info` line per request (default true); off, the same line is logged at `debug`. */
  accessLog?: boolean;
  /** Where access lines go (default `logger`): the CLI's is buffered. */
  accessLogger?: AccessLogger;
  /** A server already bound (src/http/listener.ts); default a new one, for `app.listen()`. */
  server?: Server;
}

/**
 * No route of these apps declares a schema, so Fastify's default compilers (Ajv and
 * fast-json-stringify, a third of its start-up) are never loaded; a route that did declare one
 * fails at registration, loudly, instead of going unvalidated.
 */
const noSchemas = (): never => {
  throw new Error('the resource-plane apps compile no schemas');
};
const NO_SCHEMA_COMPILERS = { compilersFactory: { buildValidator: noSchemas, buildSerializer: noSchemas } };

/** The app of one listener; `admission` is its gate, which `close` sets to stopping. */
export async function buildApp(session: Session, opts: AppOptions = {}): Promise<{ app: FastifyInstance; admission: Admission }> {
  const logger = opts.logger ?? false;
  const admission = new Admission(session.containment, { accessLog: opts.accessLog ?? true, log: logger ? (opts.accessLogger ?? logger) : undefined });
  const server = opts.server ?? createLimitedServer();
  const app = Fastify({
    loggerInstance: logger || undefined,
    logger: logger ? undefined : false,
    // request.log is the app's logger itself: nothing logs per request but the access line, which
    // names its request (reqId), so no child logger is built per request.
    childLoggerFactory: (parent) => parent,
    schemaController: NO_SCHEMA_COMPILERS,
    // Fastify's own request lines would carry redeem URLs (tokens); admission logs a redacted one.
    // LogController is Fastify 5.11's way to say so; older 5.x minors (a host's peer) take the flag.
    ...(typeof LogController === 'function' ? { logController: new LogController({ disableRequestLogging: true }) } : { disableRequestLogging: true }),
    exposeHeadRoutes: false,
    // While stopping, admission answers 503 in the spec's shape; Fastify's own would not be.
    return503OnClosing: false,
    rewriteUrl: routeRawTargets(),
    clientErrorHandler: admission.clientErrorHandler(logger ? (fields, message) => logger.debug(fields, message) : undefined),
    // A target the router cannot decode outside the planes, or one that is not a path: a 400.
    frameworkErrors: (_error, request, reply) => admission.admitUnrouted(request, reply, () => sendServerError(reply, new Refusal('bad_request'))),
    serverFactory: (handler) => {
      attachRequestHandler(server, handler);
      // An Expect other than 100-continue is refused by admission, in the spec's shape.
      server.on('checkExpectation', handler);
      // Node hands CONNECT to this event (and without a listener drops the connection unanswered).
      server.on('connect', answerConnect(handler));
      return server;
    },
  }) as unknown as FastifyInstance;
  admission.install(app);
  // Requests that reached the listener before the app existed are answered once it is ready.
  app.addHook('onReady', async () => releaseRequests(server));
  app.setNotFoundHandler((_req, reply) => sendServerError(reply, new Refusal('not_found')));
  // Readiness for an orchestrator: untraced, and says nothing about the capsule.
  app.get(HEALTH_PATH, { exposeHeadRoute: false }, (_req, reply) => {
    reply.header('content-type', 'application/json').header('cache-control', 'no-store').send('{"status":"ok"}');
  });
  if (opts.metrics && opts.serveMetrics) serveMetricsRoute(app, opts.metrics);
  // This app adds no hook that keeps a payload, so the planes may reuse read buffers.
  const planesOptions: PlanesOptions = { session, planes: opts.planes ?? ALL_PLANES, metrics: opts.metrics, admission, reuseBuffers: true };
  await app.register(resourcePlanes, planesOptions);
  return { app, admission };
}

/** The app of a metrics-only listener: GET /metrics, and a 404 in the spec's shape for anything else. */
export function buildMetricsApp(metrics: Metrics, logger: Logger | false, server: Server): FastifyInstance {
  const app = Fastify({
    loggerInstance: logger || undefined,
    logger: logger ? undefined : false,
    schemaController: NO_SCHEMA_COMPILERS,
    exposeHeadRoutes: false,
    serverFactory: (handler) => {
      attachRequestHandler(server, handler);
      return server;
    },
  }) as unknown as FastifyInstance;
  app.addHook('onReady', async () => releaseRequests(server));
  app.setNotFoundHandler((_req, reply) => sendServerError(reply, new Refusal('not_found')));
  serveMetricsRoute(app, metrics);
  return app;
}

/** GET /metrics: untraced, like /healthz; counts only, never a path, a handle or an audience. */
function serveMetricsRoute(app: FastifyInstance, metrics: Metrics): void {
  const registry = metrics.registry;
  app.get(METRICS_PATH, { exposeHeadRoute: false }, async (_req, reply) => {
    reply
      .header('content-type', registry.contentType)
      .header('cache-control', 'no-store')
      .send(await registry.metrics());
  });
}
