// The operator's client verbs: `resource-plane ls <url>` and `resource-plane get <url> <path>`.
// `get` streams the body into an exclusive temporary file beside the target while hashing it,
// verifies the etag against those bytes (src/response-body.ts, the reader fetch-peer-file shares),
// and only then moves the file into place: nothing is ever buffered whole, and a refusal, a
// mismatch, a dropped connection or an interrupt leaves nothing behind. An existing target is
// refused before anything is downloaded.
// The server is not trusted either: every text it supplies reaches the terminal only through
// `printable`, a listing whose numbers are not numbers is refused, and what is read is capped.
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { linkSync, lstatSync, renameSync, statSync, unlinkSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { outboundClient } from '../outbound-client.js';
import { BodyFailure, ERROR_BODY_MAX_BYTES, readVerifiedBody, type VerifiedBody } from '../response-body.js';
import { parseEtag } from '../wire.js';
import { GET_MAX_BYTES, LIST_MAX_BYTES } from '../limits.js';
import { ClientError, type ClientFailure } from './exit.js';

/**
 * Why a verb failed, as its exit status tells a script (docs/cli.md, *Exit status*): a usage
 * mistake, a server that cannot be reached (or broke off, or timed out), a refusal from the
 * server, an answer that fails verification, a file over --max-bytes, or a local file problem.
 */
const TIMEOUTS = { headersTimeout: 30_000, bodyTimeout: 60_000 };


/** Reads a body up to `max` bytes and stops there: a server that streams forever is not read on. */
export async function readCapped(body: Readable, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    chunks.push(chunk);
    n += chunk.length;
    if (n >= max) break;
  }
  return Buffer.concat(chunks).subarray(0, max);
}

/** The content-length a server announced, when it is a plain non-negative integer. */
export function announcedLength(headers: Record<string, string | string[] | undefined>): number | null {
  const value = headers['content-length'];
  return typeof value === 'string' && /^\d{1,15}$/.test(value) ? Number(value) : null;
}

/** A response whose body is left unread for the caller. */
export interface Answer {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
  body: Readable;
}

/**
 * One connection to `origin`, kept alive across requests (mirror's workers each hold one; ls and
 * get use one per request). `get` sends the request target exactly as given: a URL object would
 * resolve dot segments (even `%2E%2E`) before the server ever saw them. `close` destroys the
 * connection rather than closing it: a body left unread (a refusal, a bad etag) would hold a
 * graceful close open forever, and with nothing else pending the process would end silently.
 */
export interface Connection {
  get(path: string, signal?: AbortSignal): Promise<Answer>;
  close(): Promise<void>;
}

export function connect(origin: Origin): Connection {
  const client = outboundClient(origin.origin, { connect: { timeout: 10_000, ...(origin.socketPath ? { socketPath: origin.socketPath } : {}) } });
  return {
    async get(path, signal) {
      try {
        const res = await client.request({ method: 'GET', path: `${origin.prefix}${path}`, headers: origin.headers, ...TIMEOUTS, ...(signal ? { signal } : {}) });
        return { statusCode: res.statusCode, headers: res.headers, body: res.body as Readable };
      } catch (error) {
        if (signal?.aborted) throw new ClientError('interrupted; nothing was saved', 'unreachable');
        throw new ClientError(`cannot reach ${origin.shown}: ${printable((error as Error).message)}`, 'unreachable');
      }
    },
    close: () => client.destroy().catch(() => undefined),
  };
}

/** One GET on a connection of its own; `done` closes it. */
async function request(origin: Origin, path: string, signal?: AbortSignal): Promise<Answer & { done: () => Promise<void> }> {
  const connection = connect(origin);
  try {
    return { ...(await connection.get(path, signal)), done: connection.close };
  } catch (error) {
    await connection.close();
    throw error;
  }
}

/** A refusal answer, its body read up to the one cap, in the server's words. */
export async function refusedBy(res: Answer): Promise<ClientError> {
  return refusal(res.statusCode, await readCapped(res.body, ERROR_BODY_MAX_BYTES));
}

/**
 * A whole (small) response: the listing, up to `maxBytes`, or a refusal. `verb` names who reads
 * it. With `verifyEtag` (mirror), a 200 that carries an etag is accepted only when the etag names
 * exactly its bytes (the one reader, src/response-body.ts); ls reads the listing as sent.
 */
