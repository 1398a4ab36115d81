// `resource-plane get <url> <path>`: streams the body into an exclusive temporary file beside the
// target while hashing it, verifies the etag against those bytes (src/response-body.ts, the reader
// fetch-peer-file shares), and only then moves the file into place: nothing is ever buffered
// whole, and a refusal, a mismatch, a dropped connection or an interrupt leaves nothing behind. An
// existing target is refused before anything is downloaded. The wire is cli/client.ts's.
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { linkSync, lstatSync, renameSync, statSync, unlinkSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { BodyFailure, readVerifiedBody, type VerifiedBody } from '../response-body.js';
import { parseEtag } from '../wire.js';
import { GET_MAX_BYTES } from '../limits.js';
import { ClientError } from './exit.js';

import { announcedLength, base, printable, refusedBy, request } from './client.js';

export interface GetResult {
  bytes: number;
  sha256: string;
  /** Where it was written; null when written to stdout. */
  savedTo: string | null;
}

/** Told how a download advances; the CLI draws a progress bar with it on a terminal. */
export interface Progress {
  /** `total` is the content-length, or null when the server did not say. */
  start(total: number | null): void;
  update(received: number): void;
  /** Called once after start, whether the download finished or failed. */
  stop(): void;
}

export interface GetOptions {
  /**
   * Where to save: a file; a directory (one that exists, or any path ending in `/`) to save into
   * under the file's basename, as curl's --output-dir and wget's -P do; `-` for stdout. Default:
   * the file's basename in the current directory.
   */
  output?: string;
  /** Replace an existing file. */
  force?: boolean;
  /** Request headers (-H), e.g. what a host app's auth hook asks for; see parseHeaders. */
  headers?: Record<string, string>;
  stdout?: NodeJS.WritableStream;
  progress?: Progress | null;
  /** Aborting it stops the download; nothing is left behind. Default GET_MAX_BYTES. */
  signal?: AbortSignal;
  /** The largest body saved: a larger content-length is refused before a byte is read. */
  maxBytes?: number;
}

/** How much of the stdout spool is read back at once. */
const COPY_CHUNK = 1024 * 1024;

/** Appends all of `chunk` (a write may take only part of it). */
export async function writeAll(file: FileHandle, chunk: Buffer): Promise<void> {
  let off = 0;
  while (off < chunk.length) {
    try {
      off += (await file.write(chunk, off, chunk.length - off)).bytesWritten;
    } catch (error) {
      throw new ClientError(`cannot save the download: ${errnoOf(error)}; nothing was saved`, 'local');
    }
  }
}

/** The verified spool to stdout, a chunk at a time, waiting whenever stdout is full. */
async function copyOut(file: FileHandle, length: number, out: NodeJS.WritableStream): Promise<void> {
  const buf = Buffer.alloc(Math.min(COPY_CHUNK, Math.max(length, 1)));
  let pos = 0;
  while (pos < length) {
    const { bytesRead } = await file.read(buf, 0, Math.min(buf.length, length - pos), pos);
    if (bytesRead === 0) throw new ClientError('the spooled download shrank; stdout is incomplete', 'local');
    pos += bytesRead;
    // A copy: the buffer is reused for the next read while stdout may still hold this one.
    if (!out.write(Buffer.from(buf.subarray(0, bytesRead)))) await new Promise<void>((r) => out.once('drain', () => r()));
  }
}

/** Anything at all at `path`, a dangling symlink included. */
function occupied(path: string): boolean {
  return lstatSync(path, { throwIfNoEntry: false }) !== undefined;
}

/** A directory at `path`, through a symlink too (what a rename onto it would meet). */
function isDirectory(path: string): boolean {
  return statSync(path, { throwIfNoEntry: false })?.isDirectory() === true;
}

const IS_A_DIRECTORY = (target: string) => new ClientError(`'${target}' is a directory, which get never replaces; nothing was saved`, 'local');

/**
 * The file a download is saved as. `-o DIR/` or `-o DIR` naming an existing directory saves into
 * it under the file's basename; without `-o`, the basename in the current directory. A directory is
 * never the target itself, --force or not: it would be an EISDIR at the very end, after the whole
 * download.
 */
function targetFor(relpath: string, output: string | undefined): string {
  const into = output === undefined ? '.' : output.endsWith('/') || isDirectory(output) ? output : null;
  let target: string;
  if (into === null) {
    target = resolve(output!);
  } else {
    const name = basename(relpath);
    if (name === '' || name === '.' || name === '..') {
      throw new ClientError(`'${printable(relpath)}' names no file to save as; pass -o FILE`, 'usage');
    }
    if (!isDirectory(into)) throw new ClientError(`cannot save into '${printable(output!)}': no such directory`, 'local');
    target = resolve(into, name);
  }
  if (isDirectory(target)) throw IS_A_DIRECTORY(target);
  return target;
}

export function errnoOf(error: unknown): string {
  return (error as NodeJS.ErrnoException)?.code ?? (error as Error)?.message ?? String(error);
}

/** Removes one of this client's own temporary names; one already gone is fine. */
function discard(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone (renamed into place, or never fully made)
  }
}

