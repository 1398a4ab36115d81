// A Body from ExportView.read as the bytes a client would get: a whole body or a snapshot as it is, a
// streamed one drained chunk by chunk through the addon (native.nextChunk), as the wire would send it. A stream
// whose file changed (FILE_CHANGED, the connection would be reset) yields null: no client gets it.
import type { Body, ExportView } from '../../src/export/export-view.js';
import * as native from '../../src/addon/export.js';

export async function drain(body: Body): Promise<Buffer | null> {
  try {
    return await bodyBytes(body);
  } catch (error) {
    if (error instanceof native.NativeError && error.code === 'FILE_CHANGED') return null;
    throw error;
  } finally {
    body.release();
  }
}

/** The body's bytes, read without giving back what it holds (its budget share stays until release()). */
export async function bodyBytes(body: Body): Promise<Buffer> {
  if (body.kind === 'whole') return body.bytes;
  if (body.kind === 'snapshot') return Buffer.concat(body.chunks);
  const parts: Buffer[] = [];
  for (;;) {
    const chunk = Buffer.allocUnsafe(native.LIMITS.streamChunkBytes);
    const { bytes, final } = await native.nextChunk(body.stream, chunk);
    parts.push(chunk.subarray(0, bytes));
    if (final) return Buffer.concat(parts);
  }
}

/** A listing through ExportView.list, as entries (the addon renders it; this parses it back). */
export async function listEntries(view: ExportView, signal?: AbortSignal): Promise<native.ListEntry[]> {
  const listing = await view.list(signal, { head: '{"entries":[', tail: ']}' });
  listing.release();
  const parsed = JSON.parse(listing.body.toString('utf8')) as { entries: Array<{ path: string; size_bytes: number; mtime_ms: number; sha256: string }> };
  return parsed.entries.map((e) => ({ path: e.path, size: e.size_bytes, mtimeMs: e.mtime_ms, sha256: e.sha256 }));
}
