// Applying the self-confinement of `resource-plane serve` with Landlock (the ruleset itself is
// planned in src/launch/confine-plan.ts): after launch the process can read only
// what it needs (the workdir, its own install, the system files Node, TLS and DNS use), write only
// the trace and the workdir's peer-in, bind only its listen port and connect only to the ports of
// the allow lists it connects through. Where the kernel has no Landlock, or when told not to, it serves
// unconfined and says why in session_start.
//
// Why a re-exec. A Landlock domain binds the thread that calls landlock_restrict_self and the
// threads it creates afterwards, never threads that already exist. By the time any of our code
// runs, Node has started its V8 platform threads and, for an ES module entry point, the libuv pool
// (the ESM loader reads modules through it); pool threads do every asynchronous open, fs's and the
// addon's. So confining in place would leave exactly the file-opening threads outside. Instead the
// launch is split in two phases within one process (one PID):
//
//   1. unconfined: validate everything (options, manifest, export roots: a refusal exits here as
//      before), settle what the session needs (workdir, session id, trace path, the manifest as
//      read once), plan the ruleset, bind the listen ports (held until the execve closes them, so
//      a port in use fails before anything of the session exists), create the trace file and
//      peer-in; then, on the main thread, restrict that thread and execve the same command from it;
//   2. the new image starts with that one thread, already in the domain, so every thread Node and
//      libuv create from then on is inside it. It takes the settled launch from an environment
//      variable (the manifest is not read again: after confinement it may not be readable), checks
//      that the domain is really in force, and serves.
//
// Nothing here runs for a library launch (launch()): confining the caller's process would be a
// surprise, so those sessions record that they are not confined.
import { closeSync, mkdirSync, openSync, unlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { dirname, join } from 'node:path';
import { UsageError } from '../codes.js';
import { notConfined, unhandledRights, type Confinement } from './confinement.js';
import type { Manifest } from '../manifest/model.js';
import * as native from '../native.js';
import { PEER_INBOX_DIR } from '../manifest/scope.js';
import { Trace } from '../trace/trace.js';
import { planConfinement, type Plan } from './confine-plan.js';
import { prepareSession, removeEmptyUpTo, type SessionOptions } from './open-session.js';
import { parseAdvertise, parseListen, parseOperatorListen } from './options.js';

/** Carries a confined launch's settled state across the execve (phase 1 → phase 2). */
export const HANDOFF_ENV = 'RESOURCE_PLANE_CONFINED_LAUNCH';
/** `off` serves unconfined (as `--no-landlock` does); `auto` (the default) confines where possible. */
export const LANDLOCK_ENV = 'RESOURCE_PLANE_LANDLOCK';
/** Above this the handoff would not fit one environment string (the kernel caps each at 128 KiB). */
const HANDOFF_MAX_BYTES = 96 * 1024;

export type LandlockMode = 'auto' | 'off';

/** `--no-landlock` or RESOURCE_PLANE_LANDLOCK=off turn confinement off; anything but off/auto is a usage error. */
export function landlockMode(flag: boolean, env: NodeJS.ProcessEnv = process.env): { mode: LandlockMode; why: string | null } {
  if (!flag) return { mode: 'off', why: 'disabled by --no-landlock' };
  const value = env[LANDLOCK_ENV];
  if (value === undefined || value === '' || value === 'auto') return { mode: 'auto', why: null };
  if (value === 'off') return { mode: 'off', why: `disabled by ${LANDLOCK_ENV}=off` };
  throw new UsageError(`${LANDLOCK_ENV} must be 'auto' or 'off' (got '${value}')`);
}

interface Handoff {
  v: 1;
  workdir: string;
  manifest: Manifest;
  sessionId: string;
  tracePath: string;
  confinement: Confinement;
}

function report(plan: Plan, applied: native.LandlockApplied): Confinement {
  const skippedIdx = new Set(applied.skipped.map((s) => s.index));
  const kept = plan.rules.filter((_r, i) => !skippedIdx.has(i));
  const net = applied.handledNet;
  return {
    applied: true,
    landlock_abi: applied.abi,
    reason: null,
    read: kept.filter((r) => r.role === 'read').map((r) => r.path),
    execute: kept.filter((r) => r.role === 'execute').map((r) => r.path),
    write: kept.filter((r) => r.role === 'write').map((r) => r.path),
    bind_ports: net.includes('bind_tcp') ? plan.bindPorts : null,
    connect_ports: net.includes('connect_tcp') ? (plan.connectPorts ?? []) : null,
    scoped: applied.scoped,
    unhandled: unhandledRights(applied.abi),
    skipped: applied.skipped.map((s) => `${plan.rules[s.index]!.path}: ${s.detail}`),
    notes: [
      ...plan.notes,
      ...(applied.abi < 4 ? [`Landlock ABI ${applied.abi} has no network rules: TCP binds and connects are not restricted`] : []),
    ],
  };
}

export interface ConfineOptions extends Omit<SessionOptions, 'advertisedUrl' | 'confinement'> {
  listen?: string;
  advertise?: string;
  operatorListen?: string;
}

/**
 * The listen addresses bound here and held until the execve closes them (libuv's sockets are
 * close-on-exec): a port already taken fails the launch before anything of the session exists,
 * as launch() binds before it opens the session. A unix socket is not held (closing would have to
 * unlink it): parseOperatorListen has refused an existing path.
 */
async function holdPorts(addresses: { host: string; port: number }[]): Promise<{ release(): Promise<void> }> {
  const held: Server[] = [];
  const release = () => Promise.all(held.map((s) => new Promise<void>((done) => s.close(() => done())))).then(() => undefined);
  try {
    for (const { host, port } of addresses) {
      const server = createServer();
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen({ host, port, exclusive: true }, () => {
          server.off('error', reject);
          resolve();
        });
      });
      held.push(server);
    }
  } catch (error) {
    await release();
    throw error;
  }
  return { release };
}

