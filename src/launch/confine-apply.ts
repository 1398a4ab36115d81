// Applying the self-confinement of `resource-plane serve` with Landlock (the ruleset itself is
// planned in src/launch/confine-plan.ts): after launch the process can read only
// what it needs (the workdir, its own install, the system files Node, TLS and DNS use), write only
// the trace and the workdir's peer-in, bind no port (its listeners are bound before, and inherited) and connect only to the ports of
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
//      read once), plan the ruleset, bind every listening socket once (src/launch/sockets.ts: a
//      port in use fails before anything of the session exists), open the sd_notify socket,
//      create the trace file and peer-in; then, on the main thread, restrict that thread and
//      execve the same command from it, keeping exactly those sockets open across it;
//   2. the new image starts with that one thread, already in the domain, so every thread Node and
//      libuv create from then on is inside it. It takes the settled launch from an environment
//      variable (the manifest is not read again: after confinement it may not be readable), checks
//      that the domain is really in force, and serves the sockets it inherited (it binds none).
//
// Nothing here runs for a library launch (launch()): confining the caller's process would be a
// surprise, so those sessions record that they are not confined.
// Why this file is long: the re-exec's handshake (what the first stage hands over, what the
// confined image takes back) reads as one sequence; the ruleset is planned apart (confine-plan.ts).
import { closeSync, constants as fsConstants, mkdirSync, openSync, unlinkSync } from 'node:fs';
import { rmdir, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { UsageError } from '../codes.js';
import { notConfined, unhandledRights, type Confinement } from '../session/confinement.js';
import type { Manifest } from '../manifest/model.js';
import * as landlock from '../addon/landlock.js';
import * as sockets from '../addon/sockets.js';
import { PEER_INBOX_DIR } from '../manifest/scope.js';
import { Trace } from '../trace/trace.js';
import { planConfinement, type Plan } from './confine-plan.js';
import { bindListeners, closeListeners, LISTENER_ROLES, type HeldListener } from './sockets.js';
import { prepareSession, removeEmptyUpTo, type SessionOptions } from '../session/open-session.js';
import { parseAddresses } from '../session/options.js';

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
  v: 2;
  workdir: string;
  manifest: Manifest;
  sessionId: string;
  tracePath: string;
  confinement: Confinement;
  /** The listening sockets the new image serves, under the descriptor numbers they crossed with. */
  listeners: HeldListener[];
  /** The sd_notify socket, connected, or null. */
  notifyFd: number | null;
  /**
   * A read-only descriptor of the trace, held from its creation in phase 1 until phase 2 has the
   * trace open itself: across the exec, `records --prune` sees it live (a reused --session-id's
   * trace still ends with the old session_end), and the file the Landlock rule names stays the one
   * served. Optional: absent in a handoff that has none.
   */
  traceHoldFd?: number | null;
}

function report(plan: Plan, applied: landlock.LandlockApplied): Confinement {
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
    notes: [...plan.notes, ...(applied.abi < 4 ? [`Landlock ABI ${applied.abi} has no network rules: TCP binds and connects are not restricted`] : [])],
  };
}

export interface ConfineOptions extends Omit<SessionOptions, 'advertisedUrl' | 'confinement'> {
  listen?: string;
  advertise?: string;
  operatorListen?: string;
  metricsListen?: string;
}

/**
 * Creates the trace file as the session will open it (so a bad --trace fails here with the same
 * error), remembering what it made: `undo` removes the file and the directories it created, for a
 * launch that goes on unconfined (with a new session) instead of re-executing.
 */
async function createTraceFile(tracePath: string, sessionId: string): Promise<{ undo(): void; firstMade: string | undefined }> {
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
  return { undo, firstMade };
}

/** What phase 1 hands back when it did not re-execute: the launch then serves in this process. */
export interface Unconfined {
  confinement: Confinement;
  /** The sockets bound (or inherited) for the session, to be served as they are; null: none yet. */
  listeners: HeldListener[] | null;
  /** The identity phase 1 settled, kept so that the session it serves is the one it planned. */
  sessionId?: string;
  tracePath?: string;
}

/** rmdir `dir` and its parents up to `top` through libuv's pool (see the exec failure below). */
async function removeEmptyUpToOffThread(dir: string, top: string): Promise<void> {
  for (let at = dir; ; at = dirname(at)) {
    try {
      await rmdir(at);
    } catch {
      return;
    }
    if (at === top || dirname(at) === at) return;
  }
}

