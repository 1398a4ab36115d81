// Launching one served session: validate everything, bind the listener (so the advertised URL is
// known before the session exists), open the session with that identity, serve it, and tear both
// down cleanly. Shared by `serve`, `demo`, the public API and the tests.
import type { Logger } from 'pino';
import { createMetrics } from '../http/metrics.js';
import { ALL_PLANES } from '../http/plugin.js';
import { adopt, bind, removeSocketFile, serve, serveMetrics, type InheritedSocket, type Listener, type RunningServer } from '../http/listener.js';
import * as native from '../addon/export.js';
import type { Session } from '../session/session.js';
import { prepareSession, type SessionOptions } from '../session/open-session.js';
import { parseAddresses } from '../session/options.js';
import type { AccessLogger } from '../http/admission.js';

export interface LaunchOptions extends Omit<SessionOptions, 'advertisedUrl'> {
  /** `HOST:PORT`; default `127.0.0.1:0`. */
  listen?: string;
  /** What the agent card and the audience say; default `http://localhost:<bound port>`. */
  advertise?: string;
  /**
   * `HOST:PORT` or `unix:PATH`: serve the operator plane on its own listener (a unix socket outside
   * the workdir, created 0600, is the recommended deployment); the main listener then serves the
   * peer plane and the card only. Absent: one listener serves both, as in the reference.
   */
  operatorListen?: string;
  /**
   * Count answers and serve Prometheus metrics at /metrics: on the `metricsListen` listener when
   * there is one, else on the operator listener when there is one, else on the main listener.
   */
  metrics?: boolean;
  /** One `info` line per request on the logger (default true). */
  accessLog?: boolean;
  /** Where access lines go (the CLI's buffered stderr log, bound to the session here); default `logger`. */
  accessLogger?: { child(bindings: Record<string, unknown>): AccessLogger };
  /** `HOST:PORT` or `unix:PATH` (as `operatorListen`): a listener that serves /metrics only; implies `metrics`. */
  metricsListen?: string;
  /**
   * Listening sockets already bound (a confined launch's first stage, or systemd socket
   * activation): served as they are, and `listen` / `operatorListen` / `metricsListen` are then not read.
   */
  listeners?: { peer: InheritedSocket; operator: InheritedSocket | null; metrics?: InheritedSocket | null };
  /** Where a stale operator socket was replaced (`--operator-listen unix:PATH`): logged. */
  onStaleSocket?: (path: string) => void;
  logger?: Logger | false;
}

export interface Launched {
  session: Session;
  server: RunningServer;
  /** The operator plane's own listener, when `operatorListen` was given. */
  operator: RunningServer | null;
  /** The /metrics listener, when `metricsListen` was given. */
  metrics: RunningServer | null;
  /**
   * The one stop sequence: listings being hashed are cancelled; each listener refuses new requests
   * with 503 and gives the responses being sent the drain's bound (DRAIN_TIMEOUT_MS), then cuts
   * what is left and closes; then the key is zeroed, `session_end` written with `reason` and the
   * trace flushed. With `boundMs`, a stop still running after that long (a native worker that
   * cannot be interrupted) zeroes the key at once and resolves `'overran'`, so the caller can end
   * the process; else it resolves `'stopped'`.
   */
  stop(reason?: string, boundMs?: number): Promise<'stopped' | 'overran'>;
}

