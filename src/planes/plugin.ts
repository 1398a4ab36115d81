// Both planes and the agent card as one Fastify plugin, registrable into any Fastify 5 app.
// Routing works on the raw request target (no router decoding or normalising decides anything),
// every method reaches the planes (so a write verb, HEAD included, is a 405, not a 404), bodies are
// never parsed, every request is traced as the spec says, and every response passes one shutdown
// gate and one in-flight count. The plugin is encapsulated: its hooks, body parsing and error
// handling apply to its own routes only, never to the host app's. One guarantee needs the app's
// constructor: a target the router cannot decode (`/resources/files/x%ZZ`) never reaches a route,
// so pass `frameworkErrors: planesFrameworkErrors(session)` (src/server/listener.ts's app does).
import { METHODS } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Refusal, renderHttp } from '../codes.js';
import { requestPath } from '../paths.js';
import { redactHandles } from '../redact.js';
import type { Metrics } from '../server/metrics.js';
import type { Session } from '../session.js';
import { CARD_PATH, HEADER, isFilesPath, isPeerPath, RESOURCES_PREFIX } from '../wire.js';
import { agentCard } from './card.js';
import { handleFiles } from './files.js';
import { handleRedeem } from './redeem.js';
import { fastifyPlaneReply, sendError, type PlaneReply } from './reply.js';

/** Answers with a catalogued server-context code (route 404, 503 while closing, 500). */
export function sendServerError(reply: FastifyReply | PlaneReply, refusal: Refusal): void {
  sendError('client' in reply ? reply : fastifyPlaneReply(reply), renderHttp('server', refusal));
}

/**
 * Which planes a listener serves. With a separate operator listener, the peer listener serves the
 * peer plane and the card only, and the operator listener the operator plane only.
 */
export interface PlaneSet {
  files: boolean;
  peer: boolean;
}

export const ALL_PLANES: Readonly<PlaneSet> = Object.freeze({ files: true, peer: true });

/** What dispatch needs of a request: its raw target, method and audience header. */
export interface PlaneRequest {
  url?: string;
  method?: string;
  httpVersionMajor?: number;
  headers: Record<string, string | string[] | undefined>;
}

/** Routes one request under /resources by its raw path; the planes do the rest. */
export async function dispatch(session: Session, req: PlaneRequest, reply: PlaneReply, planes: PlaneSet = ALL_PLANES, metrics?: Metrics): Promise<void> {
  // HTTP/0.9 is how Node reads a request line cut by a bare LF (see src/server/listener.ts): refused.
  if (req.httpVersionMajor !== undefined && req.httpVersionMajor !== 1) {
    sendServerError(reply, new Refusal('bad_request'));
    return;
  }
  const path = requestPath(req.url ?? '/');
  const method = req.method ?? 'GET';
  // A plane this listener does not serve is not there at all: no route, no trace.
  if ((isFilesPath(path) && !planes.files) || (isPeerPath(path) && !planes.peer)) {
    sendServerError(reply, new Refusal('not_found'));
    return;
  }
  if (isFilesPath(path)) return handleFiles(session, method, path, reply, metrics);
  if (isPeerPath(path)) {
    const audience = req.headers[HEADER.audience];
    return handleRedeem(session, method, path, Array.isArray(audience) ? audience.join(', ') : audience, reply, metrics);
  }
  // Anything else under /resources/: no plane, no trace; still no write verb.
  sendError(reply, renderHttp('files', new Refusal(method !== 'GET' ? 'method_not_allowed' : 'not_found')));
}

/** True for a raw target that belongs to a plane (answered in the planes' shape, never generically). */
export function isPlaneTarget(rawUrl: string): boolean {
  const path = requestPath(rawUrl);
  return path === RESOURCES_PREFIX || path.startsWith(`${RESOURCES_PREFIX}/`);
}

/**
 * Counts responses still being sent, so that shutdown lets them finish. Node's server.close()
 * destroys any connection whose response has *ended*, even while its body is still queued for
 * the socket, which would cut a large read mid-body after its trace line said it was sent.
 */
export class InFlight {
  private count = 0;
  private waiters: Array<() => void> = [];
  closing = false;
  /** Set when the listener itself gates and counts (src/server/listener.ts); the plugin's hook then does not. */
  gatedAtListener = false;

