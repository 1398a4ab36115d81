// The process sequence of `resource-plane serve`, once its flags are a launch's options: the
// first stage binds, confines and re-executes (confine-apply.ts), or, in the confined image or
// unconfined, the launch (launch.ts); then the ready line on stdout (or the MCP control channel),
// sd_notify READY=1, and a bounded stop on a signal or when the control channel closes. What the
// command line owns (its logs, its test probes, its signals) is handed in: this layer imports
// nothing above it.
import type { Logger } from 'pino';
import { UsageError } from '../codes.js';
import { DRAIN_TIMEOUT_MS, SHUTDOWN_GRACE_MS } from '../limits.js';
import * as native from '../addon/export.js';
import { notConfined, type Confinement } from '../session/confinement.js';
import { confineAndReexec, landlockMode, takeHandoff } from './confine-apply.js';
import type { LaunchOptions } from './launch.js';
import { activatedListeners, notify, openNotifySocket, type HeldListener } from './sockets.js';

type Level = 'debug' | 'info' | 'warn';

/** What the command line hands the process sequence. */
export interface ServeHost {
  /** false with --no-landlock. */
  landlock: boolean;
  /** Whether --listen was given (not defaulted): refused under socket activation. */
  listenGiven?: boolean;
  control: 'stdio' | 'none';
  /** Called once, in the first stage only (the compile cache's note). */
  firstStage: () => void;
  /** The first stage's log lines, before pino is loaded. */
  early: (level: Level, fields: Record<string, unknown>, message: string) => void;
  /** The server's logs (loaded only by the stage that launches): every line, the access log, and a synchronous flush. */
  logs: () => Promise<{ logger: Logger; access: NonNullable<LaunchOptions['accessLogger']>; flushSync(): void }>;
  /** A test's pause before the re-exec (src/testing/), when a test asks for one. */
  testPauseBeforeExec: () => Promise<(() => Promise<void>) | undefined>;
  /** The test probes of src/testing/, when a test sets their variables. */
  runTestProbes: (logger: { warn(fields: object, message: string): void }) => Promise<void>;
  /** The signals that stop the server. */
  stopSignals: readonly NodeJS.Signals[];
}

/** The inherited sockets as launch() serves them. */
function asLaunchListeners(held: readonly HeldListener[]): NonNullable<LaunchOptions['listeners']> {
  const peer = held.find((l) => l.role === 'peer')!;
  return { peer, operator: held.find((l) => l.role === 'operator') ?? null, metrics: held.find((l) => l.role === 'metrics') ?? null };
}

