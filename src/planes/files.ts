// The operator plane (SPEC section 4): the listing and the read of `exports.files.root`, routed on
// the raw request path. Every request here leaves exactly one trace line, written before the reply
// goes out; if it cannot be written, the request fails closed with no file bytes.
import type { FastifyReply } from 'fastify';
import { PlaneError } from '../errors.js';
import { lowerRelpath } from '../paths.js';
import type { Session } from '../session.js';
import { headerSafe, readHeaders, send, sendError, type HeaderList } from './reply.js';

export const FILES_PREFIX = '/resources/files';

export function isFilesPath(path: string): boolean {
  return path === FILES_PREFIX || path.startsWith(`${FILES_PREFIX}/`);
}

export async function handleFiles(session: Session, method: string, path: string, reply: FastifyReply): Promise<void> {
  const generation = session.generation; // read once: every header and trace field agrees
  const isList = path === FILES_PREFIX || path === `${FILES_PREFIX}/`;
  if (isList) return handleList(session, method, generation, reply);
  return handleRead(session, method, path.slice(FILES_PREFIX.length + 1), generation, reply);
}

async function handleList(session: Session, method: string, generation: number, reply: FastifyReply): Promise<void> {
  const view = session.files;
  const record = (outcome: string, reason: string | null, entryCount: number | null, totalBytes: number | null) =>
    session.trace.append('resource_list', {
      root: view?.opts.root ?? '',
      entry_count: entryCount,
      total_bytes: totalBytes,
      generation,
      containment_achieved: session.containment,
      outcome,
      reason,
    });
  let refusal: PlaneError | null = null;
  if (method !== 'GET') refusal = new PlaneError('files', 'method_not_allowed');
  else if (!view) refusal = new PlaneError('files', 'no_resource_plane');
  let entries;
  if (!refusal) {
    try {
      entries = await view!.list();
    } catch (error) {
      refusal = error as PlaneError;
    }
  }
  if (refusal || !entries) return refuse(reply, generation, refusal!, (code, reason) => record(code, reason, null, null));
  const total = entries.reduce((sum, e) => sum + e.size, 0);
  if (!(await traced(() => record('ok', null, entries.length, total), reply, generation))) return;
  const body = Buffer.from(
    JSON.stringify({
      root: view!.opts.root,
      mode: 'read-only',
      max_bytes: view!.opts.maxBytes,
      generation,
      containment_achieved: session.containment,
      entries: entries.map((e) => ({ path: e.path, size_bytes: e.size, mtime_ms: e.mtimeMs, sha256: e.sha256 })),
    }),
  );
  send(reply, 200, [
    ['content-type', 'application/json'],
    ['x-murmur-generation', String(generation)],
    ['x-murmur-containment', session.containment],
    ['x-murmur-export-root', headerSafe(view!.opts.root)],
  ], body);
}

async function handleRead(session: Session, method: string, raw: string, generation: number, reply: FastifyReply): Promise<void> {
  const view = session.files;
  const lowered = lowerRelpath(raw, 'url');
  const record = (outcome: string, reason: string | null, bytes: number | null, sha256: string | null) =>
    session.trace.append('resource_read', {
      path: lowered.display,
      outcome,
      bytes,
      sha256,
      generation,
      containment_achieved: session.containment,
      reason,
    });
  let refusal: PlaneError | null = null;
  if (method !== 'GET') refusal = new PlaneError('files', 'method_not_allowed');
  else if (!view) refusal = new PlaneError('files', 'no_resource_plane');
  else if (!lowered.ok) refusal = new PlaneError('files', 'outside_root');
  let result;
  if (!refusal) {
    try {
      result = await view!.read(lowered.ok ? lowered.relpath : '');
    } catch (error) {
      refusal = error as PlaneError;
    }
  }
  if (refusal || !result) return refuse(reply, generation, refusal!, (code, reason) => record(code, reason, null, null));
  if (!(await traced(() => record('ok', null, result.bytes.length, result.sha256), reply, generation))) return;
  send(reply, 200, [...readHeaders(result, generation, session.containment), ['x-murmur-export-root', headerSafe(view!.opts.root)]], result.bytes);
}

/** Records a refusal (no bytes, no hash) and, once it is recorded, sends it. */
async function refuse(
  reply: FastifyReply,
  generation: number,
  error: PlaneError,
  record: (outcome: string, reason: string) => Promise<void>,
): Promise<void> {
  if (await traced(() => record(error.code, error.message), reply, generation)) {
    sendError(reply, error, [['x-murmur-generation', String(generation)]]);
  }
}

/**
 * Runs a trace write; on failure answers 500 io_error (no file bytes) and returns false. The
 * trace is the only account of what left the capsule, so nothing leaves unrecorded.
 */
export async function traced(appendEvent: () => Promise<void>, reply: FastifyReply, generation: number, extra: HeaderList = []): Promise<boolean> {
  try {
    await appendEvent();
    return true;
  } catch (error) {
    reply.log.error({ err: (error as Error).message }, 'trace write failed; refusing the request');
    sendError(reply, new PlaneError('files', 'io_error', { detail: 'the trace could not be written' }), [
      ['x-murmur-generation', String(generation)],
      ...extra,
    ]);
    return false;
  }
}
