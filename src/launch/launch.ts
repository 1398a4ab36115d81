// Launching one served session: validate everything, bind the listener (so the advertised URL is
// known before the session exists), open the session with that identity, serve it, and tear both
// down cleanly. Shared by `serve`, `demo`, the public API and the tests.
import { pino, type Logger } from 'pino';
import { redactHandles } from '../redact.js';
import { bind, serve, type RunningServer } from '../server.js';
import type { Session } from '../session.js';
import { prepareSession, type SessionOptions } from './open-session.js';
import { parseAdvertise, parseListen } from './options.js';

export interface LaunchOptions extends Omit<SessionOptions, 'advertisedUrl'> {
  /** `HOST:PORT`; default `127.0.0.1:0`. */
  listen?: string;
  /** What the agent card and the audience say; default `http://localhost:<bound port>`. */
  advertise?: string;
  logger?: Logger | false;
}

export interface Launched {
  session: Session;
  server: RunningServer;
  /**
   * Stops the listener (in-flight requests finish, bounded), then zeroes the key, writes
   * `session_end` with `reason` and flushes the trace.
   */
  stop(reason?: string): Promise<void>;
}

export function stderrLogger(): Logger {
  return pino(
    {
      level: process.env.RESOURCE_PLANE_LOG_LEVEL ?? 'info',
      base: { pid: process.pid },
      // An error is logged by type, code and redacted message only: Node errors can carry raw
      // request bytes (rawPacket), URLs and paths, any of which may hold a handle token.
      serializers: {
        err: (e: unknown) => {
          const err = e as { name?: unknown; code?: unknown; message?: unknown } | null;
          return { type: String(err?.name ?? typeof e), code: err?.code ?? null, message: redactHandles(String(err?.message ?? e)) };
        },
      },
    },
    pino.destination(2),
  );
}

export async function launch(opts: LaunchOptions): Promise<Launched> {
  const listen = parseListen(opts.listen ?? '127.0.0.1:0');
  const advertise = parseAdvertise(opts.advertise);
  const prepared = await prepareSession(opts);
  let listener;
  try {
    listener = await bind(listen.host, listen.port);
  } catch (error) {
    prepared.abandon();
    throw error;
  }
  let session: Session;
  try {
    session = prepared.open(advertise ?? listener.defaultAdvertisedUrl);
  } catch (error) {
    listener.server.close();
    throw error;
  }
  let server: RunningServer;
  try {
    server = await serve(session, listener, opts.logger ?? false);
  } catch (error) {
    listener.server.close();
    await session.close();
    throw error;
  }
  let stopping: Promise<void> | null = null;
  return {
    session,
    server,
    stop: (reason = 'stopped') =>
      (stopping ??= (async () => {
        // Listings hashing are cancelled first; responses being sent get the drain.
        session.beginStopping();
        try {
          await server.close();
        } finally {
          await session.close(reason);
        }
      })()),
  };
}
