// One session: the manifest's grants, the workdir descriptor held from launch, the instance key,
// the generation counter, the trace and the capsule's identity. Everything a plane or a tool needs
// comes from here; nothing here knows HTTP.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { ExportView } from './export-view.js';
import { checkRootsInsideWorkdir, parseManifest, type Containment, type Manifest, ManifestError } from './manifest.js';
import * as native from './native.js';
import { InstanceKey } from './peer/key.js';
import { effectiveGrants, type EffectiveGrants } from './scope.js';
import { Trace } from './trace.js';

export const CONTAINMENT_CLASSES: readonly Containment[] = ['advisory', 'scoped', 'sealed'];

export interface SessionOptions {
  workdir: string;
  /** Manifest file; default `<workdir>/murmur.yaml`. */
  manifestPath?: string;
  /** Already-parsed manifest (the TS API); wins over manifestPath. */
  manifest?: Manifest;
  sessionId?: string;
  containment?: Containment;
  /** Trace file; default in the records directory, outside the workdir. */
  tracePath?: string;
  /** Force a resolver (tests); default: openat2 when available, else the walk. */
  resolver?: native.ResolverKind;
}

export type ToolName = 'share-file' | 'fetch-peer-file';

/** What a session id may be: it names a records directory and appears in every trace line. */
export const SESSION_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

export function newSessionId(): string {
  return `ses_${randomBytes(16).toString('hex')}`;
}

/** `~/.murmur/records/<workdir digest>/<session-id>/trace.jsonl`: per workdir, per session. */
export function defaultTracePath(workdirReal: string, sessionId: string): string {
  const digest = createHash('sha256').update(workdirReal).digest('hex').slice(0, 16);
  const base = process.env.RESOURCE_PLANE_RECORDS_DIR || join(homedir(), '.murmur', 'records');
  return join(base, digest, sessionId, 'trace.jsonl');
}

/** Reads and validates a manifest file; a missing or unreadable file is an E-MAN-003 diagnostic. */
export function loadManifest(path: string): Manifest {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ManifestError(
      'E-MAN-003',
      `cannot read the manifest '${path}': ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}`,
      'pass --manifest FILE, or put murmur.yaml at the workdir root',
    );
  }
  return parseManifest(text);
}

/**
 * What to show as "resolves to" when the resolver refused a root the host's realpath accepted: the
 * first symlink target with an absolute path on the way (the usual cause), else the first symlink
 * target at all (a relative one climbing out, e.g. through /proc), else the root as declared.
 */
function refusedRootShown(workdir: string, declared: string): string {
  let current = workdir;
  let firstTarget: string | null = null;
  for (const component of declared.split('/').filter((c) => c !== '' && c !== '.')) {
    const next = join(current, component);
    try {
      if (!lstatSync(next).isSymbolicLink()) {
        current = next;
        continue;
      }
      const target = readlinkSync(next);
      if (isAbsolute(target)) return target;
      firstTarget ??= target;
      current = realpathSync(next);
    } catch {
      break;
    }
  }
  return firstTarget ?? declared;
}

/**
 * The launch checks of the export roots: E-CAP-007 both as the host sees it (realpath leaves the
 * workdir) and as every request will see it (the resolver refuses the root, e.g. because a link on
 * the way has an absolute target, which is outside_root even when on the host it points inside).
 * Without the second check such a launch would succeed and then refuse every request.
 */
export async function checkExportRoots(manifest: Manifest, workdirReal: string, workdirFd: number, resolver: native.ResolverKind): Promise<void> {
  checkRootsInsideWorkdir(manifest, workdirReal);
  const roots: Array<[string, string]> = [];
  if (manifest.files) roots.push(['exports.files.root', manifest.files.root]);
  if (manifest.peerFiles) roots.push(['exports.peer_files.root', manifest.peerFiles.root]);
  for (const [field, declared] of roots) {
    try {
      await native.checkRoot(workdirFd, declared, resolver);
    } catch (error) {
      if (!(error instanceof native.NativeError) || error.code !== 'OUTSIDE_ROOT') throw error;
      const shown = refusedRootShown(workdirReal, declared);
      throw new ManifestError(
        'E-CAP-007',
        `${field} '${declared}' resolves to '${shown}', which is outside the capsule workdir '${workdirReal}'`,
        'an export root may be a symlink only with a relative target that stays inside the workdir: ' +
          'inside a sealed sandbox an absolute path does not name a host path, so every request would be refused',
      );
    }
  }
}

/** Opens the workdir just long enough to run checkExportRoots (explain-scope has no session). */
export async function checkExportRootsAt(manifest: Manifest, workdir: string, resolver: native.ResolverKind = native.chooseResolver()): Promise<void> {
  if (!existsSync(workdir)) return;
  const real = realpathSync(workdir);
  const fd = await native.openDirectory(real);
  try {
    await checkExportRoots(manifest, real, fd, resolver);
  } finally {
    native.closeFd(fd);
  }
}

