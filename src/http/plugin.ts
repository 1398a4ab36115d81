// Both planes and the agent card as one Fastify plugin (`resourcePlanes`), registrable into any
// Fastify 5 app, and the only code that answers a plane request: the CLI's server is a Fastify app
// that registers it like any host would (src/http/app.ts). Routing works on the raw request
// target (no router decoding or normalising decides anything; a `prefix` is cut from it byte for
// byte), every method reaches the planes (a write verb, HEAD included, is a 405, not a 404),
// bodies are never parsed, every request is traced as the spec says, and every request passes
// admission (src/http/admission.ts). The routes, hooks, parsers and error handler live in an
// encapsulated context of their own: the host app's routes are left exactly as they were, while
// the host's hooks (an auth check, a logger) do run on the planes' routes.
import { METHODS } from './node-http.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import createError from '@fastify/error';
import fp from 'fastify-plugin';
import { Refusal, renderHttp } from '../codes.js';
import { openSession, type SessionOptions } from '../session/open-session.js';
import type { Metrics } from './metrics.js';
import { ALL_PLANES, type PlaneContext, type PlaneSet } from './context.js';

export { ALL_PLANES, type PlaneContext, type PlaneSet } from './context.js';
import { DRAIN_TIMEOUT_MS } from '../limits.js';
import { Session } from '../session/session.js';
import { CARD_PATH, RESOURCES_PREFIX, type PlaneTarget } from '../wire.js';
import { Admission } from './admission.js';
import { planeTargetOf } from './targets.js';
import { agentCard } from './card.js';
import { handleFiles } from './files.js';
import { handleRedeem } from './redeem.js';
import { fastifyPlaneReply, sendError, type PlaneReply } from './reply.js';

