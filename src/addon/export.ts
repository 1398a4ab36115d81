// The export path's face of the addon (native/bind_workdir.cc, bind_exports.cc, bind_stream.cc): the resolver's
// choice, the workdir's descriptor, reads, streams, listings and the digest cache, as typed,
// promise-returning wrappers whose rejections are NativeError. Callers validate meaning (lowered
// paths, byte ceilings) before calling; the addon re-checks types only.
// Why this file is long: it types the export path's whole slice of the binding, and most of its
// lines are those types' documentation.
import { addon, call, nativeError } from './load.js';

export { NativeError, NATIVE_CODES, type NativeCode } from './load.js';

/**
 * Every size threshold of the export path, as the addon defines them (native/limits.h, each with
 * its reason). Nothing in TypeScript restates one.
 */
export interface Limits {
  /** Files up to this size are read synchronously on the JS thread (readSmall). */
  syncReadMaxBytes: number;
  /** A body larger than this is never read whole in one buffer: it is streamed or snapshot in chunks (OpenFile.body). */
  streamThresholdBytes: number;
  /** The chunk of a streamed body, and the size of a pooled body buffer. */
  streamChunkBytes: number;
  /** Bodies up to this size are copied into V8-owned memory. */
  copiedReadMaxBytes: number;
  /** Reads and streams of files at least this large ask the digest cache. */
  cachedReadMinBytes: number;
  /** A listing asks the digest cache (and takes a read lease) only for files at least this large. */
  listingCachedMinBytes: number;
  readChunkBytes: number;
  hashChunkBytes: number;
  mmapThresholdBytes: number;
}

export type ResolverKind = 'openat2' | 'walk';

export interface ResolveOptions {
  /** true under `scoped`: the first symlink anywhere beneath the root is refused. */
  refuseSymlinks: boolean;
  resolver: ResolverKind;
}

/**
 * A flag that stops a read or a listing early: the native loop asks it before every chunk (at
 * most a few MiB), so a cancelled call settles with CANCELLED within milliseconds even in the
 * middle of hashing a huge file. Made only by cancelToken(); the addon refuses look-alikes.
 */
export interface CancelToken {
  cancel(): void;
  readonly cancelled: boolean;
}

export interface ReadOptions extends ResolveOptions {
  cancel?: CancelToken;
}

export interface ListOptions extends ResolveOptions {
  cancel?: CancelToken;
  /**
   * Milliseconds the listing may take, counted from the call (time queued for a pool thread
   * included); past it the listing stops with TIME_BUDGET. A whole number in [1, 2^31 - 1].
   */
  timeBudgetMs?: number;
}

export interface ReadResult {
  bytes: Buffer;
  mtimeMs: number;
  sha256: string;
  /** The digest came from the digest cache, under a read lease held through the whole read. */
  digestCached?: boolean;
}

/**
 * A body being streamed (native/stream.h): the descriptor stays in the addon. next(buffer) reads and
 * hashes the next chunk into buffer's first `bytes` bytes; the chunk that completes the body comes
 * with `final` true, and only once everything read hashes to the etag promised, with nothing past
 * the promised size. A body that changed rejects with FILE_CHANGED instead, and that chunk must not
 * be sent. One next() at a time; the buffer must not be touched until it settles. close() lets the
 * descriptor go (after the chunk in flight, if any).
 */
export interface StreamHandle {
  next(into: Buffer): Promise<{ bytes: number; final: boolean }>;
  /** A snapshot's sha256 (hex), once its final chunk was read; throws before that. */
  digest(): string;
  close(): void;
  /**
   * Sent under the read lease of a cached digest: its chunks are not hashed again, because no
   * writer can open the file while the lease holds (native/stream.h).
   */
  readonly leased: boolean;
  /** False once a writer waits for that lease (it is then let go, and the next chunk fails). One fcntl. */
  leaseIntact(): boolean;
}

/**
 * How a large body goes (native/stream.h). Settled: `stream` sends `size` bytes under `sha256`,
 * verified before its final chunk. Unsettled (the file is being written): `stream` is a snapshot,
 * at most `size` bytes, to be read whole into memory the caller holds, then sent under
 * `stream.digest()`.
 */
