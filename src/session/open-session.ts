// Building a Session from options: everything is validated first (options, manifest, export roots)
// so that a refused launch creates nothing; then the workdir descriptor the roots were checked
// through is kept for the session, the trace is opened and `session_start` written. A launch that
// fails between the two (its listener did not bind) removes the workdir it created.
import { existsSync, mkdirSync, realpathSync, rmdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { IN_PROCESS_LAUNCH, type Confinement } from './confinement.js';
import type { Manifest } from '../manifest/model.js';
import * as native from '../addon/export.js';
import { defaultTracePath, parseSessionId, recordsDirectory } from './records-dir.js';
import type { Session } from './session.js';
import { Trace } from '../trace/trace.js';
import type { Containment } from '../wire.js';
import { checkExportRoots } from './checks.js';
import { DEFAULT_MANIFEST_NAME, loadManifest, missingManifest, readManifestBeneath } from './manifest-file.js';
import { parseContainment, parseDigestCacheEntries } from './options.js';
import { checkRecordOutsideWorkdir } from './record-place.js';

export interface SessionOptions {
  workdir: string;
  /** Manifest file; default `<workdir>/murmur.yaml`. */
  manifestPath?: string;
  /** Already-parsed manifest (the TS API); wins over manifestPath. */
  manifest?: Manifest;
  sessionId?: string;
  containment?: Containment | string;
  /** Trace file; default in the records directory, outside the workdir. */
  tracePath?: string;
  /** Force a resolver (tests); default: openat2 when available, else the walk. */
  resolver?: native.ResolverKind;
  /** What the agent card and the audience say; null or absent for a session that serves nothing. */
  advertisedUrl?: string | null;
  /** Bytes reads and redeems in flight may hold (default 256 MiB). */
  memoryBudgetBytes?: number;
  /**
   * Refusals traced one by one per second from all clients together (default 200, burst ten times
   * it): what bounds the trace's growth under refusals; past it they are summarised.
   */
  refusalTraceRate?: number;
  /** The largest file fetch-peer-file lands (default 10 MiB): raise it to fetch larger handoffs. */
  fetchMaxBytes?: number;
  /** How long one listing may run before it answers io_error (default 30 s). */
  listingBudgetMs?: number;
  /**
   * Most digests the digest cache keeps (default 262,144; 0: none), each about 100 bytes once
   * stored, beside the memory budget. The cache is the process's one (native/digest_cache.h): the
   * session opened last with this option sets it for every session in the process.
   */
  digestCacheEntries?: number;
  /** What the process confined itself to, for session_start; default: nothing (an in-process launch). */
  confinement?: Confinement;
  /** The clock handles are minted and verified against (Unix ms); default Date.now (tests inject one). */
  now?: () => number;
  /** A likely typo in the runtime's manifest blocks is an error (E-MAN-003) instead of a warning; an unknown key in a block this server owns always is. */
  strictManifest?: boolean;
  /** Told what opening did that an operator should hear of: an unknown manifest key, a workdir created. */
  notice?: (level: 'info' | 'warn', fields: Record<string, unknown>, message: string) => void;
}

/** A launch that passed every check and holds the workdir descriptor, before its session exists. */
export interface PreparedSession {
  /** What the checks settled, which a confined launch needs before the session exists. */
  readonly workdir: string;
  readonly manifest: Manifest;
  readonly sessionId: string;
  readonly tracePath: string;
  /** Builds the session (the descriptor passes to it) with its identity fixed. */
  open(advertisedUrl: string | null): Session;
  /** Releases the descriptor (a confined launch re-opens it after the re-exec); open() is then refused. */
  release(): void;
  /** For a launch that goes no further: releases the descriptor and removes the workdir if this created it and it is still empty. */
  abandon(): void;
  /** The workdir this launch created (`dir`) and the first directory it made for it (`top`), or null. */
  readonly createdWorkdir: { dir: string; top: string } | null;
}

/** rmdir `dir`, then its parents up to and including `top`, stopping at the first that is not empty. */
export function removeEmptyUpTo(dir: string, top: string): void {
  for (let at = dir; ; at = dirname(at)) {
    try {
      rmdirSync(at);
    } catch {
      return;
    }
    if (at === top || dirname(at) === at) return;
  }
}

/**
 * `settleOnly`: for a launch that only settles what the session will be (a confined launch's
 * first stage), which never opens it here and so never loads the session's modules.
 */
export async function prepareSession(opts: SessionOptions, settleOnly = false): Promise<PreparedSession> {
  const SessionClass = settleOnly ? null : (await import('./session.js')).Session;
  const containment = parseContainment(opts.containment);
  const digestCacheEntries = opts.digestCacheEntries === undefined ? undefined : parseDigestCacheEntries(opts.digestCacheEntries, 'digestCacheEntries');
  const sessionId = parseSessionId(opts.sessionId);
  const requested = resolve(opts.workdir);
  const resolver = opts.resolver ?? native.chooseResolver();
  const defaultManifest = join(requested, DEFAULT_MANIFEST_NAME);
  const keyCheck = { strict: opts.strictManifest, warn: (fields: Record<string, unknown>, message: string) => opts.notice?.('warn', fields, message) };
  let manifest = opts.manifest ?? (opts.manifestPath !== undefined ? loadManifest(opts.manifestPath, keyCheck) : null);
  // A workdir that does not exist yet has no roots to escape (nor a manifest); it is created only
  // after every check passed, so a refused launch leaves nothing behind.
  // The record stays out of the capsule's reach; refused before the workdir or the trace exists.
  if (opts.tracePath) checkRecordOutsideWorkdir('--trace', opts.tracePath, requested);
  else checkRecordOutsideWorkdir('the records directory (RESOURCE_PLANE_RECORDS_DIR)', recordsDirectory(), requested);
  const existed = existsSync(requested);
  if (!existed && manifest === null) throw missingManifest(defaultManifest);
  const firstMade = existed ? undefined : mkdirSync(requested, { recursive: true, mode: 0o755 });
  if (!existed) opts.notice?.('info', { workdir: requested }, 'created the workdir, which did not exist (it is removed again if the launch goes no further)');
  const workdir = realpathSync(requested);
  const workdirFd = await native.openDirectory(workdir);
  try {
    // The default manifest is read beneath the descriptor the session will hold, like a served file.
    manifest ??= await readManifestBeneath(workdirFd, resolver, defaultManifest, keyCheck);
    if (existed) await checkExportRoots(manifest, workdir, workdirFd, resolver);
  } catch (error) {
    native.closeFd(workdirFd);
    throw error;
  }
  const grants: Manifest = manifest;
  const tracePath = opts.tracePath ? resolve(opts.tracePath) : defaultTracePath(workdir, sessionId);
  let settled = false;
  const release = () => {
    if (settled) return;
    settled = true;
    native.closeFd(workdirFd);
  };
  let opened = false;
  return {
    workdir,
    manifest: grants,
    sessionId,
    tracePath,
    open: (advertisedUrl) => {
      if (settled || SessionClass === null) throw new Error('a prepared session opens once, and only if it was prepared to open');
      settled = true;
      opened = true;
      let trace: Trace | null = null;
      try {
        trace = Trace.open(tracePath, sessionId);
        if (digestCacheEntries !== undefined) native.setDigestCacheCapacity(digestCacheEntries);
        return new SessionClass({
          manifest: grants,
          workdir,
          workdirFd,
          sessionId,
          containment,
          resolver,
          trace,
          advertisedUrl,
          memoryBudgetBytes: opts.memoryBudgetBytes,
          refusalTraceRate: opts.refusalTraceRate,
          listingBudgetMs: opts.listingBudgetMs,
          fetchMaxBytes: opts.fetchMaxBytes,
          confinement: opts.confinement ?? IN_PROCESS_LAUNCH,
          now: opts.now,
        });
      } catch (error) {
        void trace?.close();
        native.closeFd(workdirFd);
        throw error;
      }
    },
    release,
    createdWorkdir: firstMade === undefined ? null : { dir: requested, top: firstMade },
    abandon: () => {
      if (opened) return;
      release();
      if (firstMade !== undefined) removeEmptyUpTo(requested, firstMade);
    },
  };
}

/** Validates, checks and opens a session in one step (no listener: see launch() for that). */
export async function openSession(opts: SessionOptions): Promise<Session> {
  return (await prepareSession(opts)).open(opts.advertisedUrl ?? null);
}
