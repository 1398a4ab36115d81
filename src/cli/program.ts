// The `resource-plane` command (its bin, main.ts, loads this once the compile cache is on): argv → a session (serve), the grants a launch would have
// (explain-scope), the two-capsule demo, and small operator client verbs. Diagnostics from the
// manifest print as `error[CODE]: …` / `  hint: …` and exit 2; a usage mistake prints one line
// pointing at the command's --help and exits 2; ls and get exit by what failed (docs/cli.md,
// *Exit status*: 3 unreachable, 4 refused, 5 unverified, 6 too large, 7 local); others exit 1.
import { existsSync, realpathSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { SingleBar } from 'cli-progress';
import { Command, CommanderError, Option } from 'commander';
import type { Progress } from './client.js';
import type { MirrorProgress } from './mirror.js';
import { UsageError } from '../codes.js';
import { notConfined, type Confinement } from '../session/confinement.js';
import { checkExportRoots, checkExportRootsAt } from '../session/checks.js';
import { confineAndReexec, landlockMode, takeHandoff } from '../launch/confine-apply.js';
import { COMPILE_CACHE_DIR, compileCacheOutcome } from './compile-cache.js';
import { earlyLogger, LOG_LEVELS } from './early-log.js';
import type { LaunchOptions } from '../launch/launch.js';
import { activatedListeners, notify, openNotifySocket, type HeldListener } from '../launch/sockets.js';
import { DEFAULT_MANIFEST_NAME, loadManifest, missingManifest, readManifestBeneath, type KeyCheck } from '../session/manifest-file.js';
import { parseContainment, parseDigestCacheEntries } from '../session/options.js';
import { ManifestError } from '../manifest/diagnostics.js';
import { FLAG_BYTE_FORMS, parseDuration, parseFlagByteCount } from '../manifest/grammars.js';
import type { Manifest } from '../manifest/model.js';
import * as native from '../addon/export.js';
import { effectiveGrants, renderExplainScope } from '../manifest/scope.js';
import { packageVersion } from '../version.js';
import { DRAIN_TIMEOUT_MS, MAX_JOBS, SHUTDOWN_GRACE_MS } from '../limits.js';
import { ClientError, EXIT, signalStatus } from './exit.js';

const PROGRAM = 'resource-plane';


/** `(see resource-plane serve --help)`: where a usage error sends the reader. */
function helpPointer(command: string | null): string {
  return `(see ${PROGRAM}${command ? ` ${command}` : ''} --help)`;
}

/** A byte-count flag: the SI and IEC forms (grammars.ts, FLAG_BYTE_COUNT); a refusal lists them. */
function parseBytesFlag(flag: string, value: string): number {
  const n = parseFlagByteCount(value);
  if (n === null) throw new UsageError(`${flag} must be ${FLAG_BYTE_FORMS} (got '${value}')`);
  return n;
}

function parseBudgetBytes(value: string): number {
  return parseBytesFlag('--memory-budget', value);
}

function parseFetchMaxBytes(value: string): number {
  return parseBytesFlag('--fetch-max-bytes', value);
}

/** A client's `--max-bytes`. */
function parseMaxBytes(value: string | undefined): number | undefined {
  return value === undefined ? undefined : parseBytesFlag('--max-bytes', value);
}

/** `--refusal-trace-rate`: a whole number of traced refusals per second, 0 (summaries only) to 100000. */
function parseRefusalTraceRate(value: string): number {
  const n = /^[0-9]{1,6}$/.test(value) ? Number(value) : NaN;
  if (!(n >= 0 && n <= 100_000)) throw new UsageError(`--refusal-trace-rate must be a whole number of refusals per second, 0 to 100000 (got '${value}')`);
  return n;
}

function parseBudgetSeconds(value: string): number {
  const n = parseDuration(value);
  if (n === null || n > 2_000_000) throw new UsageError(`--listing-budget must be a duration such as 30s (got '${value}')`);
  return n;
}

/** Prints what went wrong and exits; `command` is the subcommand a usage error points to. */
function fail(error: unknown, command: string | null = null): never {
  if (error instanceof ClientError) {
    process.stderr.write(`error: ${error.message}${error.kind === 'usage' && command ? ` ${helpPointer(command)}` : ''}\n`);
    process.exit(error.exitStatus);
  }
  if (error instanceof ManifestError) {
    process.stderr.write(`${error.render()}\n`);
    process.exit(EXIT.usage);
  }
  if (error instanceof UsageError) {
    process.stderr.write(`error: ${error.message} ${helpPointer(command)}\n`);
    process.exit(EXIT.usage);
  }
  process.stderr.write(`error: ${(error as Error)?.message ?? String(error)}\n`);
  process.exit(EXIT.internal);
}

// ── Environment ─────────────────────────────────────────────────────────────────────────────────

/** Checked before a logger exists: pino's own message for a bad level speaks to a programmer. */
function checkLogLevel(): void {
  const level = process.env.RESOURCE_PLANE_LOG_LEVEL;
  if (level !== undefined && !LOG_LEVELS.includes(level)) {
    throw new UsageError(`RESOURCE_PLANE_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')} (got '${level}')`);
  }
}

function checkResolverChoice(): void {
  const problem = native.resolverChoiceProblem();
  if (problem !== null) throw new UsageError(problem);
}

const ENVIRONMENT = `
Environment:
  RESOURCE_PLANE_LOG_LEVEL    ${LOG_LEVELS.join('|')} (default info)
  RESOURCE_PLANE_RECORDS_DIR  where traces go by default (default ~/.murmur/records)
  RESOURCE_PLANE_RESOLVER     openat2|walk: force the path resolver (default openat2 if available)`;

// ── serve ───────────────────────────────────────────────────────────────────────────────────────

interface ServeFlags {
  workdir: string;
  manifest?: string;
  listen?: string;
  /** Whether --listen was given (not defaulted): refused under socket activation. */
  listenGiven?: boolean;
  advertise?: string;
  sessionId?: string;
  containment: string;
  trace?: string;
  operatorListen?: string;
  metricsListen?: string;
  accessLog: boolean;
  strict?: boolean;
  memoryBudget?: string;
  refusalTraceRate?: string;
  fetchMaxBytes?: string;
  metrics?: boolean;
  listingBudget?: string;
  digestCacheEntries?: string;
  control: 'stdio' | 'none';
  /** false with --no-landlock. */
  landlock: boolean;
}

/** The inherited sockets as launch() serves them. */
function asLaunchListeners(held: readonly HeldListener[]): NonNullable<LaunchOptions['listeners']> {
  const peer = held.find((l) => l.role === 'peer')!;
  return { peer, operator: held.find((l) => l.role === 'operator') ?? null, metrics: held.find((l) => l.role === 'metrics') ?? null };
}

async function serveCommand(flags: ServeFlags): Promise<void> {
  checkLogLevel();
  checkResolverChoice();
  const early = earlyLogger();
  const { manifest, trace, control: _control, memoryBudget, refusalTraceRate, listingBudget, digestCacheEntries, landlock, listenGiven, strict: _strict, fetchMaxBytes, ...rest } = flags;
  let opts: LaunchOptions = {
    ...rest,
    listen: rest.listen ?? '127.0.0.1:0',
    manifestPath: manifest,
    tracePath: trace,
    onStaleSocket: (path) => early('warn', { path }, 'removed a stale operator socket (nothing listened on it) and replaced it'),
    notice: (level, fields, message) => early(level, fields, message),
    strictManifest: flags.strict,
    ...(memoryBudget !== undefined ? { memoryBudgetBytes: parseBudgetBytes(memoryBudget) } : {}),
    ...(refusalTraceRate !== undefined ? { refusalTraceRate: parseRefusalTraceRate(refusalTraceRate) } : {}),
    ...(fetchMaxBytes !== undefined ? { fetchMaxBytes: parseFetchMaxBytes(fetchMaxBytes) } : {}),
    ...(listingBudget !== undefined ? { listingBudgetMs: parseBudgetSeconds(listingBudget) * 1000 } : {}),
    ...(digestCacheEntries !== undefined ? { digestCacheEntries: parseDigestCacheEntries(digestCacheEntries) } : {}),
  };
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
  if (!handoff) {
    const cache = compileCacheOutcome();
    if (cache?.why) early(cache.level, { compile_cache: COMPILE_CACHE_DIR }, `compile cache: ${cache.why}`);
  }
  if (handoff) {
    const { confinement: applied, listeners, notifyFd: fd, traceHoldFd: held, ...settled } = handoff;
    traceHoldFd = held ?? null;
    opts = { ...opts, ...settled, manifestPath: undefined, ...(listeners.length > 0 ? { listeners: asLaunchListeners(listeners) } : {}) };
    confinement = applied;
    notifyFd = fd;
  } else {
    const { mode, why } = landlockMode(landlock);
    const activated = activatedListeners();
    if (activated && (opts.operatorListen !== undefined || opts.metricsListen !== undefined || listenGiven)) {
      throw new UsageError('the listening sockets come from systemd (LISTEN_FDS): drop --listen, --operator-listen and --metrics-listen');
    }
    notifyFd = openNotifySocket(process.env, (why) => early('warn', {}, why));
    if (mode === 'off') {
      confinement = notConfined(why ?? 'disabled');
      if (activated) opts = { ...opts, listeners: asLaunchListeners(activated) };
    } else {
      const first = await confineAndReexec(opts, (fields, msg) => early('debug', fields, msg), activated, notifyFd, opts.onStaleSocket, await testPauseBeforeExec());
      confinement = first.confinement;
      opts = { ...opts, sessionId: first.sessionId, tracePath: first.tracePath, ...(first.listeners ? { listeners: asLaunchListeners(first.listeners) } : {}) };
    }
  }
  // Loaded only now: a first phase that re-executes never needs the server, nor pino.
  const [{ launch }, { stderrLogs }] = await Promise.all([import('../launch/launch.js'), import('./logger.js')]);
  const SHUTDOWN_BOUND_MS = DRAIN_TIMEOUT_MS + SHUTDOWN_GRACE_MS;
  const logs = stderrLogs();
  const root = logs.logger;
  const launched = await launch({ ...opts, logger: root, accessLogger: logs.access, confinement });
  if (traceHoldFd !== null) native.closeFd(traceHoldFd);
  const { session, server } = launched;
  // From here on every line carries the session id (launch binds the request logs the same way).
  const logger = root.child({ session_id: session.sessionId });
  // After the launch, so that a launch that fails prints its error and nothing else.
  if (confinement.applied) logger.info({ landlock_abi: confinement.landlock_abi }, 'confined with Landlock');
  else logger.info({ reason: confinement.reason }, 'serving without Landlock confinement');
  await runTestProbes(logger);
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
  for (const signal of STOP_SIGNALS) process.on(signal, () => void shutdown(signal));
  if (flags.control === 'stdio') {
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

// ── explain-scope ───────────────────────────────────────────────────────────────────────────────

/**
 * `DIR/murmur.yaml` read as serve reads it (beneath the workdir descriptor, no symlink, no FIFO,
 * capped), then the export-root checks through the same descriptor. A workdir that does not exist
 * has no manifest, as for serve.
 */
async function workdirManifest(workdir: string, check: KeyCheck): Promise<Manifest> {
  const requested = resolve(workdir);
  const shown = join(requested, DEFAULT_MANIFEST_NAME);
  if (!existsSync(requested)) {
    throw missingManifest(shown);
  }
  const real = realpathSync(requested);
  const resolver = native.chooseResolver();
  const fd = await native.openDirectory(real);
  try {
    const manifest = await readManifestBeneath(fd, resolver, shown, check);
    await checkExportRoots(manifest, real, fd, resolver);
    return manifest;
  } finally {
    native.closeFd(fd);
  }
}

async function explainScopeCommand(flags: { manifest?: string; workdir?: string; json?: boolean; containment?: string; strict?: boolean }): Promise<void> {
  checkResolverChoice();
  if (flags.manifest === undefined && flags.workdir === undefined) {
    throw new UsageError('explain-scope needs --workdir DIR (reads DIR/murmur.yaml) or --manifest FILE');
  }
  const containment = parseContainment(flags.containment);
  // On stderr, so that --json stays one line of JSON on stdout.
  const check: KeyCheck = { strict: flags.strict, warn: (_fields, message) => process.stderr.write(`warning: ${message}\n`) };
  let manifest: Manifest;
  if (flags.manifest === undefined) {
    manifest = await workdirManifest(flags.workdir!, check);
  } else {
    manifest = loadManifest(flags.manifest, check);
    // The same root checks a launch makes (E-CAP-007), against the workdir the manifest sits in
    // unless told otherwise; nothing is created, and a workdir that does not exist yet passes.
    await checkExportRootsAt(manifest, flags.workdir ?? dirname(resolve(flags.manifest)));
  }
  if (flags.json) process.stdout.write(`${JSON.stringify(effectiveGrants(manifest, containment))}\n`);
  else process.stdout.write(renderExplainScope(manifest, containment));
}

// ── records ─────────────────────────────────────────────────────────────────────────────────────

async function recordsCommand(flags: { json?: boolean; prune?: string; dryRun?: boolean }): Promise<void> {
  const { listSessions, pruneSessions } = await import('./records.js');
  const { recordsDirectory } = await import('../session/records.js');
  const when = (ms: number | null) => (ms === null ? '-' : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'));
  // The name comes from a manifest the capsule may have written: shown with its controls escaped.
  const { printable } = await import('./client.js');
  const nameOf = (s: import('./records.js').RecordedSession) => (s.capsule === null ? '-' : printable(s.capsule));
  if (flags.prune === undefined) {
    if (flags.dryRun) throw new UsageError('--dry-run goes with --prune');
    const sessions = listSessions();
    const width = Math.max('CAPSULE'.length, ...sessions.map((s) => nameOf(s).length));
    const row = (s: import('./records.js').RecordedSession) =>
      flags.json
        ? JSON.stringify({ session_id: s.sessionId, capsule: s.capsule, workdir_digest: s.workdir, start_ms: s.startMs, end_ms: s.endMs, end_reason: s.endReason, bytes: s.bytes, live: s.live, dir: s.dir })
        : `${s.sessionId.padEnd(36)}  ${nameOf(s).padEnd(width)}  ${when(s.startMs).padEnd(20)}  ${(s.live ? 'live' : when(s.endMs)).padEnd(20)}  ${humanBytes(s.bytes).padStart(9)}`;
    if (!flags.json) process.stdout.write(`${'SESSION'.padEnd(36)}  ${'CAPSULE'.padEnd(width)}  ${'START'.padEnd(20)}  ${'END'.padEnd(20)}  ${'SIZE'.padStart(9)}\n`);
    for (const s of sessions) process.stdout.write(`${row(s)}\n`);
    if (!flags.json && sessions.length === 0) process.stderr.write(`no sessions under ${recordsDirectory()}\n`);
    return;
  }
  const seconds = parseDuration(flags.prune);
  if (seconds === null) throw new UsageError(`--prune must be a duration like 30d, 12h or 90m (got '${flags.prune}')`);
  const { removed, kept } = pruneSessions(seconds * 1000, { dryRun: flags.dryRun === true });
  const verb = flags.dryRun ? 'would remove' : 'removed';
  for (const s of removed) process.stdout.write(flags.json ? `${JSON.stringify({ [verb.replace(' ', '_')]: s.sessionId, capsule: s.capsule, dir: s.dir, bytes: s.bytes })}\n` : `${verb} ${s.sessionId} (${nameOf(s)}, ended ${when(s.endMs)}, ${humanBytes(s.bytes)})\n`);
  // Silence would read as "did it run?": said on stderr, like the kept ones, so stdout stays the list.
  if (removed.length === 0) process.stderr.write(`nothing to prune: no session under ${recordsDirectory()} ended more than ${flags.prune} ago\n`);
  for (const { session, why } of kept) process.stderr.write(`kept ${session.sessionId}: ${why}\n`);
}

// ── get's progress bar ──────────────────────────────────────────────────────────────────────────

function humanBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** A progress bar on stderr, only when stderr is a terminal: never in a pipe, a log or a test. */
async function terminalProgress(stream: NodeJS.WriteStream = process.stderr): Promise<Progress | null> {
  if (!stream.isTTY) return null;
  // Loaded here: only `get` on a terminal draws one.
  const { Presets, SingleBar } = (await import('cli-progress')).default;
  let bar: SingleBar | null = null;
  return {
    start(total) {
      bar = new SingleBar(
        {
          stream,
          format: total === null ? '{received} received' : '{bar} {percentage}% | {received} of {size} | eta {eta_formatted}',
          hideCursor: true,
          clearOnComplete: true,
          barsize: 30,
          fps: 10,
        },
        Presets.shades_classic,
      );
      bar.start(total ?? 0, 0, { received: humanBytes(0), size: humanBytes(total ?? 0) });
    },
    update(received) {
      bar?.update(received, { received: humanBytes(received) });
    },
    stop() {
      bar?.stop();
    },
  };
}

/** mirror's bar: files done of those listed, on stderr, only when stderr is a terminal. */
async function terminalFileProgress(stream: NodeJS.WriteStream = process.stderr): Promise<MirrorProgress | null> {
  if (!stream.isTTY) return null;
  const { Presets, SingleBar } = (await import('cli-progress')).default;
  const bar = new SingleBar({ stream, format: '{bar} {value} of {total} files | eta {eta_formatted}', hideCursor: true, clearOnComplete: true, barsize: 30, fps: 10 }, Presets.shades_classic);
  let done = 0;
  return {
    start: (total) => bar.start(total, 0),
    tick: () => bar.update((done += 1)),
    stop: () => bar.stop(),
  };
}

/** `--jobs`: a whole number of connections. */
function parseJobs(value: string | undefined, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = /^[0-9]{1,3}$/.test(value) ? Number(value) : NaN;
  if (!(n >= 1 && n <= max)) throw new UsageError(`--jobs must be a whole number from 1 to ${max} (got '${value}')`);
  return n;
}

/**
 * Runs a client verb that an interrupt, a stop or a hang-up (the terminal closed) can stop: the
 * verb is handed a signal, removes what it was writing, and the process exits as that signal would
 * have (130 for Ctrl-C), saying `interrupted`.
 */
async function stoppable<T>(verb: string, run: (signal: AbortSignal) => Promise<T>, said: string): Promise<T> {
  const abort = new AbortController();
  let stoppedBy: (typeof STOP_SIGNALS)[number] = 'SIGINT';
  const handlers = STOP_SIGNALS.map((signal) => {
    const handler = () => {
      stoppedBy = signal;
      abort.abort();
    };
    process.once(signal, handler);
    return [signal, handler] as const;
  });
  const r = await run(abort.signal).catch((error) => {
    if (abort.signal.aborted) {
      process.stderr.write(`error: ${said}\n`);
      process.exit(signalStatus(stoppedBy));
    }
    return fail(error, verb);
  });
  for (const [signal, handler] of handlers) process.off(signal, handler);
  return r;
}

// ── the program ─────────────────────────────────────────────────────────────────────────────────

/** A usage error from commander: one line, and where the help is. */
function shortErrors(cmd: Command, name: string | null): Command {
  return cmd.configureOutput({
    // Commander may add a second line ("(Did you mean --workdir?)"): kept on the one line, where
    // it reads as the rest of the sentence.
    outputError: (text, print) => print(`${text.trim().replace(/\s*\n\s*/g, ' ').replace('(Did you mean', '(did you mean')} ${helpPointer(name)}\n`),
  });
}

/**
 * A required option, checked after commander's unknown-option check rather than before it (where
 * `requiredOption` is checked): `serve --workdri cap` is then told `unknown option '--workdri' (did
 * you mean --workdir?)` instead of only that --workdir is missing. The message is commander's own.
 */
function requiredAfterUnknown(cmd: Command, flags: string, description: string): Command {
  const option = new Option(flags, description);
  return cmd.addOption(option).hook('preAction', (command) => {
    if (command.getOptionValue(option.attributeName()) === undefined) {
      command.error(`error: required option '${option.flags}' not specified`, { code: 'commander.missingMandatoryOptionValue' });
    }
  });
}

/** The signals after which a command stops; 128 + the number is the exit status of one so stopped. */
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/** Commander's collector for a repeatable option. */
function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export function program(): Command {
  const cmd = new Command(PROGRAM)
    .description('The hardened file server of a capsule: operator plane, peer plane, audit trace.')
    .version(packageVersion(), '-v, --version', 'print the version and exit')
    // -V too, as before -v existed (and as curl and nginx spell it); not shown in the help.
    .addOption(new Option('-V').hideHelp())
    .showHelpAfterError(false)
    .exitOverride();
  cmd.on('option:V', () => {
    process.stdout.write(`${packageVersion()}\n`);
    throw new CommanderError(0, 'commander.version', packageVersion());
  });
  shortErrors(cmd, null);
  cmd.addHelpText(
    'after',
    `
Examples:
  ${PROGRAM} serve --workdir ./cap                  serve ./cap with ./cap/murmur.yaml
  ${PROGRAM} serve --workdir ./cap --control stdio  the same, as an MCP server on stdio
  ${PROGRAM} explain-scope --workdir ./cap          what that launch would grant
  ${PROGRAM} ls http://127.0.0.1:41234              list the operator plane
  ${PROGRAM} get http://127.0.0.1:41234 report.md   download one file, etag verified
  ${PROGRAM} mirror http://127.0.0.1:41234 ./out    take the whole export, verified
${ENVIRONMENT}

Run '${PROGRAM} <command> --help' for a command's options.`,
  );

  const serve = requiredAfterUnknown(
    cmd.command('serve').description('launch one session over a workdir'),
    '--workdir <dir>',
    'the capsule workdir (required); created if missing, once every check passed',
  )
    .option('--manifest <file>', 'the manifest (default: <workdir>/murmur.yaml)')
    .option('--listen <host:port>', 'where to listen (default: "127.0.0.1:0"; under systemd socket activation the sockets come from LISTEN_FDS)')
    .option('--advertise <url>', 'the URL the agent card and audience say (default: http://localhost:<bound port>)')
    .option('--session-id <id>', 'the session id (default: a fresh ses_<32 hex>)')
    .addOption(new Option('--containment <class>', 'the containment class the sandbox achieved').choices(['advisory', 'scoped', 'sealed']).default('advisory'))
    .option('--trace <file>', 'the trace file (default: in the records directory, outside the workdir)')
    .option('--metrics', 'count answers and serve Prometheus metrics at GET /metrics (on the --operator-listen listener when there is one)')
    .option('--metrics-listen <addr>', 'serve GET /metrics alone on its own listener, HOST:PORT or unix:PATH (implies --metrics), e.g. for a Prometheus scrape beside a unix operator socket')
    .option('--memory-budget <bytes>', 'bytes reads and redeems in flight may hold, e.g. 256Mi (default 256Mi)')
    .option('--refusal-trace-rate <n>', 'refusals traced one by one per second, all clients together (default 200, burst 10x); past it they are summarised: bounds the trace\'s growth under refusals')
    .option('--fetch-max-bytes <bytes>', 'the largest file fetch-peer-file lands, e.g. 64Mi (default 10Mi)')
    .option('--listing-budget <duration>', 'how long one listing may run, e.g. 30s (default 30s)')
    .option('--digest-cache-entries <n>', 'most file digests kept for repeat listings and large reads, 0 to 16777216 (default 262144; ~100 bytes each once stored, beside --memory-budget)')
    .option('--operator-listen <addr>', 'serve the operator plane on its own listener, HOST:PORT or unix:PATH (a unix socket outside the workdir, created 0600, is recommended); the main listener then serves only the peer plane and the card')
    .addOption(new Option('--control <channel>', 'the control channel: stdio speaks MCP').choices(['stdio', 'none']).default('none'))
    .option('--strict', "a likely typo in the runtime's manifest blocks is an error (E-MAN-003), not a warning (an unknown key in exports.* or the allow lists always is)")
    .option('--no-access-log', 'no info line per request on stderr (it is then logged at debug)')
    .option('--no-landlock', 'serve without confining the process with Landlock (also RESOURCE_PLANE_LANDLOCK=off)')
    .addHelpText(
      'after',
      `
--workdir is required. With --control none, stdout carries exactly one line of JSON once the
listener is bound ({"event":"listening","url":…}); logs go to stderr. SIGINT, SIGTERM and SIGHUP
end the session gracefully (SIGHUP reloads nothing: the manifest is read once, at launch).

Examples:
  ${PROGRAM} serve --workdir ./cap
  ${PROGRAM} serve --workdir ./cap --listen 127.0.0.1:8080 --containment sealed
  ${PROGRAM} serve --workdir ./cap --manifest /etc/caps/cap.yaml
  ${PROGRAM} serve --workdir ./cap --operator-listen unix:/run/cap/operator.sock
  ${PROGRAM} serve --workdir ./cap --control stdio    (how an MCP host starts it)
${ENVIRONMENT}`,
    )
    .action((flags: ServeFlags) => serveCommand({ ...flags, listenGiven: flags.listen !== undefined }).catch((error) => fail(error, 'serve')));
  shortErrors(serve, 'serve');

  const explain = cmd
    .command('explain-scope')
    .description('what a launch would grant, before any session exists (creates nothing)')
    .option('--workdir <dir>', 'the workdir a launch would use: its murmur.yaml is read as serve reads it, and the export roots are checked against it')
    .option('--manifest <file>', 'the manifest to explain instead of <workdir>/murmur.yaml (the workdir then defaults to the manifest\'s directory)')
    .option('--json', 'print the effective grants as one line of JSON (session_start.effective_grants)')
    .option('--strict', "a likely typo in the runtime's manifest blocks is an error, not a warning")
    .addOption(new Option('--containment <class>', 'the containment class to assume').choices(['advisory', 'scoped', 'sealed']).default('advisory'))
    .addHelpText(
      'after',
      `
Give --workdir, --manifest, or both, as for serve.

Examples:
  ${PROGRAM} explain-scope --workdir ./cap
  ${PROGRAM} explain-scope --manifest ./murmur.yaml --json
  ${PROGRAM} explain-scope --manifest ./murmur.yaml --workdir ./cap --containment sealed`,
    )
    .action((flags) => explainScopeCommand(flags).catch((error) => fail(error, 'explain-scope')));
  shortErrors(explain, 'explain-scope');

  const demo = cmd
    .command('demo')
    .description('start the example capsules and show the planes at work (what npm start runs)')
    .action(async () => {
      try {
        checkLogLevel();
        checkResolverChoice();
      } catch (error) {
        fail(error, 'demo');
      }
      const { runDemo } = await import('./demo.js');
      await runDemo().catch((error) => fail(error, 'demo'));
    });
  shortErrors(demo, 'demo');

  const records = cmd
    .command('records')
    .description("list the sessions in the records directory (id, the capsule's name, start, end, size), or prune the ended ones")
    .option('--json', 'one JSON line per session')
    .option('--prune <duration>', 'remove the sessions that ended longer ago than this, e.g. 30d (never a live one, never one without session_end)')
    .option('--dry-run', 'with --prune: print what would be removed, remove nothing')
    .addHelpText(
      'after',
      `
The records directory is RESOURCE_PLANE_RECORDS_DIR, else ~/.murmur/records. A trace is
append-only: a session is removed whole, and only once it ended (session_end written) and no
process has its trace open.

Examples:
  ${PROGRAM} records
  ${PROGRAM} records --prune 30d --dry-run`,
    )
    .action(async (flags: { json?: boolean; prune?: string; dryRun?: boolean }) => {
      try {
        await recordsCommand(flags);
      } catch (error) {
        fail(error, 'records');
      }
    });
  shortErrors(records, 'records');

  const ls = cmd
    .command('ls')
    .description("list a capsule's operator plane")
    .argument('<url>', 'the capsule URL, e.g. http://127.0.0.1:41234, or unix:/path/to/operator.sock')
    .option('--json', 'print the listing as the server sent it, as one line of JSON')
    .option('--max-bytes <bytes>', 'the largest listing body read, e.g. 256Mi (default 64Mi)')
    .option('-H, --header <line>', "a request header, 'Name: value' (repeatable; never logged), e.g. what a host app's auth hook asks for", collect, [])
    .addHelpText(
      'after',
      `
Every text the server sends is shown with control and format characters escaped; a listing whose
numbers are not numbers is refused, and so is one larger than --max-bytes.

Examples:
  ${PROGRAM} ls http://127.0.0.1:41234
  ${PROGRAM} ls unix:/run/cap/operator.sock --json`,
    )
    .action(async (url: string, flags: { json?: boolean; maxBytes?: string; header: string[] }) => {
      const { list, parseHeaders } = await import('./client.js');
      const run = async () => list(url, { json: flags.json === true, maxBytes: parseMaxBytes(flags.maxBytes), headers: parseHeaders(flags.header) });
      process.stdout.write(await run().catch((error) => fail(error, 'ls')));
    });
  shortErrors(ls, 'ls');

  const get = cmd
    .command('get')
    .description('download one file, verifying its etag against the bytes before saving')
    .argument('<url>', 'the capsule URL, or unix:/path/to/operator.sock')
    .argument('<path>', 'the path relative to the export root')
    .option('-o, --output <file>', "where to save it: a file, a directory (ending in '/' or existing) to save into under the file's name, or '-' for stdout (default: its name, here)")
    .option('--force', 'replace an existing file')
    .option('--max-bytes <bytes>', 'the largest file saved, e.g. 4Gi (default 1Gi)')
    .option('-H, --header <line>', "a request header, 'Name: value' (repeatable; never logged)", collect, [])
    .addHelpText(
      'after',
      `
The body streams into a temporary file beside the target and is moved into place only once its
SHA-256 matches the etag; an existing target is refused before anything is downloaded (a directory
is never replaced, even with --force), and so is a body longer than its content-length or than
--max-bytes. A progress bar is drawn on stderr when stderr is a terminal.

Examples:
  ${PROGRAM} get http://127.0.0.1:41234 report.md
  ${PROGRAM} get http://127.0.0.1:41234 sub/report.md -o downloads/
  ${PROGRAM} get http://127.0.0.1:41234 'sub dir/data.csv' -o data.csv --force
  ${PROGRAM} get unix:/run/cap/operator.sock report.md -o - | less`,
    )
    .action(async (url: string, path: string, flags: { output?: string; force?: boolean; maxBytes?: string; header: string[] }) => {
      const { get: download, parseHeaders } = await import('./client.js');
      let maxBytes: number | undefined;
      let headers: Record<string, string> = {};
      try {
        maxBytes = parseMaxBytes(flags.maxBytes);
        headers = parseHeaders(flags.header);
      } catch (error) {
        fail(error, 'get');
      }
      const r = await stoppable('get', async (signal) => download(url, path, { output: flags.output, force: flags.force, maxBytes, headers, progress: await terminalProgress(), signal }), 'interrupted; nothing was saved');
      if (r.savedTo) process.stderr.write(`saved ${r.bytes} bytes to ${r.savedTo} (sha256 ${r.sha256}, etag verified)\n`);
    });
  shortErrors(get, 'get');

  const mirrorCmd = cmd
    .command('mirror')
    .description('make a directory equal to the export: one listing, a verified GET only for what differs')
    .argument('<url>', 'the capsule URL, or unix:/path/to/operator.sock')
    .argument('<dir>', 'the local directory (created if missing)')
    .option('--delete', 'remove local files (and emptied directories) the export does not have; never without it')
    .option('--jobs <n>', 'connections at once (default 4)')
    .option('--json', 'print the summary as one line of JSON')
    .option('--max-bytes <bytes>', 'the largest file saved, e.g. 4Gi (default 1Gi)')
    .option('--listing-max-bytes <bytes>', 'the largest listing read, e.g. 256Mi (default 64Mi)')
    .option('-H, --header <line>', "a request header, 'Name: value' (repeatable; never logged)", collect, [])
    .addHelpText(
      'after',
      `
One listing, then a GET only for each file whose listed sha256 differs from what DIR holds. Each
body is saved only when its etag is the listed digest and its bytes hash to it: written to a
temporary file in DIR, fsync'd, then renamed into place. A file that changes between the listing
and its GET is asked for again (3 times in all), then reported, never saved. Names are the
server's text: one that is absolute or holds '..' is refused, and nothing is written through a
symlink in DIR. A progress bar is drawn on stderr when stderr is a terminal; one summary line
goes to stdout. Ctrl-C leaves no partial file; the next run takes up from what is already right.

Examples:
  ${PROGRAM} mirror http://127.0.0.1:41234 ./export
  ${PROGRAM} mirror unix:/run/cap/operator.sock ./export --delete --jobs 8
  ${PROGRAM} mirror http://127.0.0.1:8080/cap ./export -H 'Authorization: Bearer …' --json`,
    )
    .action(async (url: string, dir: string, flags: { delete?: boolean; jobs?: string; json?: boolean; maxBytes?: string; listingMaxBytes?: string; header: string[] }) => {
      const { parseHeaders } = await import('./client.js');
      const { mirror, mirrorExitStatus, renderSummary } = await import('./mirror.js');
      const { printable } = await import('./client.js');
      let opts: Parameters<typeof mirror>[2] = {};
      try {
        opts = {
          delete: flags.delete === true,
          jobs: parseJobs(flags.jobs, MAX_JOBS),
          maxBytes: parseMaxBytes(flags.maxBytes),
          listingMaxBytes: flags.listingMaxBytes === undefined ? undefined : parseBytesFlag('--listing-max-bytes', flags.listingMaxBytes),
          headers: parseHeaders(flags.header),
        };
      } catch (error) {
        fail(error, 'mirror');
      }
      const summary = await stoppable('mirror', async (signal) => mirror(url, dir, { ...opts, progress: await terminalFileProgress(), signal }), 'interrupted; files already placed are verified, and no partial file was left');
      for (const f of summary.failures) process.stderr.write(`error: ${printable(f.path)}: ${f.message}\n`);
      process.stdout.write(renderSummary(summary, flags.json === true, flags.delete === true));
      const status = mirrorExitStatus(summary);
      if (status !== 0) process.exit(status);
    });
  shortErrors(mirrorCmd, 'mirror');

  return cmd;
}

/** Runs the command line of this process; main.ts calls it once the compile cache is on. */
export async function main(): Promise<void> {
  // A command whose work is still pending when nothing is left to run has stalled: it must not end
  // with status 0 as if it had succeeded.
  let finished = false;
  process.once('beforeExit', () => {
    if (finished) return;
    process.stderr.write('error: the command stopped before it finished (an internal error); nothing was completed\n');
    process.exit(EXIT.internal);
  });
  try {
    await program().parseAsync(process.argv);
    finished = true;
  } catch (error) {
    if (error instanceof CommanderError) process.exit(error.exitCode === 0 ? EXIT.done : EXIT.usage);
    fail(error);
  }
}


/** A test's pause between the first stage's trace and the re-exec (src/testing/), only when a test asks for one. */
async function testPauseBeforeExec(): Promise<(() => Promise<void>) | undefined> {
  if (process.env.RESOURCE_PLANE_TEST_PAUSE_BEFORE_EXEC === undefined) return undefined;
  try {
    return (await import('../testing/probes.js')).pauseBeforeExec;
  } catch {
    return undefined; // not in the published package
  }
}

/**
 * The test probes of src/testing/ (what a confined server can reach, bypassing every check), loaded
 * only when a test sets one of their variables. They are not in the published package: there the
 * variables are refused with a warning instead of doing anything.
 */
async function runTestProbes(logger: { warn(fields: object, message: string): void }): Promise<void> {
  if (!Object.keys(process.env).some((name) => name.startsWith('RESOURCE_PLANE_TEST_'))) return;
  let probes: { runTestHooks(): Promise<void> };
  try {
    probes = await import('../testing/probes.js');
  } catch {
    logger.warn({}, 'RESOURCE_PLANE_TEST_* is set but this build has no test probes (they ship only in a checkout); ignored');
    return;
  }
  await probes.runTestHooks();
}