/** Answers with a catalogued server-context code (route 404, 503 while closing, 500). */
export function sendServerError(reply: FastifyReply | PlaneReply, refusal: Refusal): void {
  sendError('client' in reply ? reply : fastifyPlaneReply(reply), renderHttp('server', refusal));
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
  /** Counts answers when given (src/http/metrics.ts). */
  metrics?: Metrics;
  /** Routes under this path (`/cap` serves `/cap/resources/files`); cut from the raw target byte for byte. */
  prefix?: string;
  /**
   * An Admission your app installed at its root (`admission.install(app)`), so that every route of
   * the app, and the answers Fastify gives without a route, pass the same gate (buildApp does
   * this). The plugin then installs none of its own, and drains this one when the app closes.
   * Default: the plugin admits the requests on its own routes.
   */
  admission?: Admission;
  /**
   * Let reads reuse the chunk buffers of finished responses. Only when no hook of the app keeps a
   * payload past its response (an onSend hook holding the Buffer it is handed would later see
   * another file's bytes in it). Default false; buildApp's app, which adds no such hook, sets it.
   */
  reuseBuffers?: boolean;
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

/**
 * A mistake in the options, thrown at `register` (so `app.ready()` rejects): a TypeError with a
 * stable `code`, in the shape @fastify/error gives Fastify's own errors.
 */
export const PlanesOptionsError = createError<[string]>('ERR_RESOURCE_PLANES_OPTIONS', 'capsule-resource-plane: %s', 500, TypeError);

function invalid(message: string): Error {
  return new PlanesOptionsError(message);
}

/** The options the plugin reads, and those Fastify's register passes along with them. */
const KNOWN_OPTIONS: readonly string[] = ['session', 'open', 'planes', 'metrics', 'prefix', 'admission', 'reuseBuffers', 'logLevel', 'logSerializers'];

/** An option name nothing reads (a typo like `prefx`) would otherwise be silently ignored. */
function unknownOption(opts: object): string | null {
  for (const key of Object.keys(opts)) {
    if (KNOWN_OPTIONS.includes(key)) continue;
    const near = KNOWN_OPTIONS.filter((k) => k.toLowerCase() === key.toLowerCase() || closeTo(key, k));
    return `unknown option \`${key}\`${near.length > 0 ? ` (did you mean \`${near[0]}\`?)` : ''}; the options are ${KNOWN_OPTIONS.slice(0, 7)
      .map((k) => `\`${k}\``)
      .join(', ')}`;
  }
  return null;
}

/** One edit apart (a letter dropped, added, changed or two swapped): enough for an option typo. */
function closeTo(a: string, b: string): boolean {
  if (Math.abs(a.length - b.length) > 1) return false;
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  const [x, y] = [a.slice(i), b.slice(i)];
  return x.slice(1) === y.slice(1) || x.slice(1) === y || x === y.slice(1) || (x[0] === y[1] && x[1] === y[0] && x.slice(2) === y.slice(2));
}

/** Checks the options at `register`, so a mistake is an error there, not a 500 on every request. */
function validate(opts: PlanesOptions): void {
  if (opts === null || typeof opts !== 'object') throw invalid('options must be an object with `session` or `open`');
  const unknown = unknownOption(opts);
  if (unknown !== null) throw invalid(unknown);
  if ((opts.session === undefined) === (opts.open === undefined)) {
    throw invalid('pass exactly one of `session` (a Session from openSession, which you close) or `open` (session options; the plugin opens and closes it)');
  }
  if (opts.session !== undefined) {
    if (!(opts.session instanceof Session)) throw invalid('`session` must be a Session from openSession() or launch()');
    if (opts.session.isClosed) throw invalid('`session` is already closed');
  }
  if (opts.open !== undefined && (opts.open === null || typeof opts.open !== 'object'))
    throw invalid('`open` must be session options ({ workdir, manifest, ... })');
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
  if (opts.admission !== undefined && !(opts.admission instanceof Admission)) throw invalid("`admission` must be an Admission installed at the app's root");
  if (opts.reuseBuffers !== undefined && typeof opts.reuseBuffers !== 'boolean') throw invalid('`reuseBuffers` must be a boolean');
}

/** Routes one request by the plane its raw target names; the planes do the rest. */
async function dispatch(ctx: PlaneContext, planes: PlaneSet, target: PlaneTarget, method: string, reply: PlaneReply): Promise<void> {
  switch (target.plane) {
    // A plane this listener does not serve is not there at all: no route, no trace.
    case 'files':
      if (!planes.files) return sendServerError(reply, new Refusal('not_found'));
      return handleFiles(ctx, method, target.rest, reply);
    case 'peer':
      if (!planes.peer) return sendServerError(reply, new Refusal('not_found'));
      return handleRedeem(ctx, method, target.rest, reply);
    default:
      // Anything else under /resources/: no plane, no trace; still no write verb.
      return sendError(reply, renderHttp('files', new Refusal(method !== 'GET' ? 'method_not_allowed' : 'not_found')));
  }
}

async function planesPlugin(app: FastifyInstance, opts: PlanesOptions): Promise<void> {
  validate(opts);
  const owned = opts.open !== undefined;
  const session = opts.session ?? (await openSession(opts.open!));
  const planes = opts.planes ?? ALL_PLANES;
  const hostAdmits = opts.admission !== undefined;
  const admission = opts.admission ?? new Admission(session.containment);
  const ctx: PlaneContext = { session, metrics: opts.metrics, reuseBuffers: opts.reuseBuffers ?? false };
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
      // An app that admits every request at its root (buildApp) passes its admission; else the plugin admits its own.
      if (!hostAdmits) admission.install(planesApp);
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
        const target = planeTargetOf(request.raw, prefix);
        // The router matched a decoded form; the planes serve only what the raw target says.
        if (target === null) {
          sendServerError(reply, new Refusal('not_found'));
          return;
        }
        // Settled once the response is over, not when the body is handed over: a streamed body is
        // still being sent when the plane returns, and Fastify would otherwise answer again.
        return dispatch(ctx, planes, target, request.raw.method ?? 'GET', fastifyPlaneReply(reply)).then(
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
