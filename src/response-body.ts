// How both HTTP clients, `resource-plane get`/`ls` (cli/download.ts, cli/client.ts) and fetch-peer-file (tools/),
// read a response body, so that the two cannot drift apart: a file body is hashed while it is
// written to a sink and accepted only when the etag names exactly those bytes, and a refusal body
// is read up to one cap. It knows nothing about files, refusals or messages: each caller maps a
// BodyFailure to its own words. A leaf beside wire.ts: it imports only node.
import { createHash } from 'node:crypto';

/**
 * The most of a refusal body either client reads; past it only the status counts. The planes'
 * refusal bodies are one catalogued code and one sentence, well under 1 KiB, so 16 KiB leaves
 * ample room while bounding what a hostile server can make fetch-peer-file hold in the capsule's
 * own server process (the CLI had 64 KiB, an allowance nothing of ours ever used).
 */
export const ERROR_BODY_MAX_BYTES = 16 * 1024;

/**
 * Why a body was not accepted. `too_large`: more than `maxBytes`; `over_length` / `short`: more or
 * fewer bytes than the content-length the caller holds it to; `stream`: the response failed while
 * being read (`cause` is its error); `sink`: the sink refused a chunk (`cause` is what it threw);
 * `mismatch`: every byte arrived but they do not hash to the etag (`sha256` is what they hash to).
 */
export type BodyFailureKind = 'too_large' | 'over_length' | 'short' | 'stream' | 'sink' | 'mismatch';

export class BodyFailure extends Error {
  readonly kind: BodyFailureKind;
  /** The bytes written to the sink before the read stopped. */
  readonly bytes: number;
  /** For `mismatch`: the SHA-256 of the bytes that did arrive. */
  readonly sha256: string | null;
  constructor(kind: BodyFailureKind, bytes: number, opts: { cause?: unknown; sha256?: string } = {}) {
    super(`the body was not accepted: ${kind}`, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'BodyFailure';
    this.kind = kind;
    this.bytes = bytes;
    this.sha256 = opts.sha256 ?? null;
  }
}

export interface VerifiedBodyOptions {
  /** The SHA-256 the response's etag names (src/wire.ts parseEtag: a malformed etag is refused before this). */
  sha256: string;
  /** One byte more and the read stops; the chunk that would pass it is neither hashed nor written. */
  maxBytes: number;
  /** The content-length the body must match exactly, or null to hold it to `maxBytes` alone. */
  length?: number | null;
  /** Where the bytes go, in order; the next chunk is read only once this resolves. */
  sink: (chunk: Buffer) => Promise<void>;
}

export interface VerifiedBody {
  bytes: number;
  sha256: string;
}

/**
 * Streams `body` into `opts.sink`, hashing every chunk as it is written. Resolves only when the
 * body ended within its limits and its SHA-256 is the etag's; otherwise rejects with a BodyFailure.
 * Either way the caller still owns the sink's bytes: committing or discarding them is its decision.
 */
export async function readVerifiedBody(body: AsyncIterable<Buffer>, opts: VerifiedBodyOptions): Promise<VerifiedBody> {
  const length = opts.length ?? null;
  const hash = createHash('sha256');
  let bytes = 0;
  try {
    for await (const chunk of body) {
      if (length !== null && bytes + chunk.length > length) throw new BodyFailure('over_length', bytes);
      if (bytes + chunk.length > opts.maxBytes) throw new BodyFailure('too_large', bytes);
      hash.update(chunk);
      try {
        await opts.sink(chunk);
      } catch (error) {
        throw new BodyFailure('sink', bytes, { cause: error });
      }
      bytes += chunk.length;
    }
  } catch (error) {
    throw error instanceof BodyFailure ? error : new BodyFailure('stream', bytes, { cause: error });
  }
  if (length !== null && bytes !== length) throw new BodyFailure('short', bytes);
  const sha256 = hash.digest('hex');
  if (sha256 !== opts.sha256) throw new BodyFailure('mismatch', bytes, { sha256 });
  return { bytes, sha256 };
}
