// The operator's client verbs: `resource-plane ls <url>` and `resource-plane get <url> <path>`.
// `get` verifies the etag against the bytes it received and refuses to save anything that does
// not match; a file is written to a temporary name first and renamed into place.
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, openSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { Client } from 'undici';

export class ClientError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ClientError';
  }
}

const TIMEOUTS = { headersTimeout: 30_000, bodyTimeout: 60_000 };

/**
 * One GET with the request target sent exactly as given: a URL object would resolve dot segments
 * (even `%2E%2E`) before the server ever saw them.
 */
async function getRaw(origin: Origin, path: string) {
  const client = new Client(origin.origin, { connectTimeout: 10_000, ...(origin.socketPath ? { socketPath: origin.socketPath } : {}) });
  try {
    const res = await client.request({ method: 'GET', path, ...TIMEOUTS });
    const body = Buffer.from(await res.body.arrayBuffer());
    return { statusCode: res.statusCode, headers: res.headers, body };
  } catch (error) {
    throw new ClientError(`cannot reach ${origin.shown}: ${(error as Error).message}`);
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** Where requests go: an http(s) origin, or a unix socket (`unix:/path`, an operator listener). */
interface Origin {
  origin: string;
  socketPath?: string;
  shown: string;
}

function base(url: string): Origin {
  if (url.startsWith('unix:')) {
    const socketPath = url.slice('unix:'.length);
    if (!socketPath.startsWith('/')) throw new ClientError(`'${url}' needs an absolute socket path (unix:/path)`);
    return { origin: 'http://localhost', socketPath, shown: url };
  }
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new ClientError(`'${url}' is not a URL (expected http://host:port or unix:/path)`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ClientError(`'${url}' is not an http(s) URL`);
  return { origin: u.origin, shown: u.origin };
}

/** A refusal from the server, in its own words. */
function refusal(status: number, body: Buffer): ClientError {
  const text = body.toString('utf8');
  try {
    const parsed = JSON.parse(text) as { error?: string; message?: string };
    if (parsed.error) return new ClientError(`${status} ${parsed.error}: ${parsed.message ?? ''}`.trim());
  } catch {
    // not JSON: fall through
  }
  return new ClientError(`the server answered ${status}`);
}

interface Listing {
  root: string;
  mode: string;
  max_bytes: number;
  generation: number;
  containment_achieved: string;
  entries: Array<{ path: string; size_bytes: number; mtime_ms: number; sha256: string }>;
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

export async function list(url: string): Promise<string> {
  const u = base(url);
  const res = await getRaw(u, '/resources/files');
  if (res.statusCode !== 200) throw refusal(res.statusCode, res.body);
  const listing = JSON.parse(res.body.toString('utf8')) as Listing;
  const rows = listing.entries.map((e) => [String(e.size_bytes), shownTime(e.mtime_ms), printable(e.sha256.slice(0, 16)), printable(e.path)]);
  const widths = [0, 1, 2].map((i) => Math.max(['SIZE', 'MODIFIED', 'SHA256', 'PATH'][i]!.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => `${r[0]!.padStart(widths[0]!)}  ${r[1]!.padEnd(widths[1]!)}  ${r[2]!.padEnd(widths[2]!)}  ${r[3]}`;
  const out = [
    `root ${printable(listing.root)} (${printable(listing.mode)}, max ${listing.max_bytes} bytes per file), generation ${listing.generation}, containment ${printable(String(listing.containment_achieved))}`,
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

/**
 * Downloads one file. The relpath's components are percent-encoded so the server sees exactly the
 * name asked for; the server still judges it. Refuses to save when the etag and bytes disagree.
 */
export async function get(url: string, relpath: string, opts: { output?: string; force?: boolean; stdout?: NodeJS.WritableStream } = {}): Promise<GetResult> {
  const u = base(url);
  // Sent as typed (components percent-encoded, dot segments kept): the server is the judge.
  const encoded = relpath.split('/').map(encodeURIComponent).join('/');
  const res = await getRaw(u, `/resources/files/${encoded}`);
  if (res.statusCode !== 200) throw refusal(res.statusCode, res.body);
  const body = res.body;
  const sha256 = createHash('sha256').update(body).digest('hex');
  const etag = res.headers.etag;
  if (etag !== `"sha256:${sha256}"`) {
    throw new ClientError(`etag mismatch: the server said ${String(etag)} but the bytes hash to sha256:${sha256}; nothing was saved`);
  }
  if (opts.output === '-') {
    (opts.stdout ?? process.stdout).write(body);
    return { bytes: body.length, sha256, savedTo: null };
  }
  const target = resolve(opts.output ?? basename(relpath));
  if (existsSync(target) && !opts.force) throw new ClientError(`'${target}' exists; pass --force to replace it`);
  const temp = join(dirname(target), `.${basename(target)}.${randomBytes(6).toString('hex')}.part`);
  const fd = openSync(temp, 'wx', 0o644);
  try {
    let off = 0;
    while (off < body.length) off += writeSync(fd, body, off);
    fsyncSync(fd);
  } catch (error) {
    closeSync(fd);
    unlinkSync(temp);
    throw error;
  }
  closeSync(fd);
  renameSync(temp, target);
  return { bytes: body.length, sha256, savedTo: target };
}
