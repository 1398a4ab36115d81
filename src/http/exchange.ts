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

/**
 * The metrics observer of one plane request, or undefined without metrics: its answer is counted
 * once decided, and its duration (from the plane taking it until its response closed: sent, cut
 * or abandoned) observed then.
 */
export function observer(metrics: Metrics | undefined, plane: 'files' | 'peer', kind: 'list' | 'read' | 'redeem', reply: PlaneReply): ExchangeParts['observe'] {
  if (!metrics) return undefined;
  const started = performance.now();
  return (outcome, bytes) => {
    metrics.answered(plane, kind, outcome, bytes);
    onceClosed(reply.req, reply.raw, () => metrics.took(plane, outcome, (performance.now() - started) / 1000));
  };
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

/** What an exchange is made of. */
export interface ExchangeParts {
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

/** One plane request's traced answer: every step that records or sends goes through it. */
export class Exchange {
  readonly reply: PlaneReply;
  readonly trace: Trace;
  readonly context: 'files' | 'peer';
  readonly refusalHeaders: HeaderList;
  readonly maxBytes?: number;
  readonly traceRefusal?: () => boolean;
  readonly observe?: (outcome: string, bytes: number) => void;

  constructor(parts: ExchangeParts) {
    this.reply = parts.reply;
    this.trace = parts.trace;
    this.context = parts.context;
    this.refusalHeaders = parts.refusalHeaders;
    this.maxBytes = parts.maxBytes;
    this.traceRefusal = parts.traceRefusal;
    this.observe = parts.observe;
  }

  /**
   * Runs a trace write; on failure answers 500 io_error (no file bytes) and returns false.
   */
  async traced(event: TraceEvent): Promise<boolean> {
    try {
      await this.trace.record(event);
      return true;
    } catch (error) {
      this.reply.logError({ err: (error as Error).message }, 'trace write failed; refusing the request');
      sendError(this.reply, renderHttp(this.context, new Refusal('io_error', 'the trace could not be written')), this.refusalHeaders);
      return false;
    }
  }

  /** Renders `refusal`, records it (no bytes, no hash) and, once it is recorded, sends it. */
  async refuse(refusal: Refusal, build: (outcome: Outcome) => TraceEvent): Promise<void> {
    const rendered: Rendered = renderHttp(this.context, refusal, { maxBytes: this.maxBytes });
    this.observe?.(rendered.code, 0);
    // A refusal carries no file bytes; past the client's allowance it is counted, not traced.
    if (this.traceRefusal && !this.traceRefusal()) {
      sendError(this.reply, rendered, this.refusalHeaders);
      return;
    }
    if (await this.traced(build({ outcome: rendered.code, reason: rendered.message }))) sendError(this.reply, rendered, this.refusalHeaders);
  }

  /**
   * Gives a read's share of the memory budget back (and closes its stream) once its response closes,
   * or its socket does: sent, cut or abandoned. Not before: until then a write may still be using
   * its bytes.
   */
  releaseOnClose(release: () => void): void {
    onceClosed(this.reply.req, this.reply.raw, release);
  }

  /**
   * Aborts once the response closes before it was answered (the client left): stops waits and
   * hashing. A response that finished aborts nothing: its work is done, and an abort builds a
   * DOMException with its stack, a cost every answered request paid before.
   */
  clientGone(): AbortSignal {
    const gone = new AbortController();
    const res = this.reply.raw;
    onceClosed(this.reply.req, res, () => {
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
  sendTracedBody(headers: HeaderList, body: Buffer | StreamPayload, of: TraceEvent<BodyEventType>): void {
    const res = this.reply.raw;
    // 'finish' on a live socket: the last byte was handed to the kernel. Node also emits 'finish'
    // when a reset socket cancels the writes it still held (and writableFinished then reads true):
    // by then the socket is destroyed.
    const socket = this.reply.req.socket;
    let finished = false;
    res.once('finish', () => (finished = !socket.destroyed));
    onceClosed(this.reply.req, res, () => {
      if (finished) return;
      const failure = Buffer.isBuffer(body) ? null : ((body.stream as StreamBody | SnapshotBody).failure ?? null);
      this.trace
        .record(responseUndelivered(of, body.length, failure ?? undefined))
        .catch((error: unknown) => this.reply.logError({ err: (error as Error).message }, 'trace write failed for an undelivered body'));
    });
    this.reply.send(200, headers, body);
  }

  /**
   * Answers a read or a redeem whose digest is in hand: a 304 when the client already has exactly
   * these bytes (its If-None-Match names the etag computed over them), traced as a read that sent no
   * body; otherwise the traced body, whole or streamed.
   */
  async answerRead(body: Body, headers: HeaderList, buffers: ChunkBuffers, build: BuildRead): Promise<void> {
    if (noneMatch(this.reply.req.headers['if-none-match'], etagOf(body))) {
      if (!(await this.traced(build({ outcome: 'not_modified', reason: null, bytes: 0, sha256: body.sha256 })))) return;
      this.observe?.('not_modified', 0);
      this.reply.send(304, headers, EMPTY);
      return;
    }
    const sent = build({ outcome: 'ok', reason: null, bytes: body.size, sha256: body.sha256 });
    if (!(await this.traced(sent))) return;
    this.observe?.('ok', body.size);
    const payload =
      body.kind === 'whole'
        ? body.bytes
        : body.kind === 'snapshot'
          ? { stream: new SnapshotBody(body.chunks), length: body.size }
          : { stream: new StreamBody(body.stream, buffers), length: body.size };
    this.sendTracedBody(headers, payload, sent);
  }
}
