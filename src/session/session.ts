// One session's state: the manifest's grants, the workdir (held from launch), the instance
// key, the generation counter, the trace and the capsule's identity (session id, advertised URL),
// all fixed when it is constructed. Nothing here reads files, checks a launch or knows HTTP:
// src/launch/ validates and builds a Session.
import { Refusal } from '../codes.js';
import { MemoryBudget } from '../export/memory.js';
import type { Confinement } from './confinement.js';
import { ExportView } from '../export/export-view.js';
import { RefusalLimiter } from '../trace/refusal-limit.js';
import { InstanceKey } from '../handle/key.js';
import type { Manifest } from '../manifest/model.js';
import * as native from '../addon/export.js';
import { effectiveGrants, type EffectiveGrants } from '../manifest/scope.js';
import { refusalsSuppressed, sessionStart } from '../trace/events.js';
import { boundedField, type Trace } from '../trace/trace.js';
import type { Containment } from '../wire.js';
import { DEFAULT_FETCH_MAX_BYTES } from '../limits.js';

export type ToolName = 'share-file' | 'fetch-peer-file';

export { defaultTracePath, newSessionId, parseSessionId, recordsDirectory } from './records-dir.js';

export interface SessionInit {
  manifest: Manifest;
  /** The workdir's real path. */
  workdir: string;
  /** A directory descriptor of `workdir`; the constructed session owns it (its native.Workdir). */
  workdirFd: number;
  sessionId: string;
  containment: Containment;
  resolver: native.ResolverKind;
  /** Open, with `session_start` not yet written. */
  trace: Trace;
  /** Where this capsule says it is reachable (agent card, audience); null for a session that serves nothing. */
  advertisedUrl: string | null;
  /** Bytes reads in flight may hold; default DEFAULT_MEMORY_BUDGET_BYTES. */
  memoryBudgetBytes?: number;
  /** Refusals traced one by one per second, all clients together (default SERVER_REFUSALS_PER_SECOND; burst ten times it). */
  refusalTraceRate?: number;
  /** How long one listing may run; default DEFAULT_LISTING_BUDGET_MS. */
  listingBudgetMs?: number;
  /** The largest file fetch-peer-file lands; default DEFAULT_FETCH_MAX_BYTES. */
  fetchMaxBytes?: number;
  /** What the process confined itself to (or why not), recorded in session_start. */
  confinement: Confinement;
  /** The clock handles are minted and verified against (Unix ms); default Date.now. Tests inject one. */
  now?: () => number;
}

export class Session {
  /** The largest file fetch-peer-file lands (`--fetch-max-bytes`). */
  readonly fetchMaxBytes: number;
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
  readonly advertisedUrl: string | null;
  /** Every byte held for clients: the one memory budget (src/export/memory.ts). */
  readonly memory: MemoryBudget;
  /** Which refusals are traced one by one, per client and server-wide (src/trace/refusal-limit.ts). */
  readonly refusals: RefusalLimiter;
  /** The clock handles are minted and verified against (Unix ms): Date.now unless injected. */
  readonly now: () => number;
  /** The workdir's one owner (native/workdir.h): its descriptor outlives every operation using it. */
  private readonly workdirRoot: native.Workdir;
  /** Aborted when the session starts stopping: listings in flight are cancelled. */
  private readonly stopping = new AbortController();
  private generationCount = 0;
  private closed = false;

  /** Takes ownership of the descriptor and the trace, and writes `session_start`. */
  constructor(init: SessionInit) {
    this.manifest = init.manifest;
    this.workdir = init.workdir;
    this.sessionId = init.sessionId;
    this.containment = init.containment;
    this.resolver = init.resolver;
    this.trace = init.trace;
    this.advertisedUrl = init.advertisedUrl;
    this.now = init.now ?? Date.now;
    this.memory = new MemoryBudget(init.memoryBudgetBytes);
    this.fetchMaxBytes = init.fetchMaxBytes ?? DEFAULT_FETCH_MAX_BYTES;
    const serverRate = init.refusalTraceRate === undefined ? undefined : { burst: 10 * init.refusalTraceRate, perSecond: init.refusalTraceRate };
    this.refusals = new RefusalLimiter(
      (f) => this.trace.record(refusalsSuppressed({ client: f.client, suppressed: f.suppressed, sinceMs: f.since_ms, clients: f.clients })),
      undefined,
      undefined,
      undefined,
      serverRate,
    );
    this.grants = effectiveGrants(init.manifest, init.containment);
    const common = { workdirFd: () => this.workdirDescriptor, containment: init.containment, resolver: init.resolver, listingBudgetMs: init.listingBudgetMs };
    const { files, peerFiles } = init.manifest;
    this.files = files ? new ExportView({ ...common, root: files.root, maxBytes: files.maxBytes }) : null;
    this.peerFiles = peerFiles ? new ExportView({ ...common, root: peerFiles.root, maxBytes: peerFiles.maxBytes }) : null;
    // Written before the key exists, so a launch that cannot record its start leaves no key behind.
    this.trace.start(
      sessionStart({
        containment: init.containment,
        resolver: init.resolver,
        toolsDeclared: this.toolsDeclared(),
        capsule: boundedField(init.manifest.name),
        confinement: init.confinement,
        effectiveGrants: this.grants,
      }),
    );
    // The key exists only when something can be minted, and only in locked memory.
    this.key = peerFiles ? InstanceKey.generate() : null;
    // Last: a constructor that throws before this leaves the descriptor to the caller, as before.
    this.workdirRoot = native.adoptWorkdir(init.workdirFd);
  }

  /** The workdir, for the addon's operations; throws once the session is closed. */
  get workdirDescriptor(): native.Workdir {
    if (this.closed) throw new Refusal('io_error', 'the session is closed');
    return this.workdirRoot;
  }

  /** Aborts when the session starts stopping. */
  get stoppingSignal(): AbortSignal {
    return this.stopping.signal;
  }

  /** Cancels work in flight that would otherwise hold the shutdown (listings hashing). */
  beginStopping(): void {
    this.stopping.abort();
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

  /**
   * Zeroes and frees the key, writes `session_end` (why, and how many events of each kind were
   * recorded), flushes and closes the trace, releases the workdir. Idempotent.
   */
  async close(reason = 'stopped'): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.beginStopping();
    this.key?.destroy();
    await this.refusals.close();
    await this.trace.end(reason);
    this.memory.clear();
    // Operations still running keep the descriptor (and its number) until they are done.
    this.workdirRoot.close();
  }
}