export class Session {
  readonly manifest: Manifest;
  readonly workdir: string;
  readonly sessionId: string;
  readonly containment: Containment;
  readonly resolver: native.ResolverKind;
  readonly trace: Trace;
  readonly grants: EffectiveGrants;
  readonly files: ExportView | null;
  readonly peerFiles: ExportView | null;
  readonly key: InstanceKey | null;
  /** Where this capsule says it is reachable (agent card, audience); set when the listener binds. */
  advertisedUrl = '';
  private workdirFd: number;
  private generationCount = 0;
  private closed = false;

  private constructor(init: {
    manifest: Manifest; workdir: string; workdirFd: number; sessionId: string; containment: Containment;
    resolver: native.ResolverKind; trace: Trace;
  }) {
    this.manifest = init.manifest;
    this.workdir = init.workdir;
    this.workdirFd = init.workdirFd;
    this.sessionId = init.sessionId;
    this.containment = init.containment;
    this.resolver = init.resolver;
    this.trace = init.trace;
    this.grants = effectiveGrants(init.manifest, init.containment);
    const common = { workdirFd: () => this.workdirDescriptor, containment: init.containment, resolver: init.resolver };
    const { files, peerFiles } = init.manifest;
    this.files = files ? new ExportView({ ...common, plane: 'files', root: files.root, maxBytes: files.maxBytes }) : null;
    this.peerFiles = peerFiles ? new ExportView({ ...common, plane: 'peer', root: peerFiles.root, maxBytes: peerFiles.maxBytes }) : null;
    // The key exists only when something can be minted, and only in locked memory.
    this.key = peerFiles ? InstanceKey.generate() : null;
  }

  /**
   * Validates everything first (manifest, roots, options) so that a refused launch creates nothing;
   * then opens the workdir descriptor and the trace and writes `session_start`.
   */
  static async open(opts: SessionOptions): Promise<Session> {
    const containment = opts.containment ?? 'advisory';
    if (!CONTAINMENT_CLASSES.includes(containment)) throw new Error(`unknown containment class '${containment}'`);
    const sessionId = opts.sessionId ?? newSessionId();
    if (!SESSION_ID.test(sessionId)) {
      throw new Error('--session-id must be 1-128 characters of [A-Za-z0-9_.:-]');
    }
    const requested = resolve(opts.workdir);
    const manifest = opts.manifest ?? loadManifest(opts.manifestPath ?? join(requested, 'murmur.yaml'));
    const resolver = opts.resolver ?? native.chooseResolver();
    // A workdir that does not exist yet has no roots to escape; it is created only after every
    // check passed, so a refused launch leaves nothing behind. The descriptor the roots are
    // checked through is the one held for the session.
    const existed = existsSync(requested);
    if (!existed) mkdirSync(requested, { recursive: true, mode: 0o755 });
    const workdir = realpathSync(requested);
    const workdirFd = await native.openDirectory(workdir);
    let trace: Trace;
    try {
      if (existed) await checkExportRoots(manifest, workdir, workdirFd, resolver);
      const tracePath = opts.tracePath ? resolve(opts.tracePath) : defaultTracePath(workdir, sessionId);
      trace = Trace.open(tracePath, sessionId);
    } catch (error) {
      native.closeFd(workdirFd);
      throw error;
    }
    const session = new Session({ manifest, workdir, workdirFd, sessionId, containment, resolver, trace });
    try {
      trace.start({
        containment_achieved: containment,
        resolver,
        tools_declared: session.toolsDeclared(),
        effective_grants: session.grants,
      });
    } catch (error) {
      await session.close();
      throw error;
    }
    return session;
  }

  /** The workdir descriptor; throws once the session is closed (the number may be reused). */
  get workdirDescriptor(): number {
    if (this.closed) throw new native.NativeError('IO_ERROR', 'the session is closed', 0);
    return this.workdirFd;
  }

  /** Tasks that reached a terminal state in this process. Provenance only. */
  get generation(): number {
    return this.generationCount;
  }

  /** Called by the runtime once per completed task. */
  advanceGeneration(): number {
    this.generationCount += 1;
    return this.generationCount;
  }

  toolsDeclared(): ToolName[] {
    const tools: ToolName[] = [];
    if (this.manifest.peerFiles) tools.push('share-file');
    if (this.manifest.peerFetchAllow) tools.push('fetch-peer-file');
    return tools;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Zeroes and frees the key, flushes and closes the trace, releases the workdir. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.key?.destroy();
    await this.trace.close();
    native.closeFd(this.workdirFd);
    this.workdirFd = -1;
  }
}
