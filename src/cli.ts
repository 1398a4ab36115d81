#!/usr/bin/env node
// The `resource-plane` command: argv → a session (serve), the grants a launch would have
// (explain-scope), the two-capsule demo, and small operator client verbs. Diagnostics from the
// manifest print as `error[CODE]: …` / `  hint: …` and exit 2; other launch failures exit 1.
import { dirname, resolve } from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import { UsageError } from './codes.js';
import { notConfined } from './confinement.js';
import { checkExportRootsAt } from './launch/checks.js';
import { confineAndReexec, landlockMode, takeHandoff } from './launch/confine.js';
import { launch, stderrLogger, type LaunchOptions } from './launch/launch.js';
import { runTestHooks } from './launch/test-hooks.js';
import { DRAIN_TIMEOUT_MS } from './server.js';

/** Everything in flight is given this long to end after SIGINT, SIGTERM or the control channel closing. */
const SHUTDOWN_BOUND_MS = DRAIN_TIMEOUT_MS + 5_000;
import { loadManifest } from './launch/manifest-file.js';
import { parseContainment } from './launch/options.js';
import { parseByteCount, parseDuration } from './manifest/grammars.js';

function parseBudgetBytes(value: string): number {
  const n = parseByteCount(value);
  if (n === null) throw new UsageError(`--memory-budget must be a byte count such as 256Mi (got '${value}')`);
  return n;
}

function parseBudgetSeconds(value: string): number {
  const n = parseDuration(value);
  if (n === null || n > 2_000_000) throw new UsageError(`--listing-budget must be a duration such as 30s (got '${value}')`);
  return n;
}
import { ManifestError } from './manifest/diagnostics.js';
import { effectiveGrants, renderExplainScope } from './scope.js';