export type BodyOpened =
  | { settled: true; size: number; mtimeMs: number; sha256: string; digestCached: boolean; stream: StreamHandle }
  | { settled: false; size: number; mtimeMs: number; digestCached: boolean; stream: StreamHandle };

/**
 * The one descriptor a read opened (readSmall, for a file above its synchronous size), with that
 * fstat's `size`. Everything the read serves comes from it, once: read() (the whole body, its first
 * `size` bytes) or body(); then it is spent. close() lets the descriptor go; idempotent.
 */
export interface OpenFile {
  readonly size: number;
  read(opts: { cancel?: CancelToken }): Promise<ReadResult>;
  /**
   * The digest cache under its lease, else (for a file that is not moving, or when no snapshot can
   * be held: `snapshotOk` false) a hashing pass over the first `size` bytes; see BodyOpened.
   */
  body(opts: { maxBytes: number; snapshotOk: boolean; cancel?: CancelToken }): Promise<BodyOpened>;
  close(): void;
}

export interface StatResult {
  size: number;
  mtimeMs: number;
}

export interface ListEntry {
  path: string;
  size: number;
  mtimeMs: number;
  sha256: string;
}

export interface ListResult {
  rootMissing: boolean;
  entries: ListEntry[];
}

/** A listing rendered by the addon (listRendered): its body, and what the trace records of it. */
export interface RenderedListing {
  rootMissing: boolean;
  entryCount: number;
  /** The sum of the entries' sizes. */
  totalBytes: number;
  body: Buffer;
}

/** The one input of read, stat and list, passed by name (native/bind_workdir.cc reads each field). */
export interface ExportCall {
  workdirFd: WorkdirRef;
  root: string;
  refuseSymlinks: boolean;
  resolver: ResolverKind;
}

/**
 * The process-wide digest cache of listings and large reads (native/digest_cache.h): a table of
 * whole-file SHA-256 digests keyed by (unique mount id, dev, ino, birth time or generation, size,
 * mtime ns, ctime ns) that grows with what is stored up to its capacity, then evicts by CLOCK;
 * used only on ext2/3/4,
 * xfs and btrfs (filesystems whose mapped writes move the times), used and filled only under a
 * read lease, and filled only for files whose ctime is at least 2 s older than the hash. Counters
 * only grow.
 */
export interface DigestCacheStats {
  /** Most entries kept (default DEFAULT_DIGEST_CACHE_ENTRIES, 262,144, at most ~29 MiB); see setDigestCacheCapacity. */
  capacity: number;
  entries: number;
  /** Memory the table holds now, in bytes (it grows with the entries stored, in blocks of 4,096). */
  bytes: number;
  /** Digests taken from the cache instead of hashing. */
  hits: number;
  /** Files hashed whole. */
  hashes: number;
  stores: number;
  evictions: number;
  /** Leases refused (a writer or writable mapping exists, not the owner, leases off): hashed. */
  leaseRefused: number;
  /** A writer arrived while a file was hashed under its lease: hashed, not stored. */
  leaseBroken: number;
  /** Hashed but not stored because the file changed less than 2 s before the hash began. */
  racy: number;
  /** Hashed without the cache: the file's filesystem is not one whose mapped writes move the times (tmpfs, overlayfs, ...). */
  fsUncached: number;
  /** Hashed without the cache: the kernel named no unique mount id, or neither a birth time nor an inode generation. */
  noIdentity: number;
  /** A listing hashed the file without asking the cache: smaller than limits.listingCachedMinBytes. */
  belowMin: number;
}