/**
 * Gives the verified temporary file the name `target`. Without `force` it is linked, which fails if
 * anything appeared at `target` since the check before the download (never replaced silently);
 * the temporary name is discarded by the caller either way.
 */
function place(temp: string, target: string, force: boolean): void {
  if (!force) {
    try {
      linkSync(temp, target);
      return;
    } catch (error) {
      const code = errnoOf(error);
      if (code === 'EEXIST') throw isDirectory(target) ? IS_A_DIRECTORY(target) : new ClientError(`'${target}' exists; pass --force to replace it`, 'local');
      // A filesystem without hard links: the check before the download stands.
      if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw error;
      if (occupied(target)) throw new ClientError(`'${target}' exists; pass --force to replace it`, 'local');
    }
  }
  try {
    renameSync(temp, target);
  } catch (error) {
    // A directory that appeared at the target during the download.
    const code = errnoOf(error);
    if (code === 'EISDIR' || code === 'ENOTEMPTY' || code === 'EEXIST') throw IS_A_DIRECTORY(target);
    throw new ClientError(`cannot save to '${target}': ${code}; nothing was saved`, 'local');
  }
}

/** A body `get` did not accept, in its own words: why nothing was saved. */
export function getFailure(
  failure: BodyFailure,
  at: { shown: string; etag: unknown; length: number | null; maxBytes: number; aborted: boolean; verb?: 'get' | 'mirror' },
): ClientError {
  // Whatever stopped a body still arriving, an interrupt the user asked for is what they are told.
  if (at.aborted && failure.kind !== 'short' && failure.kind !== 'mismatch') return new ClientError('interrupted; nothing was saved', 'unreachable');
  switch (failure.kind) {
    case 'over_length':
      return new ClientError(`the server sent more than the ${at.length} bytes of its content-length; nothing was saved`, 'unverified');
    case 'too_large':
      return new ClientError(
        `the file is larger than the ${at.maxBytes} bytes ${at.verb ?? 'get'} saves; pass --max-bytes to raise it; nothing was saved`,
        'too_large',
      );
    case 'short':
      return new ClientError(`the server sent ${failure.bytes} of the ${at.length} bytes of its content-length; nothing was saved`, 'unverified');
    case 'stream':
      return new ClientError(`the download from ${at.shown} broke off: ${printable((failure.cause as Error).message)}; nothing was saved`, 'unreachable');
    case 'sink':
      // writeAll's own ClientError says what the disk refused; anything else broke the download.
      return failure.cause instanceof ClientError
        ? failure.cause
        : new ClientError(`the download from ${at.shown} broke off: ${printable((failure.cause as Error).message)}; nothing was saved`, 'unreachable');
    case 'mismatch':
      return new ClientError(
        `etag mismatch: the server said ${printable(String(at.etag))} but the bytes hash to sha256:${failure.sha256}; nothing was saved`,
        'unverified',
      );
  }
}