export async function getRaw(origin: Origin, path: string, maxBytes: number, verb: 'ls' | 'mirror' = 'ls', verifyEtag = false) {
  const res = await request(origin, path);
  const flag = verb === 'ls' ? '--max-bytes' : '--listing-max-bytes';
  const tooLarge = () => new ClientError(`the listing is larger than ${maxBytes} bytes, the most ${verb} reads; pass ${flag} to raise it`, 'too_large');
  try {
    if (res.statusCode !== 200) return { statusCode: res.statusCode, headers: res.headers, body: await readCapped(res.body, ERROR_BODY_MAX_BYTES) };
    const length = announcedLength(res.headers);
    if ((length ?? 0) > maxBytes) throw tooLarge();
    const etag = res.headers.etag;
    if (verifyEtag && etag !== undefined) {
      const named = parseEtag(etag);
      if (named === null) throw new ClientError(`the listing's etag ${printable(String(etag))} names no sha256 digest; nothing was changed`, 'unverified');
      const chunks: Buffer[] = [];
      try {
        await readVerifiedBody(res.body as AsyncIterable<Buffer>, { sha256: named, maxBytes, length, sink: async (chunk) => void chunks.push(chunk) });
      } catch (error) {
        if (!(error instanceof BodyFailure)) throw error;
        if (error.kind === 'too_large') throw tooLarge();
        if (error.kind === 'stream') throw error.cause;
        const why = error.kind === 'mismatch' ? `does not name its bytes (sha256:${error.sha256})` : `came with a body of another length than its content-length`;
        throw new ClientError(`the listing's etag ${printable(String(etag))} ${why}; nothing was changed`, 'unverified');
      }
      return { statusCode: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) };
    }
    // One byte past the cap tells a listing that is too large from one that is exactly the cap.
    const body = await readCapped(res.body, maxBytes + 1);
    if (body.length > maxBytes) throw tooLarge();
    return { statusCode: res.statusCode, headers: res.headers, body };
  } catch (error) {
    if (error instanceof ClientError) throw error;
    throw new ClientError(`cannot reach ${origin.shown}: ${printable((error as Error).message)}`, 'unreachable');
  } finally {
    await res.done();
  }
}

/** Where requests go: an http(s) origin, or a unix socket (`unix:/path`, an operator listener). */
export interface Origin {
  origin: string;
  socketPath?: string;
  shown: string;
  /** The plugin's prefix the base URL named (`/cap`), or ''. */
  prefix: string;
  /** Sent with every request (-H); never shown in an error or a log. */
  headers: Record<string, string>;
}

/** Headers a client may not set: the request's framing and routing are this client's. */
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'expect', 'proxy-connection']);

/**
 * `-H 'Name: value'` lines as request headers (repeatable; a name given twice keeps both values).
 * A malformed line is a usage error naming the header's name only: its value may be a credential.
 */
export function parseHeaders(lines: readonly string[] = []): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon).trim() : '';
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new ClientError("-H/--header takes 'Name: value' (a header name, a colon, the value)", 'usage');
    const value = line.slice(colon + 1).trim();
    if (/[\r\n\0]/.test(value)) throw new ClientError(`-H/--header '${name}': the value may not hold a line break or NUL`, 'usage');
    // RFC 9110's field-value: visible ASCII, space, tab and obs-text (a byte 0x80-0xFF, sent as that
    // one Latin-1 byte). Anything else (a control, DEL, a character past U+00FF) cannot be sent:
    // a usage mistake (status 2) before any connection, not a server that "cannot be reached".
    if (/[^\t\x20-\x7e\x80-\xff]/.test(value)) throw new ClientError(`-H/--header '${name}': the value may hold only visible ASCII, spaces, tabs and Latin-1 characters (U+0080 to U+00FF)`, 'usage');
    const key = name.toLowerCase();
    if (RESERVED_HEADERS.has(key)) throw new ClientError(`-H/--header '${name}' is this client's to set, not yours`, 'usage');
    headers[key] = headers[key] === undefined ? value : `${headers[key]}, ${value}`;
  }
  return headers;
}