export async function launch(opts: LaunchOptions): Promise<Launched> {
  const inherited = opts.listeners ?? null;
  const { listen, advertise, operator: operatorAddress, metrics: metricsAddress } = parseAddresses(opts, inherited !== null, opts.onStaleSocket);
  const hasOperator = inherited ? inherited.operator !== null : operatorAddress !== null;
  const hasMetricsListener = inherited ? (inherited.metrics ?? null) !== null : metricsAddress !== null;
  let prepared: Awaited<ReturnType<typeof prepareSession>>;
  try {
    prepared = await prepareSession(opts);
  } catch (error) {
    closeInherited(inherited);
    throw error;
  }
  const listeners: Listener[] = [];
  const unbind = () => {
    for (const l of listeners) l.server.close(() => removeSocketFile(l));
  };
  let session: Session;
  try {
    if (inherited) {
      listeners.push(await adopt(inherited.peer));
      if (inherited.operator) listeners.push(await adopt(inherited.operator));
      if (inherited.metrics) listeners.push(await adopt(inherited.metrics));
    } else {
      listeners.push(await bind(listen));
      if (operatorAddress) listeners.push(await bind(operatorAddress, 'operator'));
      if (metricsAddress) listeners.push(await bind(metricsAddress, 'metrics'));
    }
    session = prepared.open(advertise ?? listeners[0]!.defaultAdvertisedUrl);
  } catch (error) {
    prepared.abandon();
    unbind();
    if (inherited && listeners.length === 0) closeInherited(inherited);
    throw error;
  }
  // Every log line of this session carries its id.
  const logger = opts.logger ? opts.logger.child({ session_id: session.sessionId }) : false;
  const accessLogger = logger ? (opts.accessLogger?.child({ session_id: session.sessionId }) ?? logger) : undefined;
  let server: RunningServer;
  let operator: RunningServer | null = null;
  let metricsServer: RunningServer | null = null;
  try {
    const metrics = opts.metrics || hasMetricsListener ? await createMetrics({ memoryInUse: () => session.memory.inUse }) : undefined;
    // /metrics is served on one listener: its own, else the operator's, else the main one.
    server = await serve(session, listeners[0]!, logger, hasOperator ? { files: false, peer: true } : ALL_PLANES, {
      metrics,
      serveMetrics: !hasOperator && !hasMetricsListener,
      accessLog: opts.accessLog,
      accessLogger,
    });
    if (hasOperator)
      operator = await serve(
        session,
        listeners[1]!,
        logger,
        { files: true, peer: false },
        { metrics, serveMetrics: !hasMetricsListener, accessLog: opts.accessLog, accessLogger },
      );
    if (hasMetricsListener) metricsServer = await serveMetrics(session, listeners.at(-1)!, metrics!, logger);
  } catch (error) {
    unbind();
    await session.close();
    throw error;
  }
  // Checked at start-up, so the log says it before the first fetch refuses (src/outbound-client.ts).
  if (session.manifest.peerFetchAllow !== null && logger) {
    const { outboundGuardProblem } = await import('../outbound-client.js');
    const problem = await outboundGuardProblem();
    if (problem !== null) logger.error({ problem }, 'fetch-peer-file is disabled: the outbound guard cannot attach to this undici');
  }
  let stopping: Promise<void> | null = null;
  const sequence = (reason: string) =>
    (stopping ??= (async () => {
      session.beginStopping();
      try {
        await Promise.all([server.close(), operator?.close(), metricsServer?.close()]);
      } finally {
        await session.close(reason);
      }
    })());
  return {
    session,
    server,
    operator,
    metrics: metricsServer,
    stop: async (reason = 'stopped', boundMs?: number) => {
      const done = sequence(reason).then(() => 'stopped' as const);
      if (boundMs === undefined) return done;
      let timer: NodeJS.Timeout | undefined;
      const overran = new Promise<'overran'>((resolve) => {
        timer = setTimeout(() => {
          session.key?.destroy();
          resolve('overran');
        }, boundMs);
        timer.unref();
      });
      try {
        return await Promise.race([done, overran]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** Inherited sockets a launch that failed before serving them will never serve. */
function closeInherited(inherited: LaunchOptions['listeners'] | null): void {
  if (!inherited) return;
  for (const socket of [inherited.peer, inherited.operator, inherited.metrics]) {
    if (!socket) continue;
    native.closeFd(socket.fd);
    removeSocketFile({ unlinkOnClose: socket.unlinkOnClose } as Listener);
  }
}
