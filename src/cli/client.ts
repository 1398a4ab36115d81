// The operator's client, as `ls`, `get` (cli/download.ts) and `mirror` (cli/mirror.ts) speak to a
// server: the URL forms and headers, one connection through the guarded outbound client, capped
// reads, refusals as exit statuses, and `ls` itself. The server is not trusted: every text it
// supplies reaches the terminal only through `printable`, a listing whose numbers are not numbers
// is refused, and what is read is capped.
import type { Readable } from 'node:stream';
import { outboundClient } from '../outbound-client.js';
import { BodyFailure, ERROR_BODY_MAX_BYTES, readVerifiedBody } from '../response-body.js';
import { parseEtag } from '../wire.js';
import { LIST_MAX_BYTES } from '../limits.js';
import { ClientError } from './exit.js';

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
        const res = await client.request({
          method: 'GET',
          path: `${origin.prefix}${path}`,
          headers: origin.headers,
          ...TIMEOUTS,
          ...(signal ? { signal } : {}),
        });
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
export async function request(origin: Origin, path: string, signal?: AbortSignal): Promise<Answer & { done: () => Promise<void> }> {
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
        const why =
          error.kind === 'mismatch' ? `does not name its bytes (sha256:${error.sha256})` : `came with a body of another length than its content-length`;
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
const RESERVED_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'expect',
  'proxy-connection',
]);

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
    if (/[^\t\x20-\x7e\x80-\xff]/.test(value))
      throw new ClientError(`-H/--header '${name}': the value may hold only visible ASCII, spaces, tabs and Latin-1 characters (U+0080 to U+00FF)`, 'usage');
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
    const how =
      verb === 'get'
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