/** The slice of the binding this module wraps. */
interface ExportBinding {
  limits: Limits;
  digestCacheStats(): DigestCacheStats;
  setDigestCacheCapacity(entries: number): void;
  defaultDigestCacheEntries: number;
  CancelToken: new () => CancelToken;
  Workdir: new (fd: number) => Workdir;
  probeOpenat2(): boolean;
  openDirectory(path: string): Promise<number>;
  closeFd(fd: number): void;
  read(call: ExportCall & { relpath: string; maxBytes: number; cancel?: CancelToken }): Promise<ReadResult>;
  readSmall(call: ExportCall & { relpath: string; maxBytes: number; smallBytes: number }): ReadResult | { size: number; file: OpenFile };
  stat(call: ExportCall & { relpath: string }): Promise<StatResult>;
  releasePages(buffer: Buffer): number;
  list(call: ExportCall & { cancel?: CancelToken; timeBudgetMs?: number; render: { head: string; tail: string } }): Promise<RenderedListing>;
  checkRoot(call: { workdirFd: WorkdirRef; root: string; resolver: ResolverKind }): Promise<boolean>;
}

const binding = addon as ExportBinding;

export const LIMITS: Readonly<Limits> = binding.limits;

let probed: boolean | undefined;

/** Whether openat2 works here (ENOSYS on old kernels, EPERM under some seccomp filters). */
export function openat2Available(): boolean {
  probed ??= binding.probeOpenat2();
  return probed;
}

/**
 * The resolver a session uses: openat2 when the kernel allows it, else the component walk.
 * `RESOURCE_PLANE_RESOLVER=walk` forces the walk (tests, and hosts where openat2 misbehaves);
 * forcing `openat2` where it is unavailable is refused rather than silently downgraded.
 */
export function chooseResolver(env: NodeJS.ProcessEnv = process.env): ResolverKind {
  const problem = resolverChoiceProblem(env);
  if (problem !== null) throw new Error(problem);
  const forced = env.RESOURCE_PLANE_RESOLVER;
  if (forced === 'walk' || forced === 'openat2') return forced;
  return openat2Available() ? 'openat2' : 'walk';
}

/** Why RESOURCE_PLANE_RESOLVER cannot be honoured here, or null: its one validation. */
export function resolverChoiceProblem(env: NodeJS.ProcessEnv = process.env): string | null {
  const forced = env.RESOURCE_PLANE_RESOLVER;
  if (forced === undefined || forced === '' || forced === 'walk') return null;
  if (forced === 'openat2') return openat2Available() ? null : 'RESOURCE_PLANE_RESOLVER=openat2 but openat2 is unavailable here';
  return `RESOURCE_PLANE_RESOLVER must be openat2 or walk (got '${forced}')`;
}

/** A directory by its host path, symlinks followed: for the launcher's paths, never a capsule's. */
export function openDirectory(path: string): Promise<number> {
  return call(binding.openDirectory(path));
}

export function closeFd(fd: number): void {
  binding.closeFd(fd);
}

/**
 * A workdir as the addon owns it (native/workdir.h): one counted owner of its directory
 * descriptor. Every operation given it takes a reference when it is called and keeps it until it
 * settles. close() gives up this object's reference: operations called afterwards reject with
 * IO_ERROR (EBADF), those already called run on, and the descriptor closes when the last is done,
 * so none of them can ever find its number reused by another open.
 */
export interface Workdir {
  close(): void;
  readonly closed: boolean;
}

/**
 * What an operation resolves beneath: a Workdir, or a directory descriptor number the caller keeps
 * (the addon holds a duplicate of it for the operation, so it may be closed once the call returns).
 */
export type WorkdirRef = Workdir | number;

/** Takes over `fd`, an open directory (openDirectory's): from here only the Workdir closes it. */
export function adoptWorkdir(fd: number): Workdir {
  try {
    return new binding.Workdir(fd);
  } catch (raw) {
    if (raw instanceof TypeError || raw instanceof RangeError) throw raw;
    throw nativeError(raw);
  }
}

/** A new cancel token; with `signal`, it is cancelled when the signal aborts (or already has). */
export function cancelToken(signal?: AbortSignal): CancelToken {
  const token = new binding.CancelToken();
  if (signal?.aborted) token.cancel();
  else signal?.addEventListener('abort', () => token.cancel(), { once: true });
  return token;
}

/** One resolution, max_bytes refused by fstat, then the first size bytes of that descriptor, hashed. */
export function readFile(workdirFd: WorkdirRef, root: string, relpath: string, maxBytes: number, opts: ReadOptions): Promise<ReadResult> {
  return call(binding.read({ workdirFd, root, relpath, maxBytes, refuseSymlinks: opts.refuseSymlinks, resolver: opts.resolver, cancel: opts.cancel }));
}

