// A raw HTTP/1.1 client over `net`, for tests that must see the wire exactly: the request target is
// sent byte-for-byte (no URL parsing, no normalising of `..` or `%2e`), and the response comes back
// with its status, its header lines in the order they were sent (raw name/value pairs), and its body
// as the bytes that followed the header block. Nothing here interprets the answer beyond framing.
import { request as nodeRequest } from 'node:http';
import { connect } from 'node:net';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { formatEtag } from '../../src/wire.js';

export interface RawResponse {
  /** e.g. `HTTP/1.1` */
  version: string;
  status: number;
  statusText: string;
  /** Header lines in wire order, names as sent (not lowercased). */
  rawHeaders: Array<[string, string]>;
  /** Names lowercased, in wire order. */
  headerNames: string[];
  /** The body as framed by content-length (or chunked transfer), exactly the bytes received. */
  body: Buffer;
  /** Bytes that arrived after the framed body (must be none for a well-framed reply). */
  trailing: Buffer;
  /** Every byte received, for secret scans. */
  raw: Buffer;
  /** The one value of a header (lowercase name); throws when it appears more than once. */
  header(name: string): string | undefined;
  /** Every value of a header, in order. */
  headerAll(name: string): string[];
  /** The body parsed as JSON, keys in wire order. */
  json(): any;
}

export interface RawRequest {
  method?: string;
  /** The request target, sent as is (latin1 bytes of the string, or a Buffer). */
  target: string | Buffer;
  /** Extra header lines, sent in order after Host. */
  headers?: Array<[string, string]>;
  body?: Buffer | string;
  /** Default true: send `content-length` when a body is given. */
  contentLength?: boolean;
  /** Default `127.0.0.1:<port>` from the base URL. */
  host?: string | null;
  timeoutMs?: number;
  /** The source address to connect from (any of 127.0.0.0/8 on loopback). */
  localAddress?: string;
}

function parseBase(baseUrl: string): { hostname: string; port: number; hostHeader: string } {
  const u = new URL(baseUrl);
  const hostname = u.hostname.replace(/^\[|\]$/g, '');
  return { hostname, port: Number(u.port), hostHeader: u.host };
}

/** Sends one request on a fresh connection (`connection: close`) and parses the whole answer. */
export function rawRequest(baseUrl: string, req: RawRequest): Promise<RawResponse> {
  const { hostname, port, hostHeader } = parseBase(baseUrl);
  const method = req.method ?? 'GET';
  const lines: string[] = [`${method} ${typeof req.target === 'string' ? req.target : req.target.toString('latin1')} HTTP/1.1`];
  if (req.host !== null) lines.push(`Host: ${req.host ?? hostHeader}`);
  for (const [name, value] of req.headers ?? []) lines.push(`${name}: ${value}`);
  const body = req.body === undefined ? undefined : Buffer.isBuffer(req.body) ? req.body : Buffer.from(req.body);
  if (body && req.contentLength !== false) lines.push(`Content-Length: ${body.length}`);
  lines.push('Connection: close');
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  const payload = body ? Buffer.concat([head, body]) : head;

  return exchange(hostname, port, payload, req.timeoutMs ?? 15_000, `raw request ${method} ${String(req.target)}`, req.localAddress).then((raw) =>
    parseResponse(raw, method === 'HEAD'),
  );
}

/** Writes `payload` on a fresh connection and resolves with every byte received once it closes. */
function exchange(hostname: string, port: number, payload: Buffer, timeoutMs: number, what: string, localAddress?: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect({ host: hostname, port, localAddress });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`${what} timed out`));
    }, timeoutMs);
    // write, not end: a half-closed request is aborted by Node's server before it answers.
    socket.on('connect', () => socket.write(payload));
    socket.on('data', (d: Buffer) => chunks.push(d));
    // A server may reset the connection after answering (unread request body): keep what came.
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ECONNRESET' && chunks.length > 0) return;
      clearTimeout(timer);
      reject(error);
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks));
    });
  });
}

/** GET shorthand. */
export function rawGet(baseUrl: string, target: string | Buffer, headers?: Array<[string, string]>): Promise<RawResponse> {
  return rawRequest(baseUrl, { target, headers });
}

