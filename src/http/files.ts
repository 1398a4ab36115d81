// The operator plane (SPEC section 4): the listing and the read of `exports.files.root`, routed on
// the raw request path. Every request here leaves exactly one trace line, written before the reply
// goes out (src/http/exchange.ts).
import { createHash } from 'node:crypto';
import { asRefusal, Refusal } from '../codes.js';
import type { RenderedListing } from '../addon/export.js';
import type { Body, Release } from '../export/export-view.js';
import { lowerRelpath } from '../paths.js';
import type { Session } from '../session/session.js';
import { formatEtag, HEADER } from '../wire.js';
import { resourceList, resourceRead, type Outcome } from '../trace/events.js';
import { chunkBuffers, Exchange, noneMatch, observer, type BuildRead } from './exchange.js';
import type { PlaneContext } from './context.js';
import { headerSafe, readHeaders, type HeaderList, type PlaneReply } from './reply.js';

/** `rest`: the raw path after `/resources/files/` (planeOf), null for `/resources/files` itself. */
export async function handleFiles(ctx: PlaneContext, method: string, rest: string | null, reply: PlaneReply): Promise<void> {
  const { session, metrics } = ctx;
  const generation = session.generation; // read once: every header and trace field agrees
  const isList = rest === null || rest === '';
  const x = new Exchange({
    reply,
    trace: session.trace,
    context: 'files',
    refusalHeaders: [[HEADER.generation, String(generation)]],
    maxBytes: session.files?.opts.maxBytes,
    traceRefusal: () => session.refusals.allow(reply.client),
    observe: observer(metrics, 'files', isList ? 'list' : 'read', reply),
  });
  if (isList) return handleList(session, x, method, generation);
  return handleRead(ctx, x, method, rest!, generation);
}

async function handleList(session: Session, x: Exchange, method: string, generation: number): Promise<void> {
  const view = session.files;
  const listed = (o: Outcome, entryCount: number | null, totalBytes: number | null) =>
    resourceList({ ...o, root: view?.opts.root ?? '', entryCount, totalBytes, generation, containment: session.containment });
  const refused = (r: Refusal) => x.refuse(r, (o) => listed(o, null, null));
  if (method !== 'GET') return refused(new Refusal('method_not_allowed'));
  if (!view) return refused(new Refusal('no_resource_plane'));
  // The addon renders the entries between these (the object JSON.stringify would give, in the
  // spec's key order); the body is held in the memory budget before it is sent.
  const head = JSON.stringify({
    root: view.opts.root,
    mode: 'read-only',
    max_bytes: view.opts.maxBytes,
    generation,
    containment_achieved: session.containment,
    entries: [],
  });
  const render = { head: head.slice(0, -2), tail: ']}' };
  let listing: RenderedListing & { release: Release };
  try {
    // The client leaving or the session stopping cancels the hashing (and the wait for memory) at once.
    listing = await view.list(AbortSignal.any([x.clientGone(), session.stoppingSignal]), render, session.memory);
  } catch (error) {
    return refused(asRefusal(error));
  }
  x.releaseOnClose(listing.release);
  const { body } = listing;
  // The listing's strong validator: the SHA-256 of exactly these bytes, in the files' etag format.
  // The addon hands the body over whole (held in the budget), so it is hashed once here, before
  // the headers: about 0.7 ms per MB on this thread, against the seconds the listing took to make.
  const etag = formatEtag(createHash('sha256').update(body).digest('hex'));
  const headers: HeaderList = [
    ['content-type', 'application/json'],
    ['etag', etag],
    [HEADER.generation, String(generation)],
    [HEADER.containment, session.containment],
    [HEADER.exportRoot, headerSafe(view.opts.root)],
  ];
  // The client already holds exactly these bytes: a 304 with the same headers and no body, traced
  // as a listing that sent none (the counts still say what the listing it holds describes).
  if (noneMatch(x.reply.req.headers['if-none-match'], etag)) {
    if (!(await x.traced(listed({ outcome: 'not_modified', reason: null }, listing.entryCount, listing.totalBytes)))) return;
    x.observe?.('not_modified', 0);
    x.reply.send(304, headers, Buffer.alloc(0));
    return;
  }
  const sent = listed({ outcome: 'ok', reason: null }, listing.entryCount, listing.totalBytes);
  if (!(await x.traced(sent))) return;
  x.observe?.('ok', 0);
  x.sendTracedBody(headers, body, sent);
}

async function handleRead(ctx: PlaneContext, x: Exchange, method: string, raw: string, generation: number): Promise<void> {
  const { session } = ctx;
  const view = session.files;
  const lowered = lowerRelpath(raw, 'url');
  const read: BuildRead = (f) => resourceRead({ ...f, path: lowered.display, generation, containment: session.containment });
  const refused = (r: Refusal) => x.refuse(r, (o) => read({ ...o, bytes: null, sha256: null }));
  if (method !== 'GET') return refused(new Refusal('method_not_allowed'));
  if (!view) return refused(new Refusal('no_resource_plane'));
  if (!lowered.ok) return refused(new Refusal('outside_root'));
  const buffers = chunkBuffers(session.memory, ctx.reuseBuffers);
  let body: Body;
  try {
    body = await view.read(lowered.relpath, { budget: session.memory, gone: () => x.clientGone(), buffers });
  } catch (error) {
    return refused(asRefusal(error));
  }
  x.releaseOnClose(body.release);
  const headers: HeaderList = [...readHeaders(body, generation, session.containment), [HEADER.exportRoot, headerSafe(view.opts.root)]];
  await x.answerRead(body, headers, buffers, read);
}
