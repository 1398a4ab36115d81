// The capsule's HTTP listener: Fastify configured so that the planes see the raw request target
// (no router decoding or normalising decides anything), every method reaches the planes (so a
// write verb is a 405, not a 404), and bodies are never parsed (no verb here takes one).
import { METHODS } from 'node:http';
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { agentCard, CARD_PATH } from './planes/card.js';
import { handleFiles, isFilesPath } from './planes/files.js';
import { AUDIENCE_HEADER, handlePeer, isPeerPath } from './planes/peer.js';
import { send, sendError } from './planes/reply.js';
import { PlaneError } from './errors.js';
import { requestPath } from './paths.js';
import { redactHandles } from './peer/handle.js';
import type { Session } from './session.js';

export interface ServeOptions {
  host?: string;
  port?: number;
  /** What the agent card and the audience say; default `http://localhost:<bound port>`. */
  advertise?: string;
  /** A pino logger (stderr in the CLI); false for none. */
  logger?: Logger | false;
}

export interface RunningServer {
  app: FastifyInstance;
  /** The URL the listener is bound to. */
  url: string;
  /** The URL this capsule advertises. */
  advertisedUrl: string;
  close(): Promise<void>;
}

function jsonError(reply: FastifyReply, status: number, code: string, message: string): FastifyReply {
  return send(reply, status, [['content-type', 'application/json']], Buffer.from(JSON.stringify({ error: code, message })));
}

/** Routes one request under /resources by its raw path; the planes do the rest. */
async function dispatch(session: Session, req: FastifyRequest, reply: FastifyReply): Promise<void> {
  const path = requestPath(req.raw.url ?? '/');
  const method = req.raw.method ?? 'GET';
  if (isFilesPath(path)) return handleFiles(session, method, path, reply);
  if (isPeerPath(path)) {
    const audience = req.headers[AUDIENCE_HEADER];
    return handlePeer(session, method, path, Array.isArray(audience) ? audience.join(', ') : audience, reply);
  }
  // Anything else under /resources/: no plane, no trace; still no write verb.
  if (method !== 'GET') {
    sendError(reply, new PlaneError('files', 'method_not_allowed'));
    return;
  }
  sendError(reply, new PlaneError('files', 'not_found'));
}

/**
 * Counts responses still being sent, so that shutdown lets them finish. Node's server.close()
 * destroys any connection whose response has *ended*, even while its body is still queued for
 * the socket, which would cut a large read mid-body after its trace line said it was sent.
 */
class InFlight {
  private count = 0;
  private waiters: Array<() => void> = [];
  closing = false;

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

const inflight = new WeakMap<FastifyInstance, InFlight>();

export function buildApp(session: Session, logger: Logger | false = false): FastifyInstance {
  const app = Fastify({
    loggerInstance: logger || undefined,
    logger: logger ? undefined : false,
    // Fastify's own request lines would carry redeem URLs (tokens); onResponse logs a redacted one.
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
      const body = JSON.stringify({ error: 'bad_request', message: 'the request could not be parsed' });
      socket.end(
        `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\nx-murmur-containment: ${session.containment}\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    },
    requestTimeout: 30_000,
    // Malformed percent-encodings are rejected by the router before any handler; under
    // /resources/ they are still answered by the planes, in the spec's shape, from the raw path.
    frameworkErrors: (error, req, reply) => {
      // These replies skip the onSend hooks, so the class header is set here.
      reply.header('x-murmur-containment', session.containment);
      const path = requestPath(req.raw.url ?? '/');
      if (path === '/resources' || path.startsWith('/resources/')) {
        dispatch(session, req, reply).catch((err: unknown) => {
          req.log.error({ err: redactHandles(String(err)) }, 'unhandled error');
          jsonError(reply, 500, 'io_error', 'read failed: internal error');
        });
        return;
      }
      // Not echoed: the target could carry a token.
      jsonError(reply, 400, 'bad_request', 'the request target is malformed');
    },
  }) as unknown as FastifyInstance;

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

  const responses = new InFlight();
  inflight.set(app, responses);
  app.addHook('onRequest', async (_req, reply) => {
    if (responses.closing) {
      reply.header('connection', 'close');
      jsonError(reply, 503, 'shutting_down', 'the capsule is shutting down');
      return reply;
    }
    responses.track(reply.raw);
    return undefined;
  });

  app.addHook('onSend', async (_req, reply, payload) => {
    if (!reply.hasHeader('x-murmur-containment')) reply.header('x-murmur-containment', session.containment);
    return payload;
  });
  app.addHook('onResponse', async (req, reply) => {
    // Tokens travel in redeem URLs: the log line carries the handle id instead. Debug level: the
    // trace is the record of every request; this is a diagnostic echo of it.
    req.log.debug({ method: req.raw.method, url: redactHandles(req.raw.url ?? ''), status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request');
  });
  app.setNotFoundHandler((_req, reply) => {
    jsonError(reply, 404, 'not_found', 'no such route');
  });
  app.setErrorHandler((error, req, reply) => {
    req.log.error({ err: redactHandles(String(error)) }, 'unhandled error');
    jsonError(reply, 500, 'io_error', 'read failed: internal error');
  });

  app.all('/resources', (req, reply) => dispatch(session, req, reply));
  app.all('/resources/*', (req, reply) => dispatch(session, req, reply));
  app.get(CARD_PATH, (_req, reply) => {
    send(reply, 200, [['content-type', 'application/json']], Buffer.from(JSON.stringify(agentCard(session))));
  });
  return app;
}

export async function serve(session: Session, opts: ServeOptions = {}): Promise<RunningServer> {
  const app = buildApp(session, opts.logger ?? false);
  await app.listen({ host: opts.host ?? '127.0.0.1', port: opts.port ?? 0 });
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('the listener has no TCP address');
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  const advertisedUrl = opts.advertise ?? `http://localhost:${address.port}`;
  session.advertisedUrl = advertisedUrl;
  return {
    app,
    url,
    advertisedUrl,
    // New requests are refused first, the ones being answered finish (bounded), then the
    // listener closes.
    close: async () => {
      const responses = inflight.get(app)!;
      responses.closing = true;
      await responses.drained(30_000);
      await app.close();
    },
  };
}
