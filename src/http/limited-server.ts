// The bare HTTP server that applies the listener's bounds (src/limits.ts), and parks the requests
// that arrive before the app is ready.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from './node-http.js';
import { LIMITS } from '../limits.js';

/**
 * An HTTP server with the limits above. Node's own answers are turned off where admission answers
 * in the spec's shape instead: a missing Host (Node would write a bare 400) and an unknown Expect
 * (a bare 417) reach the app, which refuses them.
 */
export function createLimitedServer(): Server {
  return parkEarlyRequests(createBareLimitedServer());
}

function createBareLimitedServer(): Server {
  const server = createServer({
    requestTimeout: LIMITS.requestTimeoutMs,
    headersTimeout: LIMITS.headersTimeoutMs,
    keepAliveTimeout: LIMITS.keepAliveTimeoutMs,
    maxHeaderSize: LIMITS.maxHeaderBytes,
    requireHostHeader: false,
  });
  server.maxConnections = LIMITS.maxConnections;
  // Inactivity on the socket, reading or writing: a response that is not drained frees its memory.
  server.setTimeout(LIMITS.idleTimeoutMs, (socket) => socket.destroy());
  return server;
}

const PARKED = Symbol('capsule-resource-plane.parked');
type Handler = (req: IncomingMessage, res: ServerResponse) => void;
type Parked = { requests: Array<[IncomingMessage, ServerResponse]>; park: Handler; handler: Handler | null };
type ParkingServer = Server & { [PARKED]?: Parked };

/**
 * A listener accepts as soon as it is bound or adopted, which is before the session and its app
 * exist (the advertised URL is part of the session's identity). A request that arrives in between
 * would find no 'request' listener and never be answered; it is parked instead, until the app is
 * ready (releaseRequests), and then handed to the app's handler (attachRequestHandler) in order.
 */
function parkEarlyRequests(server: Server): Server {
  const requests: Parked['requests'] = [];
  const park = (req: IncomingMessage, res: ServerResponse) => void requests.push([req, res]);
  server.on('request', park);
  (server as ParkingServer)[PARKED] = { requests, park, handler: null };
  return server;
}

/** Names the app's request handler; requests keep parking until releaseRequests (the app is not ready yet). */
export function attachRequestHandler(server: Server, handler: (req: IncomingMessage, res: ServerResponse) => void): void {
  const parked = (server as ParkingServer)[PARKED];
  if (parked === undefined) server.on('request', handler);
  else parked.handler = handler;
}

/** Once the app is ready: its handler takes the requests, those parked first, in arrival order. */
export function releaseRequests(server: Server): void {
  const parked = (server as ParkingServer)[PARKED];
  if (parked === undefined || parked.handler === null) return;
  delete (server as ParkingServer)[PARKED];
  server.off('request', parked.park);
  server.on('request', parked.handler);
  for (const [req, res] of parked.requests.splice(0)) parked.handler(req, res);
}