/**
 * The one resolution of a read, synchronously on this thread (no pool round trip): max_bytes
 * refused by the fstat, and a file of at most `smallBytes` read and hashed here. A larger file is
 * not read: its size and the descriptor (an OpenFile) are returned, for the caller to reserve
 * memory and read or stream it from that same descriptor.
 */
export function readSmall(
  workdirFd: WorkdirRef,
  root: string,
  relpath: string,
  maxBytes: number,
  smallBytes: number,
  opts: ResolveOptions,
): ReadResult | { size: number; file: OpenFile } {
  try {
    return binding.readSmall({ workdirFd, root, relpath, maxBytes, smallBytes, refuseSymlinks: opts.refuseSymlinks, resolver: opts.resolver });
  } catch (raw) {
    if (raw instanceof TypeError || raw instanceof RangeError) throw raw;
    throw nativeError(raw);
  }
}

/** The whole body of an opened file, from its descriptor (see OpenFile.read). */
export function readOpened(file: OpenFile, cancel?: CancelToken): Promise<ReadResult> {
  return call(file.read({ cancel }));
}

/** How an opened file's large body goes (see OpenFile.body). */
export function openBody(file: OpenFile, maxBytes: number, snapshotOk: boolean, cancel?: CancelToken): Promise<BodyOpened> {
  return call(file.body({ maxBytes, snapshotOk, cancel }));
}

/** Streams a chunk, with FILE_CHANGED and IO_ERROR rejections as NativeError. */
export function nextChunk(stream: StreamHandle, into: Buffer): Promise<{ bytes: number; final: boolean }> {
  return call(stream.next(into));
}

/**
 * Gives an idle pooled buffer's whole pages back to the system at once (madvise MADV_DONTNEED);
 * it reads back as zeros. Only for a buffer nothing else uses.
 */
export function releasePages(buffer: Buffer): number {
  return binding.releasePages(buffer);
}

export function statFile(workdirFd: WorkdirRef, root: string, relpath: string, opts: ResolveOptions): Promise<StatResult> {
  return call(binding.stat({ workdirFd, root, relpath, refuseSymlinks: opts.refuseSymlinks, resolver: opts.resolver }));
}

/**
 * A listing, rendered in the addon as `head` + the entries as a JSON array's items
 * ({"path","size_bytes","mtime_ms","sha256"}, exactly as JSON.stringify writes them) + `tail`: no JS
 * object per entry, so a listing of a huge tree costs its body and nothing else in JS.
 */
export function listRendered(workdirFd: WorkdirRef, root: string, opts: ListOptions, render: { head: string; tail: string }): Promise<RenderedListing> {
  return call(binding.list({ ...listCall(workdirFd, root, opts), render }));
}

/** A listing's input as native/bind_workdir.cc reads it (listRendered's, and the testing entry's). */
export function listCall(workdirFd: WorkdirRef, root: string, opts: ListOptions): ExportCall & { cancel?: CancelToken; timeBudgetMs?: number } {
  return { workdirFd, root, refuseSymlinks: opts.refuseSymlinks, resolver: opts.resolver, cancel: opts.cancel, timeBudgetMs: opts.timeBudgetMs };
}

/** Resolves only the export root, as every request does: false if it does not exist (yet). */
export function checkRoot(workdirFd: WorkdirRef, root: string, resolver: ResolverKind): Promise<boolean> {
  return call(binding.checkRoot({ workdirFd, root, resolver }));
}

export function digestCacheStats(): DigestCacheStats {
  return binding.digestCacheStats();
}

/** Bounds the digest cache to `entries` (a whole number up to 2^24; 0 turns it off). */
export function setDigestCacheCapacity(entries: number): void {
  binding.setDigestCacheCapacity(entries);
}

/** The digest cache's capacity when nothing sets it (native/digest_cache.h). */
export const DEFAULT_DIGEST_CACHE_ENTRIES: number = binding.defaultDigestCacheEntries;
