// The peer plane's one verb (SPEC section 6): GET /resources/peer/<handle>. Checks run in the
// spec's fixed order and nothing downstream of the MAC is evaluated before it; the file is then
// served by the same ExportView (resolver, reader, symlink policy) as the operator plane.
import type { FastifyReply } from 'fastify';
import { PlaneError } from '../errors.js';
import { canonicalRelpath } from '../paths.js';
import { checkShape, handleId, verifyToken } from '../peer/handle.js';
import type { Session } from '../session.js';
import { traced } from './files.js';
import { readHeaders, send, sendError } from './reply.js';

export const PEER_PREFIX = '/resources/peer';
export const AUDIENCE_HEADER = 'x-murmur-audience';

export function isPeerPath(path: string): boolean {
  return path === PEER_PREFIX || path.startsWith(`${PEER_PREFIX}/`);
}

export async function handlePeer(
  session: Session,
  method: string,
  path: string,
  audienceHeader: string | undefined,
  reply: FastifyReply,
): Promise<void> {
  const token = path.slice(PEER_PREFIX.length + 1);
  // A property of the request alone, settled before anything about this capsule is consulted
  // (untraced). Like every refusal it carries the generation, and the handle id when a handle
  // segment was given.
  if (method !== 'GET') {
    const extra: Array<[string, string]> = [['x-murmur-generation', String(session.generation)]];
    if (token !== '') extra.push(['x-murmur-handle-id', handleId(token)]);
    sendError(reply, new PlaneError('peer', 'method_not_allowed'), extra);
    return;
  }
  // No list verb: these name no handle, so there is nothing to trace them against.
  if (path === PEER_PREFIX || token === '') {
    sendError(reply, new PlaneError('peer', 'not_found'));
    return;
  }
  const generation = session.generation;
  const hid = handleId(token);
  const audience = audienceHeader?.trim() ?? '';
  let verifiedPath: string | null = null;
  const record = (outcome: string, reason: string | null, bytes: number | null, sha256: string | null) =>
    session.trace.append('peer_handle_redeem', {
      handle_id: hid,
      // Caller-controlled until the MAC verifies; never recorded as fact before that.
      path: verifiedPath,
      generation,
      audience_asserted: audienceHeader ?? null,
      bytes,
      sha256,
      outcome,
      reason,
    });
  const idHeaders: Array<[string, string]> = [
    ['x-murmur-generation', String(generation)],
    ['x-murmur-handle-id', hid],
  ];
  const refuse = async (error: PlaneError) => {
    if (await traced(() => record(error.code, error.message, null, null), reply, generation, [['x-murmur-handle-id', hid]])) {
      sendError(reply, error, idHeaders);
    }
  };

  const view = session.peerFiles;
  const key = session.key;
  if (!view || !key) return refuse(new PlaneError('peer', 'no_peer_plane'));
  if (!checkShape(token)) return refuse(new PlaneError('peer', 'malformed_handle'));
  if (audience === '') return refuse(new PlaneError('peer', 'missing_audience'));
  const verdict = verifyToken(key, token, audience, session.sessionId, Date.now());
  if (!verdict.ok) {
    if (verdict.reason === 'expired') verifiedPath = verdict.payload.p;
    const code = verdict.reason === 'malformed' ? 'malformed_handle' : verdict.reason === 'expired' ? 'handle_expired' : 'handle_not_valid';
    return refuse(new PlaneError('peer', code));
  }
  verifiedPath = verdict.payload.p;
  // The payload is ours (the MAC proved it), but it is judged again rather than trusted.
  const relpath = canonicalRelpath(verdict.payload.p);
  if (relpath === null) return refuse(new PlaneError('peer', 'outside_root'));
  let result;
  try {
    result = await view.read(relpath);
  } catch (error) {
    return refuse(error as PlaneError);
  }
  if (!(await traced(() => record('ok', null, result.bytes.length, result.sha256), reply, generation, [['x-murmur-handle-id', hid]]))) return;
  // Never x-murmur-export-root: the peer plane discloses no path structure.
  send(reply, 200, [...readHeaders(result, generation, session.containment), ['x-murmur-handle-id', hid]], result.bytes);
}
