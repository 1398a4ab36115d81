// The peer plane's outbound HTTP client, on undici: the agent-card fetch of a mint and the redeem
// of a fetch are the only requests this server ever makes, and both go through here. It owns the
// limits every such request runs under: a connect timeout, a hard total timeout (one AbortSignal
// covering connect, headers and body), a byte cap enforced chunk by chunk so an oversized answer
// is cut off the moment the cap is passed and never buffered whole, and no redirect followed. It
// knows nothing about handles, allow lists or the trace: callers check a destination before they
// call, and turn a PeerHttpError into their own refusal. Its Client comes from
// src/outbound-client.ts, whose guarded sockets a peer's FIN or reset cannot turn into an uncaught
// exception (nodejs/undici#5360).
import type { Readable } from 'node:stream';
import type { Client } from 'undici';
import { outboundClient } from '../outbound-client.js';
import type { Target } from '../manifest/destinations.js';

export interface HttpLimits {
  /** Time allowed to establish the TCP (and TLS) connection. */
  connectTimeoutMs: number;
  /** Hard ceiling on the whole exchange: connect, headers and every byte of the body. */
  totalTimeoutMs: number;
  /** Largest body accepted; one byte more and the response is aborted. */
  maxBytes: number;
}

export interface HttpRequestOptions extends HttpLimits {
  /** Extra request headers (e.g. x-murmur-audience). */
  headers?: Record<string, string>;
  /**
   * Certificate authorities trusted for an https peer instead of the system store (a private CA,
   * or a test's self-signed certificate). Verification itself is never turned off.
   */
  ca?: string | Buffer | Array<string | Buffer>;
}

/**
 * Why a request failed, in four kinds a caller maps to its own vocabulary. The message is built
 * here from fixed text and error codes only: it never carries a URL (a redeem URL holds a token),
 * a response body or anything else the peer chose.
 */
export type PeerHttpFailure = 'unreachable' | 'timeout' | 'too_large' | 'bad_response';

export class PeerHttpError extends Error {
  readonly kind: PeerHttpFailure;
  constructor(kind: PeerHttpFailure, message: string) {
    super(message);
    this.name = 'PeerHttpError';
    this.kind = kind;
  }
}

/** One response whose body has not been read yet. `close()` must always be called. */
export interface PeerResponse {
  status: number;
  /** A single-valued header, or null when absent or repeated (a repeated header is ambiguous). */
  header(name: string): string | null;
  /** The declared content-length, or null when absent or malformed (e.g. chunked). */
  contentLength: number | null;
  /**
   * The body as chunks, refused with `too_large` before any chunk when the declared length is
   * above `maxBytes`, and as soon as the running count passes it; the chunk that would pass the
   * cap is never yielded. Defaults to the request's cap. Iterate it at most once.
   */
  chunks(maxBytes?: number): AsyncGenerator<Buffer, void, undefined>;
  /** The whole body, under the same cap (for small bodies only: cards, error documents). */
  readAll(maxBytes?: number): Promise<Buffer>;
  /** Clears the timer and tears the connection down; idempotent, never rejects. */
  close(): Promise<void>;
}

/**
 * Throws a TypeError unless every limit given is a positive safe integer. A caller's mistake, not
 * a peer's: the tools run this before anything is traced, so it never reads as a refusal.
 */
export function assertLimits(limits: Partial<HttpLimits>): void {
  for (const [name, value] of Object.entries(limits)) {
    if (!['connectTimeoutMs', 'totalTimeoutMs', 'maxBytes'].includes(name) || value === undefined) continue;
    if (!Number.isSafeInteger(value) || (value as number) <= 0) throw new TypeError(`${name} must be a positive integer`);
  }
}

/** `scheme://host:port` for a target; an IPv6 host already carries its brackets. */
export function originOf(target: Target): string {
  return `${target.scheme}://${target.host}:${target.port}`;
}

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);

/** Any failure as a PeerHttpError, described by its code alone (never its message). */
function classify(error: unknown, timedOut: boolean, limits: HttpLimits): PeerHttpError {
  if (error instanceof PeerHttpError) return error;
  if (timedOut) return new PeerHttpError('timeout', `no complete answer within ${limits.totalTimeoutMs} ms`);
  const code = typeof (error as { code?: unknown })?.code === 'string' ? (error as { code: string }).code : '';
  if (code === 'UND_ERR_CONNECT_TIMEOUT') {
    return new PeerHttpError('timeout', `the connection was not established within ${limits.connectTimeoutMs} ms`);
  }
  if (TIMEOUT_CODES.has(code)) return new PeerHttpError('timeout', `the peer stopped answering (${code})`);
  // Codes are short fixed tokens (ECONNREFUSED, UND_ERR_SOCKET, HPE_INVALID_CONSTANT...); anything
  // else is not echoed, since an arbitrary message could carry what the peer sent.
  const shown = /^[A-Z0-9_]{1,48}$/.test(code) ? ` (${code})` : '';
  return new PeerHttpError('unreachable', `the connection failed${shown}`);
}

