// Both planes and the agent card as one Fastify plugin (`resourcePlanes`), registrable into any
// Fastify 5 app, and the only code that answers a plane request: the CLI's server is a Fastify app
// that registers it like any host would (src/server/app.ts). Routing works on the raw request
// target (no router decoding or normalising decides anything; a `prefix` is cut from it byte for
// byte), every method reaches the planes (a write verb, HEAD included, is a 405, not a 404),
// bodies are never parsed, every request is traced as the spec says, and every request passes
// admission (src/planes/admission.ts). The routes, hooks, parsers and error handler live in an
// encapsulated context of their own: the host app's routes are left exactly as they were, while
// the host's hooks (an auth check, a logger) do run on the planes' routes.
import { METHODS } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { Refusal, renderHttp } from '../codes.js';
import { openSession, type SessionOptions } from '../launch/open-session.js';
import { requestPath } from '../paths.js';
import type { Metrics } from '../server/metrics.js';
import { DRAIN_TIMEOUT_MS } from '../server/limits.js';
import { Session } from '../session.js';
import { CARD_PATH, isFilesPath, isPeerPath, RESOURCES_PREFIX } from '../wire.js';
import { Admission, rawTarget } from './admission.js';
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

/** What the planes' handlers share for one registration. */
export interface PlaneContext {
  session: Session;
  metrics?: Metrics;
  /**
   * Whether a read may use a buffer a finished response gave back. Only where no hook can keep a
   * payload past its response (the CLI's app): a host's onSend hook may hold the Buffer it is
   * handed, and a reused one would later hold another file's bytes.
   */
  reuseBuffers: boolean;
}

export interface PlanesOptions {
  /** A session the caller opened (openSession) and closes after the app: borrowed. */
  session?: Session;
  /**
   * Or the options of one the plugin opens at `register` and closes with the app (`session_end`
   * written, the key zeroed): owned. Without `advertisedUrl` no agent card is served.
   */
  open?: SessionOptions;
  /** Default: both planes (and the card, which goes with the peer plane). */
  planes?: PlaneSet;
  /** Counts answers when given (src/server/metrics.ts). */
  metrics?: Metrics;
  /** Routes under this path (`/cap` serves `/cap/resources/files`); cut from the raw target byte for byte. */
  prefix?: string;
}

/** What the plugin adds to the app: the session it serves. */
export interface ResourcePlanesDecoration {
  session: Session;
}

declare module 'fastify' {
  interface FastifyInstance {
    resourcePlanes: ResourcePlanesDecoration;
  }
}

/** Set by the CLI's app, which admits every request at its root and adds no payload-keeping hook. */
export const APP_OWNED = Symbol('capsule-resource-plane.appOwned');
interface AppOwned {
  admission: Admission;
  reuseBuffers: boolean;
}
type AllOptions = PlanesOptions & { [APP_OWNED]?: AppOwned };

function invalid(message: string): Error {
  return new TypeError(`capsule-resource-plane: ${message}`);
}

