// One traced exchange, shared by the listing, the read and the redeem: the request's event is
// written before anything is sent, a refusal is recorded with the message its body will carry, and
// a trace that cannot be written fails the request closed (500 io_error, no file bytes). The trace
// is the only account of what left the capsule, so nothing leaves unrecorded.
import { Refusal, renderHttp, type Rendered } from '../codes.js';
import { sendError, type HeaderList, type PlaneReply } from './reply.js';

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
 * closes: sent, cut or abandoned. Not before: until then a write may still be using the buffer.
 */
export function releaseOnClose(x: Exchange, release: () => void): void {
  if (x.reply.raw.closed || x.reply.raw.destroyed) release();
  else x.reply.raw.once('close', release);
}

/** Anything a plane caught: a Refusal as it is, anything else an io_error that echoes nothing. */
export function asRefusal(error: unknown): Refusal {
  return error instanceof Refusal ? error : new Refusal('io_error', 'internal error');
}