/**
 * The capsule's base URL: an origin, optionally with the path a host app mounted the planes'
 * plugin under (`http://host:port/cap`, the plugin's `prefix`). A path that names a resource
 * (`…/resources/files/x`), a query, a fragment or credentials is refused rather than silently cut
 * back: the verbs name the path themselves, and a path typed but not used would read as a listing
 * or a file of it.
 */
export function base(url: string, verb: 'ls' | 'get' | 'mirror', headers: Record<string, string>): Origin {
  if (url.startsWith('unix:')) {
    const socketPath = url.slice('unix:'.length);
    if (!socketPath.startsWith('/')) throw new ClientError(`'${url}' needs an absolute socket path (unix:/path)`, 'usage');
    return { origin: 'http://localhost', socketPath, shown: url, prefix: '', headers };
  }
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new ClientError(`'${printable(url)}' is not a URL (expected http://host:port, http://host:port/prefix or unix:/path)`, 'usage');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ClientError(`'${printable(url)}' is not an http(s) URL`, 'usage');
  const prefix = u.pathname.replace(/\/+$/, '');
  const namesResource = /(^|\/)resources(\/|$)/.test(prefix);
  const badPrefix = prefix !== '' && !/^(\/[^/?#%\\\s]+)+$/.test(prefix);
  if (namesResource || badPrefix || u.search !== '' || u.hash !== '' || u.username !== '' || u.password !== '') {
    const what = namesResource || badPrefix ? `a path ('${u.pathname}')` : u.search !== '' ? 'a query' : u.hash !== '' ? 'a fragment' : 'credentials';
    const how = verb === 'get'
      ? `give the capsule's base URL (${u.origin}, or ${u.origin}/PREFIX where a host app mounted the planes) and the file as the PATH argument`
      : `give the capsule's base URL (${u.origin}, or ${u.origin}/PREFIX where a host app mounted the planes)`;
    throw new ClientError(`'${printable(url)}' has ${printable(what)}, which ${verb} does not use: ${how}`, 'usage');
  }
  return { origin: u.origin, shown: `${u.origin}${prefix}`, prefix, headers };
}

/** A refusal from the server, in its own words, every one of them through `printable`. */
export function refusal(status: number, body: Buffer): ClientError {
  const text = body.toString('utf8');
  try {
    const parsed = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof parsed.error === 'string' && parsed.error !== '') {
      const message = typeof parsed.message === 'string' ? parsed.message : '';
      return new ClientError(`${status} ${printable(parsed.error)}: ${printable(message)}`.trim(), 'refused');
    }
  } catch {
    // not JSON: fall through
  }
  return new ClientError(`the server answered ${status}`, 'refused');
}

export interface Listing {
  root: string;
  mode: string;
  max_bytes: number;
  generation: number;
  containment_achieved: string;
  entries: Array<{ path: string; size_bytes: number; mtime_ms: number; sha256: string }>;
}

const MALFORMED = 'the server sent a malformed listing';
const isCount = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0;

/**
 * The listing's shape, checked before anything of it is shown: its texts are strings (shown
 * through `printable`), its counts non-negative integers and its times integers. A number sent as
 * a string would otherwise reach the terminal raw.
 */
export function checkListing(value: unknown): Listing {
  const refuse = (what: string): never => {
    throw new ClientError(`${MALFORMED}: ${what}`, 'unverified');
  };
  const o = value as Record<string, unknown>;
  if (o === null || typeof o !== 'object' || Array.isArray(o)) refuse('it is not a JSON object');
  for (const key of ['root', 'mode', 'containment_achieved']) if (typeof o[key] !== 'string') refuse(`${key} is not a string`);
  for (const key of ['max_bytes', 'generation']) if (!isCount(o[key])) refuse(`${key} is not a non-negative integer`);
  if (!Array.isArray(o.entries)) refuse('entries is not a list');
  (o.entries as unknown[]).forEach((entry, i) => {
    const e = entry as Record<string, unknown>;
    if (e === null || typeof e !== 'object' || Array.isArray(e)) refuse(`entries[${i}] is not an object`);
    if (typeof e.path !== 'string') refuse(`entries[${i}].path is not a string`);
    if (typeof e.sha256 !== 'string') refuse(`entries[${i}].sha256 is not a string`);
    if (!isCount(e.size_bytes)) refuse(`entries[${i}].size_bytes is not a non-negative integer`);
    if (!Number.isInteger(e.mtime_ms)) refuse(`entries[${i}].mtime_ms is not an integer`);
  });
  return o as unknown as Listing;
}

/**
 * JSON text with every control and format character escaped as `\uXXXX`: the same value, but
 * nothing a terminal acts on. JSON.stringify escapes only C0 controls (and lone surrogates), not
 * C1 controls (U+009B is a CSI to some terminals) or bidi overrides.
 */
export function printableJson(text: string): string {
  // Per UTF-16 code unit: a format character above U+FFFF is escaped as its surrogate pair.
  return text.replace(/[\p{Cc}\p{Cf}]/gu, (c) => Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`).join(''));
}

/**
 * Control and format characters shown escaped: a file name must never add rows, drive the terminal,
 * or reorder what is shown (a bidi override makes `invoice_<RLO>fdp.exe` read `invoice_exe.pdf`).
 * Covers C0/C1 controls and every Unicode format character (category Cf: bidi controls, zero-width
 * joiners, the BOM); lone surrogates are escaped too.
 */
export function printable(text: string): string {
  return text.replace(/[\p{Cc}\p{Cf}]|\p{Cs}/gu, (c) => {
    const cp = c.codePointAt(0)!;
    return cp <= 0xff ? `\\x${cp.toString(16).padStart(2, '0')}` : `\\u{${cp.toString(16)}}`;
  });
}

/** An ISO time when the value is a valid date, else the raw number (a capsule chooses its mtimes). */
export function shownTime(ms: number): string {
  const d = new Date(ms);
  return Number.isFinite(ms) && !Number.isNaN(d.getTime()) ? d.toISOString() : String(ms);
}

/**
 * The operator plane's listing: a table for a person, or with `json` the listing object as the
 * server sent it, on one line (re-serialised only so that it is exactly one line).
 */
export async function list(url: string, opts: { json?: boolean; maxBytes?: number; headers?: Record<string, string> } = {}): Promise<string> {
  const u = base(url, 'ls', opts.headers ?? {});
  const res = await getRaw(u, '/resources/files', opts.maxBytes ?? LIST_MAX_BYTES);
  if (res.statusCode !== 200) throw refusal(res.statusCode, res.body);
  let parsed: unknown;
  try {
    parsed = JSON.parse(res.body.toString('utf8'));
  } catch {
    throw new ClientError(`${u.shown} answered 200 with a listing that is not JSON`, 'unverified');
  }
  const listing = checkListing(parsed);
  if (opts.json) return `${printableJson(JSON.stringify(listing))}\n`;
  const rows = listing.entries.map((e) => [String(e.size_bytes), shownTime(e.mtime_ms), printable(e.sha256.slice(0, 16)), printable(e.path)]);
  const widths = [0, 1, 2].map((i) => Math.max(['SIZE', 'MODIFIED', 'SHA256', 'PATH'][i]!.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => `${r[0]!.padStart(widths[0]!)}  ${r[1]!.padEnd(widths[1]!)}  ${r[2]!.padEnd(widths[2]!)}  ${r[3]}`;
  const out = [
    `root ${printable(listing.root)} (${printable(listing.mode)}, max ${listing.max_bytes} bytes per file), generation ${listing.generation}, containment ${printable(listing.containment_achieved)}`,
    line(['SIZE', 'MODIFIED', 'SHA256', 'PATH']),
    ...rows.map(line),
    `${listing.entries.length} file(s), ${listing.entries.reduce((s, e) => s + e.size_bytes, 0)} bytes`,
  ];
  return `${out.join('\n')}\n`;
}

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
      return new ClientError(`the file is larger than the ${at.maxBytes} bytes ${at.verb ?? 'get'} saves; pass --max-bytes to raise it; nothing was saved`, 'too_large');
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
      return new ClientError(`etag mismatch: the server said ${printable(String(at.etag))} but the bytes hash to sha256:${failure.sha256}; nothing was saved`, 'unverified');
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

    temp = join(target === null ? tmpdir() : dirname(target), `.${target === null ? 'resource-plane-get' : basename(target)}.${randomBytes(6).toString('hex')}.part`);
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