/**
 * Creates the trace file as the session will open it (so a bad --trace fails here with the same
 * error), remembering what it made: `undo` removes the file and the directories it created, for a
 * launch that goes on unconfined (with a new session) instead of re-executing.
 */
async function createTraceFile(tracePath: string, sessionId: string): Promise<{ undo(): void }> {
  const firstMade = mkdirSync(dirname(tracePath), { recursive: true, mode: 0o700 });
  let made = false;
  const undo = () => {
    try {
      if (made) unlinkSync(tracePath);
      if (firstMade !== undefined) removeEmptyUpTo(dirname(tracePath), firstMade);
    } catch {
      // Best effort: an unconfined launch still serves.
    }
  };
  try {
    await Trace.open(tracePath, sessionId).close();
    made = true;
  } catch (error) {
    undo();
    throw error;
  }
  return { undo };
}

/**
 * Phase 1. Validates the launch as serve would, then confines the main thread and re-executes the
 * same command inside the domain: on success it does not return. It returns only a report of why
 * nothing was applied, and the caller then serves in this process, unconfined (launch() then
 * prepares its own session: nothing of this one is left behind).
 */
export async function confineAndReexec(opts: ConfineOptions, log: (fields: { session_id: string }, msg: string) => void): Promise<Confinement> {
  const listen = parseListen(opts.listen ?? '127.0.0.1:0');
  parseAdvertise(opts.advertise);
  const operatorListen = opts.operatorListen === undefined ? null : parseOperatorListen(opts.operatorListen, opts.workdir);
  // Every check a launch makes, with the same diagnostics; the workdir is created if missing.
  const prepared = await prepareSession(opts);
  prepared.release();
  const { workdir, manifest, sessionId, tracePath } = prepared;

  const abi = native.landlockAbi();
  if (!abi.ok) return notConfined(`Landlock is unavailable: ${abi.code} (${abi.detail})`);

  const plan = planConfinement({ workdir, tracePath, manifest, listenPort: listen.port, operatorListen });
  if (plan.rules.some((r) => r.role === 'read' && r.path === '/')) {
    return notConfined("a read rule would cover the whole filesystem ('/')", abi.abi);
  }
  const handoffBase = { v: 1 as const, workdir, manifest, sessionId, tracePath };
  if (Buffer.byteLength(JSON.stringify(handoffBase)) > HANDOFF_MAX_BYTES) {
    return notConfined('the parsed manifest is too large to hand to the confined process', abi.abi);
  }

  // Nothing of the session exists before its ports are bound: a port in use fails here, and the
  // workdir this launch created goes with it.
  let ports: { release(): Promise<void> };
  try {
    ports = await holdPorts([listen, ...(operatorListen !== null && 'port' in operatorListen ? [operatorListen] : [])]);
  } catch (error) {
    prepared.abandon();
    throw error;
  }
  let trace: { undo(): void };
  try {
    // The trace file must exist for its rule (the rule names the file, not its whole directory).
    trace = await createTraceFile(tracePath, sessionId);
  } catch (error) {
    await ports.release();
    prepared.abandon();
    throw error;
  }
  if (manifest.peerFetchAllow !== null) {
    try {
      mkdirSync(join(workdir, PEER_INBOX_DIR), { mode: 0o755 });
    } catch {
      // Already there (or unusable: the rule is optional and the landing refuses it on its own).
    }
  }

  const applied = native.landlockRestrictSelf({
    paths: plan.rules.map(({ path, access, directory, optional }) => ({ path, access, directory, optional })),
    bindPorts: plan.bindPorts,
    restrictConnect: plan.connectPorts !== null,
    connectPorts: plan.connectPorts ?? [],
  });
  if (!applied.ok) {
    trace.undo();
    await ports.release();
    return notConfined(`the Landlock ruleset was not applied: ${applied.code} (${applied.detail})`, applied.abi || abi.abi);
  }

  const handoff: Handoff = { ...handoffBase, confinement: report(plan, applied) };
  const env = Object.entries({ ...process.env, [HANDOFF_ENV]: JSON.stringify(handoff) })
    .filter((e): e is [string, string] => e[1] !== undefined)
    .map(([k, v]) => `${k}=${v}`);
  log({ session_id: sessionId }, 'confined: re-executing inside the Landlock domain');
  const argv = [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
  const failed = native.replaceProcessImage(process.execPath, argv, env);
  // Still here: the main thread is confined for good, the threads already running are not. Serve
  // on (the session works: what the main thread opens is in the ruleset), but say it plainly. The
  // trace file stays: the confined main thread may not remove it.
  await ports.release();
  return notConfined(
    `the re-exec into the Landlock domain failed (${failed.code}: ${failed.detail}); this process's main thread is confined, its other threads are not`,
    applied.abi,
  );
}

/**
 * Phase 2: the settled launch phase 1 handed over, or null when this is not a confined re-exec.
 * The variable is removed from the environment at once. The report's `applied` is believed only
 * if the domain is observably in force (the root directory, which no rule covers, is unreadable),
 * so a hand-set variable cannot make an unconfined server claim otherwise.
 */
export function takeHandoff(env: NodeJS.ProcessEnv = process.env): Omit<Handoff, 'v'> | null {
  const raw = env[HANDOFF_ENV];
  if (raw === undefined) return null;
  delete env[HANDOFF_ENV];
  let handoff: Handoff;
  try {
    handoff = JSON.parse(raw) as Handoff;
  } catch {
    throw new UsageError(`${HANDOFF_ENV} is not a confined launch's handoff`);
  }
  if (handoff?.v !== 1 || typeof handoff.workdir !== 'string' || typeof handoff.sessionId !== 'string' ||
      typeof handoff.tracePath !== 'string' || typeof handoff.manifest !== 'object' || handoff.manifest === null ||
      typeof handoff.confinement?.applied !== 'boolean') {
    throw new UsageError(`${HANDOFF_ENV} is not a confined launch's handoff`);
  }
  let confinement = handoff.confinement;
  if (confinement.applied && !rootIsDenied()) {
    confinement = notConfined(`${HANDOFF_ENV} claims a Landlock domain, but none is in force ('/' is readable)`, confinement.landlock_abi);
  }
  if (confinement.applied && !pinOwnProc()) {
    confinement = { ...confinement, notes: [...confinement.notes, `/proc/${process.pid} is not readable: process metrics (memory, descriptors) read 0`] };
  }
  return { workdir: handoff.workdir, manifest: handoff.manifest, sessionId: handoff.sessionId, tracePath: handoff.tracePath, confinement };
}

/**
 * Holds /proc/<pid> open for the life of the process. The rule on it binds the inode, and procfs
 * makes a new inode for a pid directory each time its dentry is looked up afresh: pinned, the
 * dentry (and so the inode the rule names) is never reclaimed.
 */
let ownProc: number | null = null;
function pinOwnProc(): boolean {
  try {
    ownProc ??= openSync(`/proc/${process.pid}`, 'r');
    return true;
  } catch {
    return false;
  }
}

function rootIsDenied(): boolean {
  try {
    closeSync(openSync('/', 'r'));
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EACCES';
  }
}