/**
 * Phase 1. Validates the launch as serve would, binds its listeners (or takes `activated`, the
 * sockets systemd handed over), then confines the main thread and re-executes the same command
 * inside the domain: on success it does not return. It returns when no domain was applied (no
 * Landlock here, or the ruleset refused), with the listeners bound: the caller then serves them
 * in this process, unconfined, as the same session. Every failure before that leaves nothing
 * (listeners closed, trace and workdir removed); so does an execve that fails once the main
 * thread is confined, which is then an error: a half-confined process must not serve.
 */
export async function confineAndReexec(
  opts: ConfineOptions,
  log: (fields: { session_id: string }, msg: string) => void,
  activated: HeldListener[] | null,
  notifyFd: number | null,
  onStale?: (path: string) => void,
  beforeExec?: () => Promise<void>,
): Promise<Unconfined> {
  const { listen, operator: operatorListen, metrics: metricsListen } = parseAddresses(opts, activated !== null, onStale);
  // Every check a launch makes, with the same diagnostics; the workdir is created if missing.
  const prepared = await prepareSession(opts, true);
  prepared.release();
  const { workdir, manifest, sessionId, tracePath } = prepared;
  const settled = { sessionId, tracePath };

  const abi = landlock.landlockAbi();
  if (!abi.ok) return { confinement: notConfined(`Landlock is unavailable: ${abi.code} (${abi.detail})`), listeners: activated, ...settled };

  // Sockets are bound before confinement and never after: the domain grants no TCP bind at all.
  // A handed-over socket is systemd's to remove; only its path matters (none for TCP).
  const sidePath = (role: 'operator' | 'metrics', parsed: typeof operatorListen) => {
    if (!activated) return parsed;
    const socket = activated.find((l) => l.role === role);
    return socket?.url.startsWith('unix:') ? { path: socket.url.slice('unix:'.length) } : null;
  };
  const plan = planConfinement({
    workdir,
    tracePath,
    manifest,
    listenPort: listen.port,
    operatorListen: sidePath('operator', operatorListen),
    metricsListen: sidePath('metrics', metricsListen),
    inheritedListeners: true,
    ownedSocket: !activated,
  });
  if (plan.rules.some((r) => r.role === 'read' && r.path === '/')) {
    return { confinement: notConfined("a read rule would cover the whole filesystem ('/')", abi.abi), listeners: activated, ...settled };
  }
  const handoffBase = { v: 2 as const, workdir, manifest, sessionId, tracePath };
  if (Buffer.byteLength(JSON.stringify(handoffBase)) > HANDOFF_MAX_BYTES) {
    return { confinement: notConfined('the parsed manifest is too large to hand to the confined process', abi.abi), listeners: activated, ...settled };
  }

  // Nothing of the session exists before its sockets are bound: a port in use fails here, and the
  // workdir this launch created goes with it.
  let listeners: HeldListener[];
  try {
    listeners = activated ?? (await bindListeners(listen, operatorListen, metricsListen));
  } catch (error) {
    prepared.abandon();
    throw error;
  }
  let trace: { undo(): void; firstMade: string | undefined };
  try {
    // The trace file must exist for its rule (the rule names the file, not its whole directory).
    trace = await createTraceFile(tracePath, sessionId);
  } catch (error) {
    closeListeners(listeners);
    prepared.abandon();
    throw error;
  }
  // Held open from here to phase 2's own open (see Handoff.traceHoldFd).
  let traceHoldFd: number;
  try {
    traceHoldFd = openSync(tracePath, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  } catch (error) {
    trace.undo();
    closeListeners(listeners);
    prepared.abandon();
    throw error;
  }
  let inboxMade = false;
  if (manifest.peerFetchAllow !== null) {
    try {
      mkdirSync(join(workdir, PEER_INBOX_DIR), { mode: 0o755 });
      inboxMade = true;
    } catch {
      // Already there (or unusable: the rule is optional and the landing refuses it on its own).
    }
  }

  const applied = landlock.landlockRestrictSelf({
    paths: plan.rules.map(({ path, access, directory, optional }) => ({ path, access, directory, optional })),
    bindPorts: plan.bindPorts,
    restrictConnect: plan.connectPorts !== null,
    connectPorts: plan.connectPorts ?? [],
  });
  if (!applied.ok) {
    closeSync(traceHoldFd);
    trace.undo();
    return {
      confinement: notConfined(`the Landlock ruleset was not applied: ${applied.code} (${applied.detail})`, applied.abi || abi.abi),
      listeners,
      ...settled,
    };
  }

  const handoff: Handoff = {
    ...handoffBase,
    confinement: report(plan, applied),
    listeners: listeners.map(({ role, fd, url, defaultAdvertisedUrl, unlinkOnClose }) => ({ role, fd, url, defaultAdvertisedUrl, unlinkOnClose })),
    notifyFd,
    traceHoldFd,
  };
  const env = Object.entries({ ...process.env, [HANDOFF_ENV]: JSON.stringify(handoff) })
    .filter((e): e is [string, string] => e[1] !== undefined)
    .map(([k, v]) => `${k}=${v}`);
  log({ session_id: sessionId }, 'confined: re-executing inside the Landlock domain');
  const argv = [process.execPath, ...process.execArgv, ...process.argv.slice(1)];
  const keep = [...listeners.map((l) => l.fd), ...(notifyFd === null ? [] : [notifyFd]), traceHoldFd];
  await beforeExec?.();
  const failed = landlock.replaceProcessImage(process.execPath, argv, env, keep);
  // Still here: the main thread is confined for good, the threads already running are not. No
  // session is served from a half-confined process; what this launch made is removed through
  // libuv's pool, whose threads predate the domain (the main thread itself may no longer remove
  // the trace or the directories it created).
  closeListeners(listeners);
  closeSync(traceHoldFd);
  await unlink(tracePath).catch(() => undefined);
  if (trace.firstMade !== undefined) await removeEmptyUpToOffThread(dirname(tracePath), trace.firstMade);
  if (inboxMade) await rmdir(join(workdir, PEER_INBOX_DIR)).catch(() => undefined);
  if (prepared.createdWorkdir) await removeEmptyUpToOffThread(prepared.createdWorkdir.dir, prepared.createdWorkdir.top);
  throw new Error(
    `the re-exec into the Landlock domain failed (${failed.code}: ${failed.detail}); nothing was served and nothing of session ${sessionId} was kept (serve with --no-landlock to run unconfined)`,
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
  if (
    handoff?.v !== 2 ||
    typeof handoff.workdir !== 'string' ||
    typeof handoff.sessionId !== 'string' ||
    typeof handoff.tracePath !== 'string' ||
    typeof handoff.manifest !== 'object' ||
    handoff.manifest === null ||
    typeof handoff.confinement?.applied !== 'boolean' ||
    !Array.isArray(handoff.listeners) ||
    !handoff.listeners.every(
      (l) =>
        Number.isInteger(l?.fd) &&
        (LISTENER_ROLES as readonly string[]).includes(l?.role) &&
        typeof l.url === 'string' &&
        typeof l.defaultAdvertisedUrl === 'string' &&
        (l.unlinkOnClose === null || typeof l.unlinkOnClose === 'string'),
    ) ||
    !(handoff.notifyFd === null || Number.isInteger(handoff.notifyFd)) ||
    !(handoff.traceHoldFd === undefined || handoff.traceHoldFd === null || Number.isInteger(handoff.traceHoldFd))
  ) {
    throw new UsageError(`${HANDOFF_ENV} is not a confined launch's handoff`);
  }
  let confinement = handoff.confinement;
  if (confinement.applied && !rootIsDenied()) {
    confinement = notConfined(`${HANDOFF_ENV} claims a Landlock domain, but none is in force ('/' is readable)`, confinement.landlock_abi);
  }
  if (confinement.applied && !pinOwnProc()) {
    confinement = { ...confinement, notes: [...confinement.notes, `/proc/${process.pid} is not readable: process metrics (memory, descriptors) read 0`] };
  }
  // The sockets are ours from here: marked close-on-exec again, and each must be what it claims.
  for (const l of handoff.listeners) {
    const info = sockets.socketInfo(l.fd);
    if (!info.ok || !info.listening || !info.stream) throw new UsageError(`${HANDOFF_ENV}: descriptor ${l.fd} is not a listening socket`);
    sockets.setCloexec(l.fd);
  }
  if (handoff.notifyFd !== null) sockets.setCloexec(handoff.notifyFd);
  const traceHoldFd = handoff.traceHoldFd ?? null;
  if (traceHoldFd !== null) sockets.setCloexec(traceHoldFd);
  return {
    workdir: handoff.workdir,
    manifest: handoff.manifest,
    sessionId: handoff.sessionId,
    tracePath: handoff.tracePath,
    confinement,
    listeners: handoff.listeners,
    notifyFd: handoff.notifyFd,
    traceHoldFd,
  };
}

/**
 * Holds /proc/<pid> open for the life of the process. The rule on it binds the inode, and procfs
 * makes a new inode for a pid directory each time its dentry is looked up afresh: pinned, the
 * dentry (and so the inode the rule names) is never reclaimed.
 */
// biome-ignore lint/correctness/noUnusedVariables: held open, never read (see above)
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