/**
 * Downloads one file. The relpath's components are percent-encoded so the server sees exactly the
 * name asked for; the server still judges it. The body streams into a temporary file, created
 * exclusively beside the target (or, for `-o -`, in the system temp directory and unlinked at once,
 * so stdout only ever receives verified bytes), and is hashed as it arrives; it is moved into place
 * only when the etag names exactly those bytes.
 */
export async function get(url: string, relpath: string, opts: GetOptions = {}): Promise<GetResult> {
  const u = base(url, 'get', opts.headers ?? {});
  const toStdout = opts.output === '-';
  const target = toStdout ? null : targetFor(relpath, opts.output);
  // Before a byte is downloaded.
  if (target !== null && !opts.force && occupied(target)) throw new ClientError(`'${target}' exists; pass --force to replace it`, 'local');
  // Sent as typed (components percent-encoded, dot segments kept): the server is the judge.
  const encoded = relpath.split('/').map(encodeURIComponent).join('/');
  const res = await request(u, `/resources/files/${encoded}`, opts.signal);
  let temp: string | null = null;
  let file: FileHandle | null = null;
  let progress: Progress | null = null;
  try {
    if (res.statusCode !== 200) throw await refusedBy(res);
    const etag = res.headers.etag;
    const expected = parseEtag(etag);
    if (expected === null) {
      throw new ClientError(`etag mismatch: the server said ${printable(String(etag))}, which names no sha256 digest; nothing was saved`, 'unverified');
    }
    const maxBytes = opts.maxBytes ?? GET_MAX_BYTES;
    const length = announcedLength(res.headers);
    if (length !== null && length > maxBytes) {
      throw new ClientError(`the file is ${length} bytes, more than the ${maxBytes} get saves; pass --max-bytes to raise it; nothing was saved`, 'too_large');
    }

    temp = join(
      target === null ? tmpdir() : dirname(target),
      `.${target === null ? 'resource-plane-get' : basename(target)}.${randomBytes(6).toString('hex')}.part`,
    );
    try {
      // O_CREAT|O_EXCL: never an existing file, never through a symlink.
      file = await fs.promises.open(temp, target === null ? 'wx+' : 'wx', target === null ? 0o600 : 0o644);
    } catch (error) {
      temp = null;
      throw new ClientError(`cannot save to '${target ?? tmpdir()}': ${errnoOf(error)}`, 'local');
    }
    if (target === null) {
      // The spool for stdout needs no name: gone even if this process is killed.
      discard(temp);
      temp = null;
    }

    progress = opts.progress ?? null;
    progress?.start(length);
    const spool = file;
    let written = 0;
    const sink = async (chunk: Buffer) => {
      await writeAll(spool, chunk);
      written += chunk.length;
      progress?.update(written);
    };
    let body: VerifiedBody;
    try {
      // Never more than the server announced, nor than the limit when it announced nothing.
      body = await readVerifiedBody(res.body as AsyncIterable<Buffer>, { sha256: expected, maxBytes, length, sink });
    } catch (error) {
      if (!(error instanceof BodyFailure)) throw error;
      throw getFailure(error, { shown: u.shown, etag, length, maxBytes, aborted: opts.signal?.aborted === true });
    }
    const { bytes: received, sha256 } = body;

    if (target === null) {
      await copyOut(file, received, opts.stdout ?? process.stdout);
      return { bytes: received, sha256, savedTo: null };
    }
    await file.sync();
    await file.close();
    file = null;
    place(temp!, target, opts.force === true);
    return { bytes: received, sha256, savedTo: target };
  } finally {
    progress?.stop();
    await file?.close().catch(() => undefined);
    // Whatever happened, the temporary name goes: after a link it is a second name of the saved
    // file, after a rename it is already gone, after a failure it is all there was.
    if (temp !== null) discard(temp);
    await res.done();
  }
}
