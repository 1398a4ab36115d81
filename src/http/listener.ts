// The capsule's HTTP listener: binds first (so the advertised URL, part of the session's identity,
// is known before the session exists), or takes a listening socket already bound (by the first
// stage of a confined launch, or by systemd), then serves it with the Fastify app of
// src/http/app.ts, which routes every request; stopping refuses new requests, lets the ones
// being answered finish (bounded), then closes.
import { listenFailure, type ListenerRole } from '../listen-failure.js';
import { unlinkSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { ALL_PLANES, type PlaneSet } from './plugin.js';
import type { Session } from '../session/session.js';
import { buildApp, buildMetricsApp, type AppOptions } from './app.js';
import type { Metrics } from './metrics.js';
import { createLimitedServer } from './limited-server.js';

export { HEALTH_PATH, METRICS_PATH } from './app.js';

export interface Listener {
  server: Server;
  /** The URL the listener is bound to (`unix:<path>` for a unix socket). */
  url: string;
  /** `http://localhost:<bound port>`: what a capsule advertises unless told otherwise. */
  defaultAdvertisedUrl: string;
  /** A socket file to remove once closed (one the server bound but libuv did not). */
  unlinkOnClose?: string | null;
}

/** A listening socket bound elsewhere (src/launch/sockets.ts), served as it is: never bound again. */
export interface InheritedSocket {
  fd: number;
  url: string;
  defaultAdvertisedUrl: string;
  unlinkOnClose: string | null;
}

/**
 * Serves an inherited listening socket: Node adopts the descriptor (listen({ fd })) and starts
 * accepting, connections already waiting in its backlog included.
 */
export async function adopt(socket: InheritedSocket): Promise<Listener> {
  const server = createLimitedServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ fd: socket.fd }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return { server, url: socket.url, defaultAdvertisedUrl: socket.defaultAdvertisedUrl, unlinkOnClose: socket.unlinkOnClose };
}

/** Removes a listener's socket file after it closed (an inherited unix socket libuv did not bind). */
export function removeSocketFile(listener: Listener): void {
  if (!listener.unlinkOnClose) return;
  try {
    unlinkSync(listener.unlinkOnClose);
  } catch {
    // already gone
  }
}

/** Where to listen: a TCP address, or a unix socket path (created 0600). */
export type ListenAddress = { host: string; port: number } | { path: string };

/** Binds an HTTP listener; no request is answered until `serve` attaches an app to it. */
export async function bind(address: ListenAddress = { host: '127.0.0.1', port: 0 }, role: ListenerRole = 'peer'): Promise<Listener> {
  const server = createLimitedServer();
  // A unix socket is created with no permission for anyone but this user: the umask is narrowed for
  // the listen alone (the process is single-threaded here), so there is no window before a chmod.
  const previousUmask = 'path' in address ? process.umask(0o177) : null;
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error: NodeJS.ErrnoException) =>
        reject(error.syscall === 'listen' && error.code ? listenFailure(role, address, error.code, error.message) : error),
      );
      server.listen('path' in address ? { path: address.path } : { host: address.host, port: address.port }, () => {
        server.removeAllListeners('error');
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
  /** The Fastify app that answers every request on the listener. */
  app: FastifyInstance;
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
  extras: Pick<AppOptions, 'metrics' | 'serveMetrics' | 'accessLog' | 'accessLogger'> = {},
): Promise<RunningServer> {
  // The card and the audience say where this capsule is: a session without that identity cannot serve.
  if (session.advertisedUrl === null) throw new Error('a session is served only with the advertised URL it was opened with');
  const { app } = await buildApp(session, { logger, planes, ...extras, server: listener.server });
  await app.ready();
  return running(app, listener, session.advertisedUrl);
}

/** A ready app on its listener, and the one way to close both. */
function running(app: FastifyInstance, listener: Listener, advertisedUrl: string): RunningServer {
  let closing: Promise<void> | null = null;
  return {
    app,
    url: listener.url,
    advertisedUrl,
    close: () =>
      (closing ??= (async () => {
        // The app's close runs the planes' preClose: new requests get 503, the ones being answered
        // finish (bounded). The listener is closed only after that drain: server.close() destroys
        // every connection whose response has ended, even while its body is still queued.
        await app.close();
        const closed = new Promise<void>((resolve) => listener.server.close(() => resolve()));
        // Whatever is still being sent (a client that reads slowly) is cut: shutdown has a bound.
        listener.server.closeAllConnections();
        await closed;
        removeSocketFile(listener);
      })()),
  };
}

/**
 * A listener that serves `GET /metrics` and nothing else (`--metrics-listen`), so Prometheus can
 * scrape over TCP while the operator plane stays on its unix socket. Untraced, like /metrics on
 * the other listeners; every other target is a 404 in the spec's shape.
 */
export async function serveMetrics(session: Session, listener: Listener, metrics: Metrics, logger: Logger | false = false): Promise<RunningServer> {
  const app = buildMetricsApp(metrics, logger, listener.server);
  await app.ready();
  return running(app, listener, session.advertisedUrl ?? listener.defaultAdvertisedUrl);
}