/** Checks the options at `register`, so a mistake is an error there, not a 500 on every request. */
function validate(opts: AllOptions): void {
  if (opts === null || typeof opts !== 'object') throw invalid('options must be an object with `session` or `open`');
  if ((opts.session === undefined) === (opts.open === undefined)) {
    throw invalid('pass exactly one of `session` (a Session from openSession, which you close) or `open` (session options; the plugin opens and closes it)');
  }
  if (opts.session !== undefined) {
    if (!(opts.session instanceof Session)) throw invalid('`session` must be a Session from openSession() or launch()');
    if (opts.session.isClosed) throw invalid('`session` is already closed');
  }
  if (opts.open !== undefined && (opts.open === null || typeof opts.open !== 'object')) throw invalid('`open` must be session options ({ workdir, manifest, ... })');
  if (opts.planes !== undefined) {
    const p = opts.planes as unknown as Record<string, unknown>;
    if (p === null || typeof p !== 'object' || typeof p.files !== 'boolean' || typeof p.peer !== 'boolean') {
      throw invalid('`planes` must be { files: boolean, peer: boolean }');
    }
  }
  if (opts.metrics !== undefined && typeof (opts.metrics as Metrics | null)?.answered !== 'function') {
    throw invalid('`metrics` must come from createMetrics()');
  }
  if (opts.prefix !== undefined && (typeof opts.prefix !== 'string' || !/^(\/[^/?#%\\\s]+)*$/.test(opts.prefix))) {
    throw invalid("`prefix` must be a path like '/cap': segments after '/', no trailing '/', no '%', '?', '#', '\\\\' or spaces");
  }
}

/** Routes one request under /resources by its raw path (prefix already cut); the planes do the rest. */
async function dispatch(ctx: PlaneContext, planes: PlaneSet, path: string, method: string, reply: PlaneReply): Promise<void> {
  // A plane this listener does not serve is not there at all: no route, no trace.
  if ((isFilesPath(path) && !planes.files) || (isPeerPath(path) && !planes.peer)) {
    sendServerError(reply, new Refusal('not_found'));
    return;
  }
  if (isFilesPath(path)) return handleFiles(ctx, method, path, reply);
  if (isPeerPath(path)) return handleRedeem(ctx, method, path, reply);
  // Anything else under /resources/: no plane, no trace; still no write verb.
  sendError(reply, renderHttp('files', new Refusal(method !== 'GET' ? 'method_not_allowed' : 'not_found')));
}

async function planesPlugin(app: FastifyInstance, options: PlanesOptions): Promise<void> {
  const opts = options as AllOptions;
  validate(opts);
  const owned = opts.open !== undefined;
  const session = opts.session ?? (await openSession(opts.open!));
  const planes = opts.planes ?? ALL_PLANES;
  const appOwned = opts[APP_OWNED];
  const admission = appOwned?.admission ?? new Admission(session.containment);
  const ctx: PlaneContext = { session, metrics: opts.metrics, reuseBuffers: appOwned?.reuseBuffers ?? false };
  app.decorate('resourcePlanes', { session });

  // Stopping: new requests are refused, the ones being answered finish (bounded); an owned
  // session then writes session_end and zeroes its key.
  app.addHook('preClose', async () => {
    admission.closing = true;
    if (owned) session.beginStopping();
    await admission.drained(DRAIN_TIMEOUT_MS);
  });
  if (owned) app.addHook('onClose', async () => session.close('stopped'));

  await app.register(
    async (planesApp) => {
      // The CLI's app admits every request at its root; anywhere else the plugin admits its own.
      if (!appOwned) admission.install(planesApp);
      const prefix = planesApp.prefix;
      // Every method Node parses must reach the planes (a PROPFIND is a 405, not a 404), so the
      // ones Fastify does not know are registered. QUERY is re-registered as bodiless: as a body
      // method Fastify refuses it with a 500 before any handler when it carries no content-type.
      // CONNECT is bodiless too: its socket has left Node's parser (see answerConnect).
      for (const method of METHODS) {
        if (planesApp.supportedMethods.includes(method)) continue;
        planesApp.addHttpMethod(method, { hasBody: method !== 'CONNECT' });
      }
      planesApp.addHttpMethod('QUERY', { hasBody: false, overrideExisting: true });
      // No verb here takes a body: accept any content type without reading it, so a POST is
      // answered 405 by the plane rather than 415 or 413 by the framework.
      planesApp.removeAllContentTypeParsers();
      planesApp.addContentTypeParser('*', (_req, _payload, done) => done(null));

      const route = (request: FastifyRequest, reply: FastifyReply): Promise<void> | void => {
        const target = requestPath(rawTarget(request.raw));
        // The router matched a decoded form; the planes serve only what the raw target says.
        if (!target.startsWith(prefix) || !target.slice(prefix.length).startsWith(RESOURCES_PREFIX)) {
          sendServerError(reply, new Refusal('not_found'));
          return;
        }
        // Settled once the response is over, not when the body is handed over: a streamed body is
        // still being sent when the plane returns, and Fastify would otherwise answer again.
        return dispatch(ctx, planes, target.slice(prefix.length), request.raw.method ?? 'GET', fastifyPlaneReply(reply)).then(
          () => new Promise<void>((resolve) => reply.then(resolve, () => resolve())),
        );
      };
      // exposeHeadRoute off: HEAD is a method like any other here, answered 405 by the planes.
      const options = { exposeHeadRoute: false };
      planesApp.all(RESOURCES_PREFIX, options, route);
      planesApp.all(`${RESOURCES_PREFIX}/*`, options, route);
      // The card is how peers find this capsule's identity: it goes with the peer plane, and only
      // when the session says where it is reachable.
      if (planes.peer && session.advertisedUrl !== null) {
        const card = Buffer.from(JSON.stringify(agentCard(session)));
        planesApp.get(CARD_PATH, options, (_req, reply) => {
          fastifyPlaneReply(reply).send(200, [['content-type', 'application/json']], card);
        });
      }
    },
    { prefix: opts.prefix ?? '' },
  );
}

/**
 * The planes as a Fastify plugin: `app.register(resourcePlanes, { session })`. See the README's
 * "Use it as a Fastify plugin".
 */
export const resourcePlanes = fp(planesPlugin, { name: 'capsule-resource-plane', fastify: '5.x' });