/**
 * Sends `GET <path>` to the target and resolves once the status line and headers have arrived.
 * Each call has a client of its own, so one connection per request, closed by `close()`: nothing
 * pooled outlives the call, and no later request rides a socket an earlier peer shaped.
 */
export async function getStream(target: Target, path: string, opts: HttpRequestOptions): Promise<PeerResponse> {
  if (!path.startsWith('/')) throw new TypeError('a request path must start with /');
  assertLimits(opts);
  const limits: HttpLimits = { connectTimeoutMs: opts.connectTimeoutMs, totalTimeoutMs: opts.totalTimeoutMs, maxBytes: opts.maxBytes };
  const client = outboundClient(originOf(target), {
    connect: {
      timeout: limits.connectTimeoutMs,
      ...(opts.ca !== undefined ? { ca: opts.ca } : {}),
    },
    // Backstops under the total timeout, which is the one that actually bounds the exchange.
    headersTimeout: limits.totalTimeoutMs,
    bodyTimeout: limits.totalTimeoutMs,
    pipelining: 1,
    // A hostile peer's keep-alive hint must not hold a socket open after we are done.
    keepAliveTimeout: 1,
  });
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new PeerHttpError('timeout', `no complete answer within ${limits.totalTimeoutMs} ms`));
  }, limits.totalTimeoutMs);
  let closed = false;
  let body: Readable | null = null;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    clearTimeout(timer);
    body?.destroy();
    await client.destroy().catch(() => undefined);
  };

  let response: Awaited<ReturnType<Client['request']>>;
  try {
    // Client.request follows no redirect (undici only does so through an explicit interceptor),
    // decompresses nothing, and has no cookie jar: a 3xx is just a status the caller refuses.
    response = await client.request({
      method: 'GET',
      path,
      headers: { accept: '*/*', ...(opts.headers ?? {}) },
      signal: controller.signal,
    });
  } catch (error) {
    await close();
    throw classify(error, timedOut, limits);
  }
  body = response.body;
  // undici errors a body destroyed before it was read to the end (RequestAbortedError). Every
  // early close here is deliberate, and an 'error' with no listener would crash the process, so
  // one is attached; a failure while reading still reaches the reader through its iterator.
  body.on('error', () => undefined);
  const headers = response.headers;
  const header = (name: string): string | null => {
    const value = headers[name.toLowerCase()];
    return typeof value === 'string' ? value : null;
  };
  const declared = header('content-length');
  const contentLength = declared !== null && /^[0-9]{1,15}$/.test(declared) ? Number(declared) : null;
  let consumed = false;

  async function* chunks(maxBytes: number = limits.maxBytes): AsyncGenerator<Buffer, void, undefined> {
    if (consumed) throw new Error('a response body can be read once');
    consumed = true;
    const tooLarge = () => new PeerHttpError('too_large', `the answer exceeds ${maxBytes} bytes`);
    // An honest oversized answer is refused on its headers, before a single byte is read.
    if (contentLength !== null && contentLength > maxBytes) {
      await close();
      throw tooLarge();
    }
    let seen = 0;
    try {
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        seen += chunk.length;
        // Counted per chunk, whatever the framing claimed: chunked bodies and lying lengths alike.
        if (seen > maxBytes) throw tooLarge();
        yield chunk;
      }
    } catch (error) {
      const failure = classify(error, timedOut, limits);
      await close();
      throw failure;
    }
  }

  const readAll = async (maxBytes: number = limits.maxBytes): Promise<Buffer> => {
    const parts: Buffer[] = [];
    for await (const chunk of chunks(maxBytes)) parts.push(chunk);
    return Buffer.concat(parts);
  };

  return { status: response.statusCode, header, contentLength, chunks, readAll, close };
}

export interface JsonResponse {
  status: number;
  json: unknown;
}

/**
 * `GET <path>` expecting `200` and a JSON body of at most `maxBytes`. Anything else (another
 * status, a redirect, an oversized or unparsable body) is a PeerHttpError; the connection is
 * closed before this returns either way.
 */
export async function getJson(target: Target, path: string, opts: HttpRequestOptions): Promise<JsonResponse> {
  const response = await getStream(target, path, {
    ...opts,
    headers: { accept: 'application/json', ...(opts.headers ?? {}) },
  });
  try {
    if (response.status !== 200) {
      throw new PeerHttpError('bad_response', `the peer answered HTTP ${response.status}`);
    }
    const bytes = await response.readAll();
    let json: unknown;
    try {
      json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
    } catch {
      throw new PeerHttpError('bad_response', 'the peer answered with a body that is not JSON');
    }
    return { status: response.status, json };
  } finally {
    await response.close();
  }
}
