// One traced exchange, shared by the listing, the read and the redeem: the request's event is
// written before anything is sent, a refusal is recorded with the message its body will carry, and
// a trace that cannot be written fails the request closed (500 io_error, no file bytes). The trace
// is the only account of what left the capsule, so nothing leaves unrecorded.
import { Refusal, renderHttp, type Rendered } from '../codes.js';
import type { Trace } from '../trace/trace.js';
import { onceClosed } from './admission.js';
import { etagOf, sendError, type HeaderList, type PlaneReply } from './reply.js';

export interface Exchange {
  reply: PlaneReply;
  context: 'files' | 'peer';
  /** Headers every refusal of this exchange carries (generation; handle id on the peer plane). */
  refusalHeaders: HeaderList;
  /** The ceiling a too_large message names. */
  maxBytes?: number;
  /** Decides whether this refusal is traced one by one (false: it is counted in a summary). */
  traceRefusal?: () => boolean;
  /** Told the outcome of the exchange (metrics), once it is decided. */
  observe?: (outcome: string, bytes: number) => void;
}

/**
 * Runs a trace write; on failure answers 500 io_error (no file bytes) and returns false.
 */
export async function traced(x: Exchange, appendEvent: () => Promise<void>): Promise<boolean> {
  try {
    await appendEvent();
    return true;
  } catch (error) {
    x.reply.logError({ err: (error as Error).message }, 'trace write failed; refusing the request');
    sendError(x.reply, renderHttp(x.context, new Refusal('io_error', 'the trace could not be written')), x.refusalHeaders);
    return false;
  }
}

/** Renders `refusal`, records it (no bytes, no hash) and, once it is recorded, sends it. */
export async function refuse(x: Exchange, refusal: Refusal, record: (outcome: string, reason: string) => Promise<void>): Promise<void> {
  const rendered: Rendered = renderHttp(x.context, refusal, { maxBytes: x.maxBytes });
  x.observe?.(rendered.code, 0);
  // A refusal carries no file bytes; past the client's allowance it is counted, not traced.
  if (x.traceRefusal && !x.traceRefusal()) {
    sendError(x.reply, rendered, x.refusalHeaders);
    return;
  }
  if (await traced(x, () => record(rendered.code, rendered.message))) sendError(x.reply, rendered, x.refusalHeaders);
}

/**
 * Gives a read's share of the memory budget (and its buffer, for reuse) back once its response
 * closes, or its socket does: sent, cut or abandoned. Not before: until then a write may still be
 * using the buffer.
 */
export function releaseOnClose(x: Exchange, release: () => void): void {
  onceClosed(x.reply.req, x.reply.raw, release);
}

/**
 * Sends a body whose event is already in the trace. If the response closes before every byte of
 * it was handed to the kernel (the client reset, a pipelined response died in the queue), `record`
 * adds an outcome event saying it was not delivered: the line before the reply stays true to what
 * was decided, and this one to what happened.
 */
export function sendTracedBody(x: Exchange, headers: HeaderList, body: Buffer, record: () => Promise<void>): void {
  const res = x.reply.raw;
  // 'finish' on a live socket: the last byte was handed to the kernel. Node also emits 'finish'
  // when a reset socket cancels the writes it still held (and writableFinished then reads true):
  // by then the socket is destroyed.
  const socket = x.reply.req.socket;
  let finished = false;
  res.once('finish', () => (finished = !socket.destroyed));
  onceClosed(x.reply.req, res, () => {
    if (finished) return;
    record().catch((error: unknown) => x.reply.logError({ err: (error as Error).message }, 'trace write failed for an undelivered body'));
  });
  x.reply.send(200, headers, body);
}

/**
 * Whether an If-None-Match value matches `etag` (RFC 9110 section 13.1.2, with the strong
 * comparison the spec decides: a weak tag never matches): `*`, or a comma-separated list of
 * entity tags, one of which is byte-identical to `etag`.
 */
export function noneMatch(header: string | string[] | undefined, etag: string): boolean {
  if (header === undefined) return false;
  const value = Array.isArray(header) ? header.join(',') : header;
  if (value.trim() === '*') return true;
  for (const match of value.matchAll(/\s*(W\/)?("[^"]*")\s*(?:,|$)/g)) {
    if (match[1] === undefined && match[2] === etag) return true;
  }
  return false;
}

type RecordRead = (outcome: string, reason: string | null, bytes: number | null, sha256: string | null) => Promise<void>;
const EMPTY = Buffer.alloc(0);

/**
 * Answers a read or a redeem whose bytes are in hand: a 304 when the client already has exactly
 * these bytes (its If-None-Match names the etag just computed over
 * them), traced as a read that sent no body; otherwise the traced body.
 */
export async function answerRead(
  x: Exchange,
  result: { bytes: Buffer; sha256: string },
  headers: HeaderList,
  record: RecordRead,
  recordUndelivered: () => Promise<void>,
): Promise<void> {
  if (noneMatch(x.reply.req.headers['if-none-match'], etagOf(result))) {
    if (!(await traced(x, () => record('not_modified', null, 0, result.sha256)))) return;
    x.observe?.('not_modified', 0);
    x.reply.send(304, headers, EMPTY);
    return;
  }
  if (!(await traced(x, () => record('ok', null, result.bytes.length, result.sha256)))) return;
  x.observe?.('ok', result.bytes.length);
  sendTracedBody(x, headers, result.bytes, recordUndelivered);
}

/** The outcome event of a body whose response closed before all of it was sent. */
export function undelivered(trace: Trace, of: string, fields: { [field: string]: unknown }): Promise<void> {
  return trace.append('response_undelivered', { of, ...fields, outcome: 'undelivered', reason: 'the connection closed before the whole body was sent' });
}

/** Anything a plane caught: a Refusal as it is, anything else an io_error that echoes nothing. */
export function asRefusal(error: unknown): Refusal {
  return error instanceof Refusal ? error : new Refusal('io_error', 'internal error');
}
