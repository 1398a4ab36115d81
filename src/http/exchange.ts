// One traced exchange, shared by the listing, the read and the redeem: the request's event is
// written before anything is sent, a refusal is recorded with the message its body will carry, and
// a trace that cannot be written fails the request closed (500 io_error, no file bytes). The trace
// is the only account of what left the capsule, so nothing leaves unrecorded.
import { Refusal, renderHttp, type Rendered } from '../codes.js';
import type { Body, ChunkBuffers } from '../export/export-view.js';
import type { MemoryBudget } from '../export/memory.js';
import { responseUndelivered, type BodyEventType, type Outcome, type TraceEvent } from '../trace/events.js';
import type { Trace } from '../trace/trace.js';
import { onceClosed } from './closing.js';
import type { Metrics } from './metrics.js';
import { etagOf, sendError, type HeaderList, type PlaneReply, type StreamPayload } from './reply.js';
import { SnapshotBody, StreamBody } from './stream-body.js';

export interface Exchange {
  reply: PlaneReply;
  /** Where the exchange's events go (the session's trace). */
  trace: Trace;
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
 * The metrics observer of one plane request, or undefined without metrics: its answer is counted
 * once decided, and its duration (from the plane taking it until its response closed: sent, cut
 * or abandoned) observed then.
 */
export function observer(metrics: Metrics | undefined, plane: 'files' | 'peer', kind: 'list' | 'read' | 'redeem', reply: PlaneReply): Exchange['observe'] {
  if (!metrics) return undefined;
  const started = performance.now();
  return (outcome, bytes) => {
    metrics.answered(plane, kind, outcome, bytes);
    onceClosed(reply.req, reply.raw, () => metrics.took(plane, outcome, (performance.now() - started) / 1000));
  };
}

/**
 * Runs a trace write; on failure answers 500 io_error (no file bytes) and returns false.
 */
export async function traced(x: Exchange, event: TraceEvent): Promise<boolean> {
  try {
    await x.trace.record(event);
    return true;
  } catch (error) {
    x.reply.logError({ err: (error as Error).message }, 'trace write failed; refusing the request');
    sendError(x.reply, renderHttp(x.context, new Refusal('io_error', 'the trace could not be written')), x.refusalHeaders);
    return false;
  }
}

/** Renders `refusal`, records it (no bytes, no hash) and, once it is recorded, sends it. */
export async function refuse(x: Exchange, refusal: Refusal, build: (outcome: Outcome) => TraceEvent): Promise<void> {
  const rendered: Rendered = renderHttp(x.context, refusal, { maxBytes: x.maxBytes });
  x.observe?.(rendered.code, 0);
  // A refusal carries no file bytes; past the client's allowance it is counted, not traced.
  if (x.traceRefusal && !x.traceRefusal()) {
    sendError(x.reply, rendered, x.refusalHeaders);
    return;
  }
  if (await traced(x, build({ outcome: rendered.code, reason: rendered.message }))) sendError(x.reply, rendered, x.refusalHeaders);
}

/**
 * Gives a read's share of the memory budget back (and closes its stream) once its response closes,
 * or its socket does: sent, cut or abandoned. Not before: until then a write may still be using
 * its bytes.
 */
export function releaseOnClose(x: Exchange, release: () => void): void {
  onceClosed(x.reply.req, x.reply.raw, release);
}

/**
 * Aborts once the response closes before it was answered (the client left): stops waits and
 * hashing. A response that finished aborts nothing: its work is done, and an abort builds a
 * DOMException with its stack, a cost every answered request paid before.
 */
export function clientGone(x: Exchange): AbortSignal {
  const gone = new AbortController();
  const res = x.reply.raw;
  onceClosed(x.reply.req, res, () => {
    if (!res.writableFinished) gone.abort();
  });
  return gone.signal;
}

/**
 * Sends a body whose event (`of`) is already in the trace. If the response closes before every byte
 * of it was handed to the kernel (the client reset, a pipelined response died in the queue), a
 * `response_undelivered` line follows `of`: the line before the reply stays true to what was
 * decided, and this one to what happened.
 */
export function sendTracedBody(x: Exchange, headers: HeaderList, body: Buffer | StreamPayload, of: TraceEvent<BodyEventType>): void {
  const res = x.reply.raw;
  // 'finish' on a live socket: the last byte was handed to the kernel. Node also emits 'finish'
  // when a reset socket cancels the writes it still held (and writableFinished then reads true):
  // by then the socket is destroyed.
  const socket = x.reply.req.socket;
  let finished = false;
  res.once('finish', () => (finished = !socket.destroyed));
  onceClosed(x.reply.req, res, () => {
    if (finished) return;
    const failure = Buffer.isBuffer(body) ? null : (body.stream as StreamBody | SnapshotBody).failure ?? null;
    x.trace.record(responseUndelivered(of, body.length, failure ?? undefined)).catch((error: unknown) => x.reply.logError({ err: (error as Error).message }, 'trace write failed for an undelivered body'));
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

/** A read's or a redeem's event for one outcome, with the bytes it sends and their digest. */
export type BuildRead = (f: Outcome & { bytes: number | null; sha256: string | null }) => TraceEvent<'resource_read' | 'peer_handle_redeem'>;
const EMPTY = Buffer.alloc(0);

/**
 * Where a streamed body's chunk buffers come from: the budget's pool when nothing but our own
 * writes can hold a chunk (the CLI's app), else a fresh buffer per chunk (a host app's hooks may
 * keep a payload, so nothing is reused under them).
 */
export function chunkBuffers(budget: MemoryBudget, reuse: boolean): ChunkBuffers {
  if (reuse) return { take: () => budget.buffer(), give: (buffer) => budget.recycle(buffer) };
  return { take: () => Buffer.allocUnsafeSlow(budget.bufferBytes), give: () => undefined };
}

/**
 * Answers a read or a redeem whose digest is in hand: a 304 when the client already has exactly
 * these bytes (its If-None-Match names the etag computed over them), traced as a read that sent no
 * body; otherwise the traced body, whole or streamed.
 */
export async function answerRead(x: Exchange, body: Body, headers: HeaderList, buffers: ChunkBuffers, build: BuildRead): Promise<void> {
  if (noneMatch(x.reply.req.headers['if-none-match'], etagOf(body))) {
    if (!(await traced(x, build({ outcome: 'not_modified', reason: null, bytes: 0, sha256: body.sha256 })))) return;
    x.observe?.('not_modified', 0);
    x.reply.send(304, headers, EMPTY);
    return;
  }
  const sent = build({ outcome: 'ok', reason: null, bytes: body.size, sha256: body.sha256 });
  if (!(await traced(x, sent))) return;
  x.observe?.('ok', body.size);
  const payload = body.kind === 'whole' ? body.bytes
    : body.kind === 'snapshot' ? { stream: new SnapshotBody(body.chunks), length: body.size }
    : { stream: new StreamBody(body.stream, buffers), length: body.size };
  sendTracedBody(x, headers, payload, sent);
}
