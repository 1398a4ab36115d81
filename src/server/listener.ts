// The capsule's HTTP listener: binds first (so the advertised URL, part of the session's identity,
// is known before the session exists), then serves. Every request passes one gate (503 while
// stopping, the in-flight count, HTTP/1.x only); requests under /resources go straight to the
// planes on the bare Node request and response, so the hot path pays for no framework; everything
// else (readiness, metrics, the card, 404s) is the Fastify app of src/server/app.ts, loaded when the first
// such request arrives (start-up and idle memory do not pay for it either). The gate and the
// parser-error answers are src/planes/admission.ts.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { Refusal } from '../codes.js';
import { attachGate, clientErrorResponder, type Handler } from '../planes/admission.js';
import { DRAIN_TIMEOUT_MS, LIMITS } from './limits.js';
import type { Metrics } from './metrics.js';
import { ALL_PLANES, InFlight, sendServerError, type PlaneSet } from '../planes/plugin.js';
import { rawPlaneReply } from '../planes/reply.js';
import { redactHandles } from '../redact.js';
import type { Session } from '../session.js';

export { DRAIN_TIMEOUT_MS, LIMITS } from './limits.js';
export { HEALTH_PATH, METRICS_PATH } from '../planes/admission.js';

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
  /** The Fastify app behind the listener's non-plane routes, built on first use. */
  app(): Promise<FastifyInstance>;
  /** The URL the listener is bound to. */
  url: string;
  /** The URL this capsule advertises (the session's identity). */
  advertisedUrl: string;
  /** New requests are refused first, the ones being answered finish (bounded), then the listener closes. */
  close(): Promise<void>;
}

/** Serves `session` on `listener` (see `bind`): both planes, or those `planes` names. */
export async function serve(
  session: Session,
  listener: Listener,
  logger: Logger | false = false,
  planes: PlaneSet = ALL_PLANES,
  extras: { metrics?: Metrics; serveMetrics?: boolean } = {},
): Promise<RunningServer> {
  // The card and the audience say where this capsule is: a session without that identity cannot serve.
  if (session.advertisedUrl === null) throw new Error('a session is served only with the advertised URL it was opened with');
  const advertisedUrl = session.advertisedUrl;
  const inflight = new InFlight();
  inflight.gatedAtListener = true;
  listener.server.on('clientError', clientErrorResponder(session, logger));
  let loaded: Promise<{ app: FastifyInstance; handler: Handler }> | null = null;
  const loadApp = () =>
    (loaded ??= import('./app.js').then(({ buildLazyApp }) => buildLazyApp(session, logger, listener.server, planes, extras, inflight)));
  attachGate(listener.server, session, inflight, planes, logger, extras.metrics, (req, res) => {
    loadApp().then(
      ({ handler }) => handler(req, res),
      (err: unknown) => {
        if (logger) logger.error({ err: redactHandles(String(err)) }, 'the app could not be loaded');
        sendServerError(rawPlaneReply(req, res, session.containment), new Refusal('io_error', 'internal error'));
      },
    );
  });
  let closing: Promise<void> | null = null;
  return {
    app: async () => (await loadApp()).app,
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
        if (loaded) await (await loaded.catch(() => null))?.app.close();
        await closed;
      })()),
  };
}
