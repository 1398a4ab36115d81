// The inbound half of the peer handoff (SPEC section 6): GET /resources/peer/<handle>. Checks run
// in the spec's fixed order and nothing downstream of the MAC is evaluated before it; the file is
// then served by the same ExportView (resolver, reader, symlink policy) as the operator plane.
import { asRefusal, Refusal, renderHttp } from '../codes.js';
import { trimWhiteSpace } from '../handle/audience.js';
import { parseToken, verifyParsedSoon, type VerifyResult } from '../handle/token.js';
import type { Body } from '../export/export-view.js';
import { canonicalRelpath } from '../paths.js';
import { handleId } from '../redact.js';
import { HEADER } from '../wire.js';
import { peerHandleRedeem } from '../trace/events.js';
import { chunkBuffers, Exchange, observer, type BuildRead } from './exchange.js';
import type { PlaneContext } from './context.js';
import { readHeaders, sendError, type HeaderList, type PlaneReply } from './reply.js';

/** `rest`: the raw path after `/resources/peer/` (planeOf), null for `/resources/peer` itself. */
export async function handleRedeem(ctx: PlaneContext, method: string, rest: string | null, reply: PlaneReply): Promise<void> {
  const { session, metrics } = ctx;
  const asserted = reply.req.headers[HEADER.audience];
  const audienceHeader = Array.isArray(asserted) ? asserted.join(', ') : asserted;
  const token = rest ?? '';
  // A property of the request alone, settled before anything about this capsule is consulted
  // (untraced). Like every refusal it carries the generation, and the handle id when a handle
  // segment was given.
  if (method !== 'GET') {
    const extra: HeaderList = [[HEADER.generation, String(session.generation)]];
    if (token !== '') extra.push([HEADER.handleId, handleId(token)]);
    sendError(reply, renderHttp('peer', new Refusal('method_not_allowed')), extra);
    return;
  }
  // No list verb: these name no handle, so there is nothing to trace them against.
  if (token === '') {
    sendError(reply, renderHttp('peer', new Refusal('not_found')));
    return;
  }
  const generation = session.generation;
  const hid = handleId(token);
  // Trimmed as the reference trims (Unicode White_Space), so both derive one audience.
  const audience = trimWhiteSpace(audienceHeader ?? '');
  const view = session.peerFiles;
  const x = new Exchange({
    reply,
    trace: session.trace,
    context: 'peer',
    refusalHeaders: [
      [HEADER.generation, String(generation)],
      [HEADER.handleId, hid],
    ],
    maxBytes: view?.opts.maxBytes,
    traceRefusal: () => session.refusals.allow(reply.client),
    observe: observer(metrics, 'peer', 'redeem', reply),
  });
  let verifiedPath: string | null = null;
  // The path is caller-controlled until the MAC verifies: never recorded as fact before that.
  const redeemed: BuildRead = (f) => peerHandleRedeem({ ...f, handleId: hid, path: verifiedPath, generation, audienceAsserted: audienceHeader ?? null });
  const refused = (r: Refusal) => x.refuse(r, (o) => redeemed({ ...o, bytes: null, sha256: null }));

  const key = session.key;
  if (!view || !key) return refused(new Refusal('no_peer_plane'));
  // Split and decoded once: the shape is judged before the audience, the MAC after it.
  const parts = parseToken(token);
  if (parts === null) return refused(new Refusal('malformed_handle'));
  if (audience === '') return refused(new Refusal('missing_audience'));
  let verdict: VerifyResult;
  try {
    verdict = await verifyParsedSoon(key, parts, audience, session.sessionId, session.now);
  } catch {
    // The key was destroyed while this MAC waited for its batch: the session is stopping (its
    // trace may be closed), so this is admission's answer while stopping, untraced.
    sendError(reply, renderHttp('server', new Refusal('shutting_down')), x.refusalHeaders);
    return;
  }
  if (!verdict.ok) {
    if (verdict.reason === 'expired') verifiedPath = verdict.payload.p;
    const code = verdict.reason === 'malformed' ? 'malformed_handle' : verdict.reason === 'expired' ? 'handle_expired' : 'handle_not_valid';
    return refused(new Refusal(code));
  }
  verifiedPath = verdict.payload.p;
  // The payload is ours (the MAC proved it), but it is judged again rather than trusted.
  const relpath = canonicalRelpath(verdict.payload.p);
  if (relpath === null) return refused(new Refusal('outside_root'));
  const buffers = chunkBuffers(session.memory, ctx.reuseBuffers);
  let body: Body;
  try {
    body = await view.read(relpath, { budget: session.memory, gone: () => x.clientGone(), buffers });
  } catch (error) {
    return refused(asRefusal(error));
  }
  x.releaseOnClose(body.release);
  // Never x-murmur-export-root: the peer plane discloses no path structure.
  const headers: HeaderList = [...readHeaders(body, generation, session.containment), [HEADER.handleId, hid]];
  await x.answerRead(body, headers, buffers, redeemed);
}
