// `serve`: one session over a workdir. The flags become a launch's options; then the process
// sequence of a launch (src/launch/): the first stage binds, confines and re-executes, the
// confined image launches, says it is ready (stdout's one line, sd_notify), and stops on a signal
// or when its control channel closes.
import { type Command, Option } from 'commander';
import { UsageError } from '../../codes.js';
import { COMPILE_CACHE_DIR, compileCacheOutcome } from '../compile-cache.js';
import { earlyLogger } from '../early-log.js';
import type { LaunchOptions } from '../../launch/launch.js';
import { runServeProcess } from '../../launch/process.js';
import { parseDigestCacheEntries } from '../../session/options.js';
import { parseDuration } from '../../manifest/grammars.js';
import { checkLogLevel, checkResolverChoice, ENVIRONMENT, fail, parseBytesFlag, PROGRAM, requiredAfterUnknown, shortErrors, STOP_SIGNALS } from '../common.js';

function parseBudgetBytes(value: string): number {
  return parseBytesFlag('--memory-budget', value);
}

function parseFetchMaxBytes(value: string): number {
  return parseBytesFlag('--fetch-max-bytes', value);
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

async function serveCommand(flags: ServeFlags): Promise<void> {
  checkLogLevel();
  checkResolverChoice();
  const early = earlyLogger();
  const {
    manifest,
    trace,
    control: _control,
    memoryBudget,
    refusalTraceRate,
    listingBudget,
    digestCacheEntries,
    landlock,
    listenGiven,
    strict: _strict,
    fetchMaxBytes,
    ...rest
  } = flags;
  const opts: LaunchOptions = {
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
  await runServeProcess(opts, {
    landlock,
    listenGiven,
    control: flags.control,
    early,
    firstStage: () => {
      const cache = compileCacheOutcome();
      if (cache?.why) early(cache.level, { compile_cache: COMPILE_CACHE_DIR }, `compile cache: ${cache.why}`);
    },
    logs: async () => (await import('../logger.js')).stderrLogs(),
    testPauseBeforeExec,
    runTestProbes,
    stopSignals: STOP_SIGNALS,
  });
}

/** A test's pause between the first stage's trace and the re-exec (src/testing/), only when a test asks for one. */
async function testPauseBeforeExec(): Promise<(() => Promise<void>) | undefined> {
  if (process.env.RESOURCE_PLANE_TEST_PAUSE_BEFORE_EXEC === undefined) return undefined;
  try {
    return (await import('../../testing/probes.js')).pauseBeforeExec;
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
    probes = await import('../../testing/probes.js');
  } catch {
    logger.warn({}, 'RESOURCE_PLANE_TEST_* is set but this build has no test probes (they ship only in a checkout); ignored');
    return;
  }
  await probes.runTestHooks();
}

/** The `serve` verb, on the command `cmd`. */
export function register(cmd: Command): void {
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
    .option(
      '--metrics-listen <addr>',
      'serve GET /metrics alone on its own listener, HOST:PORT or unix:PATH (implies --metrics), e.g. for a Prometheus scrape beside a unix operator socket',
    )
    .option('--memory-budget <bytes>', 'bytes reads and redeems in flight may hold, e.g. 256Mi (default 256Mi)')
    .option(
      '--refusal-trace-rate <n>',
      "refusals traced one by one per second, all clients together (default 200, burst 10x); past it they are summarised: bounds the trace's growth under refusals",
    )
    .option('--fetch-max-bytes <bytes>', 'the largest file fetch-peer-file lands, e.g. 64Mi (default 10Mi)')
    .option('--listing-budget <duration>', 'how long one listing may run, e.g. 30s (default 30s)')
    .option(
      '--digest-cache-entries <n>',
      'most file digests kept for repeat listings and large reads, 0 to 16777216 (default 262144; ~100 bytes each once stored, beside --memory-budget)',
    )
    .option(
      '--operator-listen <addr>',
      'serve the operator plane on its own listener, HOST:PORT or unix:PATH (a unix socket outside the workdir, created 0600, is recommended); the main listener then serves only the peer plane and the card',
    )
    .addOption(new Option('--control <channel>', 'the control channel: stdio speaks MCP').choices(['stdio', 'none']).default('none'))
    .option(
      '--strict',
      "a likely typo in the runtime's manifest blocks is an error (E-MAN-003), not a warning (an unknown key in exports.* or the allow lists always is)",
    )
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
}
