// A large body on the wire (SPEC section 10: large bodies stream under a verified etag; a live
// workdir). A streamed body: the headers already carry the etag and content-length; the bytes come
// from the descriptor in chunks (native.StreamHandle), each hashed as it is read, and the final
// chunk arrives only once the hash of everything read equals that etag. A chunk that fails (the
// file changed or shrank) is never written: the body is cut instead (a TCP connection is reset; a
// unix or inherited socket, which cannot be, is destroyed mid-body), so the client can never
// complete a body whose sha256 differs from its etag. A cut never throws: nothing on this path may
// end the process. A snapshot (SnapshotBody) is bytes already read and hashed: it is only written.
// At most two chunk buffers are in use per streamed response: one being read while the other is
// written; a buffer is read into again only once its write completed or the response
// closed, so a pooled buffer is never changed under a write.
//
// A body whose digest came from the cache is sent under the read lease it was found under, and its
// chunks are not hashed again (native/stream.h). While a slow client holds the send, the lease is
// asked every LEASE_POLL_MS: a writer that opens the file waits at most that long, and the body is
// then cut like one that changed.
//
// Fastify sends a stream payload with payload.pipe(res); pipe() here runs that loop itself, with a
// callback per write, instead of letting Readable push chunks nobody could tell were flushed.
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { ChunkBuffers } from '../export/export-view.js';
import * as native from '../addon/export.js';
import { LEASE_POLL_MS } from '../limits.js';

const WRITER_CAME = 'a writer opened the file while it was sent';

export type { ChunkBuffers } from '../export/export-view.js';

/**
 * Ends a response mid-body so that the client sees it fail, never end: a TCP socket is reset
 * (RST); any other (a unix socket, a descriptor handed over by systemd that is not TCP) cannot be,
 * and Node throws ERR_INVALID_HANDLE_TYPE if asked, so it is destroyed, which leaves the client
 * fewer bytes than content-length. Never throws.
 */
export function cutResponse(res: ServerResponse): void {
  const socket = res.socket;
  try {
    if (socket && !socket.destroyed && socket.remoteFamily !== undefined) socket.resetAndDestroy();
  } catch {
    // not a TCP handle after all: destroyed below
  }
  if (!res.destroyed) res.destroy();
  if (socket && !socket.destroyed) socket.destroy();
}

export class StreamBody extends Readable {
  /** Why the body was not sent whole, when a chunk failed (for the trace). */
  failure: string | null = null;
  private stopped = false;

  constructor(
    private readonly stream: native.StreamHandle,
    private readonly buffers: ChunkBuffers,
  ) {
    super();
  }

  override _read(): void {
    // Never pulled: pipe() below writes every chunk itself.
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T): T {
    const res = destination as unknown as ServerResponse;
    // Nothing may escape as an unhandled rejection (it would end the process): whatever fails here
    // cuts this body, and the trace says it was not delivered.
    this.pump(res).catch(() => {
      this.failure ??= 'the body could not be sent';
      cutResponse(res);
    });
    return destination;
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.stopped = true;
    callback(error);
  }

  private async pump(res: ServerResponse): Promise<void> {
    // A buffer is free again at its write's callback or at the response's close, whichever first:
    // after 'close' no write can still use it (libuv has completed or cancelled each one).
    const writing = new Set<Buffer>();
    const freed: Array<() => void> = [];
    const free = (buffer: Buffer) => {
      if (!writing.delete(buffer)) return;
      this.buffers.give(buffer);
      freed.shift()?.();
    };
    let closed = false;
    const onClose = () => {
      closed = true;
      for (const buffer of [...writing]) free(buffer);
      for (const wake of freed.splice(0)) wake();
    };
    res.once('close', onClose);
    const gone = () => closed || this.stopped || res.destroyed;
    const cut = (why: string) => {
      this.failure ??= why;
      cutResponse(res);
    };
    const watch = this.stream.leased
      ? setInterval(() => {
          if (!gone() && !this.stream.leaseIntact()) cut(WRITER_CAME);
        }, LEASE_POLL_MS)
      : null;
    watch?.unref();
    let owned: Buffer | null = null;
    try {
      for (;;) {
        while (writing.size >= 2 && !gone()) await new Promise<void>((resolve) => freed.push(resolve));
        if (gone()) return;
        owned = this.buffers.take();
        let chunk: { bytes: number; final: boolean };
        try {
          chunk = await native.nextChunk(this.stream, owned);
        } catch (error) {
          cut(error instanceof native.NativeError && error.code === 'FILE_CHANGED' ? error.detail : 'the file could not be read while it was sent');
          return;
        }
        if (gone()) return;
        const buffer = owned;
        owned = null;
        writing.add(buffer);
        // The final chunk let the lease go: from here nothing is left to watch.
        if (chunk.final && watch) clearInterval(watch);
        const flowing = res.write(buffer.subarray(0, chunk.bytes), () => free(buffer));
        if (chunk.final) {
          res.end();
          this.push(null);
          this.resume();
          return;
        }
        if (!flowing && !gone()) {
          await new Promise<void>((resolve) => {
            const done = () => {
              res.off('drain', done);
              res.off('close', done);
              resolve();
            };
            res.once('drain', done);
            res.once('close', done);
          });
        }
      }
    } finally {
      if (watch) clearInterval(watch);
      if (owned) this.buffers.give(owned);
    }
  }
}

/**
 * A snapshot's bytes (ExportView: a file being written, read whole into pooled buffers and hashed
 * before the headers): written in order and ended. The buffers stay the body's until its response
 * closes (Body.release gives them back then), so nothing here frees anything.
 */
export class SnapshotBody extends Readable {
  /** Never set: a snapshot cannot fail its check (it is what was hashed). For the trace's reader. */
  readonly failure: string | null = null;

  constructor(private readonly chunks: readonly Buffer[]) {
    super();
  }

  override _read(): void {
    // Never pulled: pipe() below writes every chunk itself.
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T): T {
    const res = destination as unknown as ServerResponse;
    try {
      for (const chunk of this.chunks) {
        if (res.destroyed) return destination;
        res.write(chunk);
      }
      res.end();
      this.push(null);
      this.resume();
    } catch {
      cutResponse(res);
    }
    return destination;
  }
}