  track(res: { once(event: 'close', fn: () => void): unknown }): void {
    this.count += 1;
    res.once('close', () => {
      this.count -= 1;
      if (this.count === 0) for (const w of this.waiters.splice(0)) w();
    });
  }

  /** Resolves once every tracked response is done, or after `timeoutMs`. */
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
}

export interface PlanesOptions {
  session: Session;
  /** The gate and count every response passes; give one to stop the planes gracefully (`inflight.closing = true`). */
  inflight?: InFlight;
  /** Default: both planes (and the card, which goes with the peer plane). */
  planes?: PlaneSet;
  /** Counts answers when given (src/server/metrics.ts). */
  metrics?: Metrics;
}

/** Registers both planes and the agent card. */
export async function resourcePlanes(app: FastifyInstance, opts: PlanesOptions): Promise<void> {
  const { session } = opts;
  const inflight = opts.inflight ?? new InFlight();
  const planes = opts.planes ?? ALL_PLANES;
  // Every method Node parses must reach the planes (a PROPFIND is a 405, not a 404), so the ones
  // Fastify does not know are registered. QUERY is re-registered as bodiless: as a body method
  // Fastify refuses it with a 500 before any handler when it carries no content-type.
  for (const method of METHODS) {
    if (method === 'CONNECT' || app.supportedMethods.includes(method)) continue;
    app.addHttpMethod(method, { hasBody: true });
  }
  app.addHttpMethod('QUERY', { hasBody: false, overrideExisting: true });

  // No verb here takes a body: accept any content type without reading it, so a POST is answered
  // 405 by the plane rather than 415 or 413 by the framework.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null));

  app.addHook('onRequest', async (_req, reply) => {
    if (inflight.gatedAtListener) return undefined;
    if (inflight.closing) {
      reply.header('connection', 'close');
      sendServerError(reply, new Refusal('shutting_down'));
      return reply;
    }
    inflight.track(reply.raw);
    return undefined;
  });
  app.addHook('onSend', async (_req, reply, payload) => {
    if (!reply.hasHeader(HEADER.containment)) reply.header(HEADER.containment, session.containment);
    return payload;
  });
  app.addHook('onResponse', async (req, reply) => {
    // Tokens travel in redeem URLs: the log line carries the handle id instead. Debug level: the
    // trace is the record of every request; this is a diagnostic echo of it.
    req.log.debug({ method: req.raw.method, url: redactHandles(req.raw.url ?? ''), status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request');
  });
  app.setErrorHandler((error, req, reply) => {
    req.log.error({ err: redactHandles(String(error)) }, 'unhandled error');
    sendServerError(reply, new Refusal('io_error', 'internal error'));
  });

  // exposeHeadRoute off: HEAD is a method like any other here, answered 405 by the planes.
  const route = { exposeHeadRoute: false };
  app.all(RESOURCES_PREFIX, route, (req, reply) => dispatch(session, req.raw, fastifyPlaneReply(reply), planes, opts.metrics));
  app.all(`${RESOURCES_PREFIX}/*`, route, (req, reply) => dispatch(session, req.raw, fastifyPlaneReply(reply), planes, opts.metrics));
  // The card is how peers find this capsule's identity: it belongs with the peer plane's listener.
  if (planes.peer) {
    app.get(CARD_PATH, route, (_req, reply) => {
      fastifyPlaneReply(reply).send(200, [['content-type', 'application/json']], Buffer.from(JSON.stringify(agentCard(session))));
    });
  }
}

/**
 * The `frameworkErrors` option the planes need from the app's constructor: a request whose target
 * the router cannot decode is still answered by the planes from its raw path (under /resources),
 * or as a JSON 400 that echoes nothing (a target can carry a token).
 */
export function planesFrameworkErrors(session: Session, planes: PlaneSet = ALL_PLANES, log?: { error(o: object, m: string): void }) {
  return (_error: unknown, req: FastifyRequest, reply: FastifyReply): void => {
    // These replies skip the onSend hooks, so the class header is set here.
    reply.header(HEADER.containment, session.containment);
    if (isPlaneTarget(req.raw.url ?? '/')) {
      dispatch(session, req.raw, fastifyPlaneReply(reply), planes).catch((err: unknown) => {
        (log ?? req.log).error({ err: redactHandles(String(err)) }, 'unhandled error');
        sendServerError(reply, new Refusal('io_error', 'internal error'));
      });
      return;
    }
    sendServerError(reply, new Refusal('bad_request'));
  };
}