function fail(error: unknown): never {
  if ((error as Error)?.name === 'ClientError') {
    process.stderr.write(`error: ${(error as Error).message}\n`);
    process.exit(1);
  }
  if (error instanceof ManifestError) {
    process.stderr.write(`${error.render()}\n`);
    process.exit(2);
  }
  if (error instanceof UsageError) {
    process.stderr.write(`error: ${error.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`error: ${(error as Error)?.message ?? String(error)}\n`);
  process.exit(1);
}

interface ServeFlags {
  workdir: string;
  manifest?: string;
  listen: string;
  advertise?: string;
  sessionId?: string;
  containment: string;
  trace?: string;
  operatorListen?: string;
  memoryBudget?: string;
  metrics?: boolean;
  listingBudget?: string;
  control: 'stdio' | 'none';
  /** false with --no-landlock. */
  landlock: boolean;
}

async function serveCommand(flags: ServeFlags): Promise<void> {
  const root = stderrLogger();
  const { manifest, trace, control: _control, memoryBudget, listingBudget, landlock, ...rest } = flags;
  let opts: LaunchOptions = {
    ...rest,
    manifestPath: manifest,
    tracePath: trace,
    logger: root,
    ...(memoryBudget !== undefined ? { memoryBudgetBytes: parseBudgetBytes(memoryBudget) } : {}),
    ...(listingBudget !== undefined ? { listingBudgetMs: parseBudgetSeconds(listingBudget) * 1000 } : {}),
  };
  // Confinement (src/launch/confine.ts): either this is the re-executed, already confined image,
  // which takes the launch its first phase settled, or this is the first phase, which confines and
  // re-executes (not returning) unless Landlock is off or unavailable here.
  let confinement;
  const handoff = takeHandoff();
  if (handoff) {
    const { confinement: applied, ...settled } = handoff;
    opts = { ...opts, ...settled, manifestPath: undefined };
    confinement = applied;
  } else {
    const { mode, why } = landlockMode(landlock);
    confinement = mode === 'off' ? notConfined(why ?? 'disabled') : await confineAndReexec(opts, (fields, msg) => root.debug(fields, msg));
  }
  const launched = await launch({ ...opts, confinement });
  const { session, server } = launched;
  // From here on every line carries the session id (launch binds the request logs the same way).
  const logger = root.child({ session_id: session.sessionId });
  // After the launch, so that a launch that fails prints its error and nothing else.
  if (confinement.applied) logger.info({ landlock_abi: confinement.landlock_abi }, 'confined with Landlock');
  else logger.info({ reason: confinement.reason }, 'serving without Landlock confinement');
  await runTestHooks();
  const ready = {
    event: 'listening',
    url: server.url,
    advertised_url: server.advertisedUrl,
    session_id: session.sessionId,
    trace: session.trace.path,
    // Where the operator plane is, when it has its own listener (`unix:<path>` or a URL).
    ...(launched.operator ? { operator_url: launched.operator.url } : {}),
  };
  let shuttingDown = false;
  const shutdown = async (why: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    logger.info({ why }, 'shutting down');
    // The bound: responses get DRAIN_TIMEOUT_MS, then are cut. If anything still holds the process
    // past SHUTDOWN_BOUND_MS (a native worker that cannot be interrupted), the key is zeroed and the
    // process ends itself: exiting normally would wait for the thread pool.
    setTimeout(() => {
      launched.session.key?.destroy();
      process.kill(process.pid, 'SIGKILL');
    }, SHUTDOWN_BOUND_MS).unref();
    await launched.stop(why).catch(() => undefined);
    logger.flush();
    process.exit(0);
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => void shutdown(signal));
  if (flags.control === 'stdio') {
    const { runControl } = await import('./control.js');
    await runControl(launched, ready, () => shutdown('control channel closed'));
  } else {
    // The launcher reads this one line from stdout instead of scraping logs.
    process.stdout.write(`${JSON.stringify(ready)}\n`);
  }
  logger.info(ready, 'serving');
}

async function explainScopeCommand(flags: { manifest: string; workdir?: string; json?: boolean; containment?: string }): Promise<void> {
  const manifest = loadManifest(flags.manifest);
  const containment = parseContainment(flags.containment);
  // The same root checks a launch makes (E-CAP-007), against the workdir the manifest sits in
  // unless told otherwise; nothing is created, and a workdir that does not exist yet passes.
  await checkExportRootsAt(manifest, flags.workdir ?? dirname(resolve(flags.manifest)));
  if (flags.json) process.stdout.write(`${JSON.stringify(effectiveGrants(manifest, containment))}\n`);
  else process.stdout.write(renderExplainScope(manifest, containment));
}

export function program(): Command {
  const cmd = new Command('resource-plane')
    .description('The hardened file server of a capsule: operator plane, peer plane, audit trace.')
    .showHelpAfterError()
    .exitOverride();

  cmd
    .command('serve')
    .description('launch one session over a workdir')
    .requiredOption('--workdir <dir>', 'the capsule workdir')
    .option('--manifest <file>', 'the manifest (default: <workdir>/murmur.yaml)')
    .option('--listen <host:port>', 'where to listen', '127.0.0.1:0')
    .option('--advertise <url>', 'the URL the agent card and audience say (default: http://localhost:<bound port>)')
    .option('--session-id <id>', 'the session id (default: a fresh ses_<32 hex>)')
    .addOption(new Option('--containment <class>', 'the containment class the sandbox achieved').choices(['advisory', 'scoped', 'sealed']).default('advisory'))
    .option('--trace <file>', 'the trace file (default: in the records directory, outside the workdir)')
    .option('--metrics', 'count answers and serve Prometheus metrics at GET /metrics (on the --operator-listen listener when there is one)')
    .option('--memory-budget <bytes>', 'bytes reads and redeems in flight may hold, e.g. 256Mi (default 256Mi)')
    .option('--listing-budget <duration>', 'how long one listing may run, e.g. 30s (default 30s)')
    .option('--operator-listen <addr>', 'serve the operator plane on its own listener, HOST:PORT or unix:PATH (a unix socket outside the workdir, created 0600, is recommended); the main listener then serves only the peer plane and the card')
    .addOption(new Option('--control <channel>', 'the control channel').choices(['stdio', 'none']).default('none'))
    .option('--no-landlock', 'serve without confining the process with Landlock (also RESOURCE_PLANE_LANDLOCK=off)')
    .action((flags: ServeFlags) => serveCommand(flags).catch(fail));

  cmd
    .command('explain-scope')
    .description('what a launch of this manifest would grant, before any session exists')
    .requiredOption('--manifest <file>', 'the manifest to explain')
    .option('--workdir <dir>', 'the workdir a launch would use, for the export-root checks (default: the manifest\'s directory)')
    .option('--json', 'print the effective grants as one line of JSON')
    .addOption(new Option('--containment <class>', 'the containment class to assume').choices(['advisory', 'scoped', 'sealed']).default('advisory'))
    .action((flags) => explainScopeCommand(flags).catch(fail));

  cmd
    .command('demo')
    .description('start the example capsules and show the planes at work (what npm start runs)')
    .action(async () => {
      const { runDemo } = await import('./demo.js');
      await runDemo().catch(fail);
    });

  cmd
    .command('ls')
    .description("list a capsule's operator plane as a table")
    .argument('<url>', 'the capsule URL, e.g. http://127.0.0.1:41234')
    .action(async (url: string) => {
      const { list } = await import('./client.js');
      process.stdout.write(await list(url).catch(fail));
    });

  cmd
    .command('get')
    .description('download one file, verifying its etag against the bytes before saving')
    .argument('<url>', 'the capsule URL')
    .argument('<path>', 'the path relative to the export root')
    .option('-o, --output <file>', "where to save it ('-' for stdout; default: its basename here)")
    .option('--force', 'replace an existing file')
    .action(async (url: string, path: string, flags: { output?: string; force?: boolean }) => {
      const { get } = await import('./client.js');
      const r = await get(url, path, flags).catch(fail);
      if (r.savedTo) process.stderr.write(`saved ${r.bytes} bytes to ${r.savedTo} (sha256 ${r.sha256}, etag verified)\n`);
    });

  return cmd;
}

async function main(): Promise<void> {
  try {
    await program().parseAsync(process.argv);
  } catch (error) {
    if (error instanceof CommanderError) process.exit(error.exitCode === 0 ? 0 : 2);
    fail(error);
  }
}

void main();
