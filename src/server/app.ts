// The Fastify app of a capsule's listener: everything that is not a plane (readiness, metrics, the
// agent card, 404s in the JSON error shape), plus the planes themselves as a plugin for whoever
// embeds them (`buildApp`). The app-level options here are the ones the planes' guarantees need
// beyond the plugin: parser errors answered in the spec's shape without logging raw bytes,
// malformed targets under /resources still answered by the planes from the raw path, no HEAD
// routes. The CLI's server (src/server/listener.ts) answers /resources before any framework and loads this
// module only when the first other request arrives.
import type { Server } from 'node:http';
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { Logger } from 'pino';
import { Refusal } from '../codes.js';
import type { Metrics } from './metrics.js';
import { ALL_PLANES, InFlight, planesFrameworkErrors, resourcePlanes, sendServerError, type PlaneSet } from '../planes/plugin.js';
import { attachGate, clientErrorResponder, HEALTH_PATH, METRICS_PATH, type Handler } from '../planes/admission.js';
import type { Session } from '../session.js';
import { HEADER } from '../wire.js';

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
    clientErrorHandler: clientErrorResponder(session, logger),
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

/** The app's own routes, and the planes for whatever reaches the app under /resources. */
function routes(app: FastifyInstance, session: Session, inflight: InFlight, planes: PlaneSet, extras: AppExtras): void {
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
    options.serverFactory = (handler) => {
      attachGate(server, session, inflight, planes, logger, extras.metrics, handler);
      return server;
    };
  }
  const app = Fastify(options) as unknown as FastifyInstance;
  routes(app, session, inflight, planes, extras);
  return { app, inflight };
}

/**
 * The app src/server/listener.ts loads on first use, for a listener whose gate, raw lane and parser-error
 * answers are already attached: it only takes the handler for what the gate passes on.
 */
export async function buildLazyApp(
  session: Session,
  logger: Logger | false,
  server: Server,
  planes: PlaneSet,
  extras: AppExtras,
  inflight: InFlight,
): Promise<{ app: FastifyInstance; handler: Handler }> {
  const options = appOptions(session, logger, planes);
  let handler: Handler | null = null;
  options.serverFactory = (h) => {
    handler = h;
    return server;
  };
  // Fastify adds its own clientError listener to the server; the one attached at serve() answers.
  const before = new Set(server.listeners('clientError'));
  const app = Fastify(options) as unknown as FastifyInstance;
  for (const l of server.listeners('clientError')) if (!before.has(l)) server.removeListener('clientError', l as (...args: unknown[]) => void);
  routes(app, session, inflight, planes, extras);
  await app.ready();
  if (!handler) throw new Error('Fastify did not hand over its request handler');
  return { app, handler };
}
