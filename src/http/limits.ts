// The listener's bounds (README, "Limits") and the bare HTTP server that applies them: a leaf, so
// the CLI can know them without loading Fastify.
import { createServer, type Server } from 'node:http';

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


/**
 * An HTTP server with the limits above. Node's own answers are turned off where admission answers
 * in the spec's shape instead: a missing Host (Node would write a bare 400) and an unknown Expect
 * (a bare 417) reach the app, which refuses them.
 */
export function createLimitedServer(): Server {
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