export function parseResponse(raw: Buffer, bodiless = false): RawResponse {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) throw new Error(`no complete header block in ${JSON.stringify(raw.toString('latin1').slice(0, 200))}`);
  const headText = raw.subarray(0, end).toString('latin1');
  const [statusLine, ...headerLines] = headText.split('\r\n');
  const m = /^(HTTP\/\d\.\d) (\d{3}) ?(.*)$/.exec(statusLine!);
  if (!m) throw new Error(`bad status line ${JSON.stringify(statusLine)}`);
  const rawHeaders: Array<[string, string]> = headerLines.map((line) => {
    const colon = line.indexOf(':');
    if (colon <= 0) throw new Error(`bad header line ${JSON.stringify(line)}`);
    return [line.slice(0, colon), line.slice(colon + 1).trim()];
  });
  const headerNames = rawHeaders.map(([n]) => n.toLowerCase());
  const headerAll = (name: string) => rawHeaders.filter(([n]) => n.toLowerCase() === name.toLowerCase()).map(([, v]) => v);
  const header = (name: string) => {
    const all = headerAll(name);
    if (all.length > 1) throw new Error(`header ${name} appears ${all.length} times`);
    return all[0];
  };
  const rest = raw.subarray(end + 4);
  let body: Buffer;
  let trailing: Buffer;
  const status = Number(m[2]);
  const cl = header('content-length');
  const te = header('transfer-encoding');
  if (bodiless || status === 204 || status === 304) {
    body = Buffer.alloc(0);
    trailing = rest;
  } else if (te && /chunked/i.test(te)) {
    const parts: Buffer[] = [];
    let off = 0;
    for (;;) {
      const lineEnd = rest.indexOf('\r\n', off);
      if (lineEnd < 0) throw new Error('truncated chunked body');
      const size = parseInt(rest.subarray(off, lineEnd).toString('latin1'), 16);
      off = lineEnd + 2;
      if (size === 0) {
        const tEnd = rest.indexOf('\r\n', off);
        off = tEnd < 0 ? rest.length : tEnd + 2;
        break;
      }
      parts.push(rest.subarray(off, off + size));
      off += size + 2;
    }
    body = Buffer.concat(parts);
    trailing = rest.subarray(off);
  } else if (cl !== undefined) {
    const n = Number(cl);
    body = rest.subarray(0, n);
    trailing = rest.subarray(n);
  } else {
    body = rest;
    trailing = Buffer.alloc(0);
  }
  return {
    version: m[1]!,
    status,
    statusText: m[3]!,
    rawHeaders,
    headerNames,
    body,
    trailing,
    raw,
    header,
    headerAll,
    json: () => JSON.parse(body.toString('utf8')),
  };
}

export function sha256Hex(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** The etag a server of this contract sends for these bytes (the format is src/wire.ts's). */
export function etagFor(data: Buffer | string): string {
  return formatEtag(sha256Hex(data));
}

/** The keys of a JSON object text in the order they appear on the wire (JSON.parse keeps it). */
export function keysOf(value: unknown): string[] {
  return Object.keys(value as object);
}

/**
 * Runs `fn` over `items` with at most `limit` in flight; results keep the items' order.
 */
export async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** The trace's lines, each parsed (keys in file order). A missing file reads as no lines. */
export function readTrace(path: string): Array<Record<string, unknown>> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return [];
  }
  if (text === '') return [];
  if (!text.endsWith('\n')) throw new Error('the trace does not end with a newline');
  return text
    .slice(0, -1)
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/**
 * Writes `bytes` (one or more pipelined requests, the last with `connection: close`) on one
 * connection and parses every response that comes back, in order.
 */
export function rawExchange(baseUrl: string, bytes: Buffer | string, timeoutMs = 15_000): Promise<RawResponse[]> {
  const { hostname, port } = parseBase(baseUrl);
  const payload = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes, 'latin1');
  return exchange(hostname, port, payload, timeoutMs, 'raw exchange').then((raw) => {
    const out: RawResponse[] = [];
    let rest: Buffer = raw;
    while (rest.length > 0) {
      const res = parseResponse(rest);
      // What follows one response is the next one, not trailing garbage.
      out.push({ ...res, trailing: Buffer.alloc(0) });
      rest = res.trailing;
    }
    return out;
  });
}

/** GET over a unix socket, the target sent as typed. */
export function unixGet(socketPath: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = nodeRequest({ socketPath, path, method: 'GET' }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}
