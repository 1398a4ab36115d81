// Launching one session from CLI-style options: validate, open the session, bind the listener,
// and tear both down cleanly. Shared by `serve`, `demo` and the tests that spawn the CLI.
import { pino, type Logger } from 'pino';
import type { Containment } from './manifest.js';
import { redactHandles } from './peer/handle.js';
import { serve, type RunningServer } from './server.js';
import { CONTAINMENT_CLASSES, Session, SESSION_ID } from './session.js';

export interface LaunchOptions {
  workdir: string;
  manifest?: string;
  listen?: string;
  advertise?: string;
  sessionId?: string;
  containment?: string;
  trace?: string;
  logger?: Logger | false;
}

export interface Launched {
  session: Session;
  server: RunningServer;
  /** Stops the listener (in-flight requests finish), then zeroes the key and flushes the trace. */
  stop(): Promise<void>;
}

/** `HOST:PORT`, with IPv6 hosts in brackets. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new UsageError(`--listen must be HOST:PORT (got '${value}')`);
  return { host: (m[1] ?? m[2])!, port };
}

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export function parseContainment(value: string | undefined): Containment {
  const c = (value ?? 'advisory') as Containment;
  if (!CONTAINMENT_CLASSES.includes(c)) {
    throw new UsageError(`--containment must be one of ${CONTAINMENT_CLASSES.join(', ')} (got '${value}')`);
  }
  return c;
}

/**
 * The advertised URL, with the port always explicit: the audience is `<name>@<host:port>`, and a
 * URL parser drops a default port (`:80`), which would make the audience `<name>@<host>`.
 */
export function parseAdvertise(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`--advertise must be an http(s) URL (got '${value}')`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.search || url.hash || url.username || url.password) {
    throw new UsageError(`--advertise must be an http(s) URL with no query, fragment or credentials (got '${value}')`);
  }
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  const path = url.pathname.replace(/\/+$/, '');
  return `${url.protocol}//${url.hostname}:${port}${path}`;
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
  const containment = parseContainment(opts.containment);
  const advertise = parseAdvertise(opts.advertise);
  if (opts.sessionId !== undefined && !SESSION_ID.test(opts.sessionId)) {
    throw new UsageError(`--session-id must be 1-128 characters of [A-Za-z0-9_.:-] (got '${opts.sessionId}')`);
  }
  const session = await Session.open({
    workdir: opts.workdir,
    manifestPath: opts.manifest,
    sessionId: opts.sessionId,
    containment,
    tracePath: opts.trace,
  });
  let server: RunningServer;
  try {
    server = await serve(session, { host: listen.host, port: listen.port, advertise, logger: opts.logger ?? false });
  } catch (error) {
    await session.close();
    throw error;
  }
  let stopping: Promise<void> | null = null;
  return {
    session,
    server,
    stop: () =>
      (stopping ??= (async () => {
        await server.close();
        await session.close();
      })()),
  };
}