/** Runs `serve` with `opts` until it is stopped (this process exits then). */
export async function runServeProcess(options: LaunchOptions, host: ServeHost): Promise<void> {
  let opts = options;
  // Confinement (src/launch/confine-apply.ts): either this is the re-executed, already confined image,
  // which takes the launch its first phase settled (and the sockets it bound), or this is the
  // first phase, which binds, confines and re-executes (not returning) unless Landlock is off or
  // unavailable here. Either way every listening socket is bound once, before the session exists.
  let confinement: Confinement;
  let notifyFd: number | null;
  // The trace as the first stage held it across the exec, closed once the session has it open.
  let traceHoldFd: number | null = null;
  const handoff = takeHandoff();
  // Said once, by the first stage (the confined image decides the same again).
  if (!handoff) host.firstStage();
  if (handoff) {
    const { confinement: applied, listeners, notifyFd: fd, traceHoldFd: held, ...settled } = handoff;
    traceHoldFd = held ?? null;
    opts = { ...opts, ...settled, manifestPath: undefined, ...(listeners.length > 0 ? { listeners: asLaunchListeners(listeners) } : {}) };
    confinement = applied;
    notifyFd = fd;
  } else {
    const { mode, why } = landlockMode(host.landlock);
    const activated = activatedListeners();
    if (activated && (opts.operatorListen !== undefined || opts.metricsListen !== undefined || host.listenGiven)) {
      throw new UsageError('the listening sockets come from systemd (LISTEN_FDS): drop --listen, --operator-listen and --metrics-listen');
    }
    notifyFd = openNotifySocket(process.env, (why) => host.early('warn', {}, why));
    if (mode === 'off') {
      confinement = notConfined(why ?? 'disabled');
      if (activated) opts = { ...opts, listeners: asLaunchListeners(activated) };
    } else {
      const first = await confineAndReexec(
        opts,
        (fields, msg) => host.early('debug', fields, msg),
        activated,
        notifyFd,
        opts.onStaleSocket,
        await host.testPauseBeforeExec(),
      );
      confinement = first.confinement;
      opts = { ...opts, sessionId: first.sessionId, tracePath: first.tracePath, ...(first.listeners ? { listeners: asLaunchListeners(first.listeners) } : {}) };
    }
  }
  // Loaded only now: a first phase that re-executes never needs the server, nor pino.
  const [{ launch }, logs] = await Promise.all([import('./launch.js'), host.logs()]);
  const SHUTDOWN_BOUND_MS = DRAIN_TIMEOUT_MS + SHUTDOWN_GRACE_MS;
  const root = logs.logger;
  const launched = await launch({ ...opts, logger: root, accessLogger: logs.access, confinement });
  if (traceHoldFd !== null) native.closeFd(traceHoldFd);
  const { session, server } = launched;
  // From here on every line carries the session id (launch binds the request logs the same way).
  const logger = root.child({ session_id: session.sessionId });
  // After the launch, so that a launch that fails prints its error and nothing else.
  if (confinement.applied) logger.info({ landlock_abi: confinement.landlock_abi }, 'confined with Landlock');
  else logger.info({ reason: confinement.reason }, 'serving without Landlock confinement');
  await host.runTestProbes(logger);
  const ready = {
    event: 'listening',
    url: server.url,
    advertised_url: server.advertisedUrl,
    session_id: session.sessionId,
    trace: session.trace.path,
    // Where the operator plane is, when it has its own listener (`unix:<path>` or a URL).
    ...(launched.operator ? { operator_url: launched.operator.url } : {}),
    ...(launched.metrics ? { metrics_url: launched.metrics.url } : {}),
  };
  let shuttingDown = false;
  const shutdown = async (why: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    logger.info({ why }, 'shutting down');
    const unsent = notify(notifyFd, 'STOPPING=1');
    if (unsent) logger.warn({ detail: unsent }, 'sd_notify STOPPING=1 was not sent');
    // launch's stop sequence, bounded: if it overran (a native worker that cannot be interrupted
    // holds the process; the key is already zeroed), the process ends itself, since exiting
    // normally would wait for the thread pool.
    const outcome = await launched.stop(why, SHUTDOWN_BOUND_MS).catch(() => 'stopped' as const);
    logs.flushSync();
    if (outcome === 'overran') process.kill(process.pid, 'SIGKILL');
    process.exit(0);
  };
  // SIGHUP is a stop too, not a reload: there is nothing to re-read (the manifest and the flags are
  // taken once, at launch), and a server left running after its terminal or supervisor hung up
  // would serve on unwatched.
  for (const signal of host.stopSignals) process.on(signal, () => void shutdown(signal));
  if (host.control === 'stdio') {
    const { runControl } = await import('../tools/control.js');
    await runControl(launched, ready, () => shutdown('control channel closed'));
  } else {
    // The launcher reads this one line from stdout instead of scraping logs.
    process.stdout.write(`${JSON.stringify(ready)}\n`);
  }
  // Ready for systemd (Type=notify) once it serves, from this process (NotifyAccess=main).
  const unsent = notify(notifyFd, 'READY=1');
  if (unsent) logger.warn({ detail: unsent }, 'sd_notify READY=1 was not sent');
  // The ready line's session_id is already the logger's binding: one key, once.
  const { session_id: _sessionId, ...serving } = ready;
  logger.info(serving, 'serving');
}
