// The operator plane (SPEC section 4): the listing and the read of `exports.files.root`, routed on
// the raw request path. Every request here leaves exactly one trace line, written before the reply
// goes out (src/planes/exchange.ts).
import { Refusal } from '../codes.js';
import type { ListEntry, ReadResult } from '../native.js';
import type { Release } from '../export/export-view.js';
import { lowerRelpath } from '../paths.js';
import type { Session } from '../session.js';
import { FILES_PREFIX, HEADER } from '../wire.js';
import { answerRead, asRefusal, releaseOnClose, refuse, sendTracedBody, traced, undelivered, type Exchange } from './exchange.js';
import type { PlaneContext } from './plugin.js';
import { headerSafe, readHeaders, type HeaderList, type PlaneReply } from './reply.js';

export async function handleFiles(ctx: PlaneContext, method: string, path: string, reply: PlaneReply): Promise<void> {
  const { session, metrics } = ctx;
  const generation = session.generation; // read once: every header and trace field agrees
  const isList = path === FILES_PREFIX || path === `${FILES_PREFIX}/`;
  const x: Exchange = {
    reply,
    context: 'files',
    refusalHeaders: [[HEADER.generation, String(generation)]],
    maxBytes: session.files?.opts.maxBytes,
    traceRefusal: () => session.refusals.allow(reply.client),
    observe: metrics ? (outcome, bytes) => metrics.answered('files', isList ? 'list' : 'read', outcome, bytes) : undefined,
  };
  if (isList) return handleList(session, x, method, generation);
  return handleRead(ctx, x, method, path.slice(FILES_PREFIX.length + 1), generation);
}

async function handleList(session: Session, x: Exchange, method: string, generation: number): Promise<void> {
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
  const refused = (r: Refusal) => refuse(x, r, (code, reason) => record(code, reason, null, null));
  if (method !== 'GET') return refused(new Refusal('method_not_allowed'));
  if (!view) return refused(new Refusal('no_resource_plane'));
  let entries: ListEntry[];
  try {
    // The client leaving or the session stopping cancels the hashing at once.
    const gone = new AbortController();
    const onClose = () => gone.abort();
    x.reply.raw.once('close', onClose);
    try {
      entries = await view.list(AbortSignal.any([gone.signal, session.stoppingSignal]));
    } finally {
      x.reply.raw.off('close', onClose);
    }
  } catch (error) {
    return refused(asRefusal(error));
  }
  const total = entries.reduce((sum, e) => sum + e.size, 0);
  if (!(await traced(x, () => record('ok', null, entries.length, total)))) return;
  x.observe?.('ok', 0);
  const body = Buffer.from(
    JSON.stringify({
      root: view.opts.root,
      mode: 'read-only',
      max_bytes: view.opts.maxBytes,
      generation,
      containment_achieved: session.containment,
      entries: entries.map((e) => ({ path: e.path, size_bytes: e.size, mtime_ms: e.mtimeMs, sha256: e.sha256 })),
    }),
  );
  const headers: HeaderList = [
    ['content-type', 'application/json'],
    [HEADER.generation, String(generation)],
    [HEADER.containment, session.containment],
    [HEADER.exportRoot, headerSafe(view.opts.root)],
  ];
  sendTracedBody(x, headers, body, () => undelivered(session.trace, 'resource_list', { bytes: body.length, generation }));
}

async function handleRead(ctx: PlaneContext, x: Exchange, method: string, raw: string, generation: number): Promise<void> {
  const { session } = ctx;
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
  const refused = (r: Refusal) => refuse(x, r, (code, reason) => record(code, reason, null, null));
  if (method !== 'GET') return refused(new Refusal('method_not_allowed'));
  if (!view) return refused(new Refusal('no_resource_plane'));
  if (!lowered.ok) return refused(new Refusal('outside_root'));
  let result: ReadResult & { release: Release };
  try {
    result = await view.read(lowered.relpath, session.memory, ctx.reuseBuffers);
  } catch (error) {
    return refused(asRefusal(error));
  }
  releaseOnClose(x, result.release);
  const headers: HeaderList = [...readHeaders(result, generation, session.containment), [HEADER.exportRoot, headerSafe(view.opts.root)]];
  await answerRead(x, result, headers, record, () => undelivered(session.trace, 'resource_read', { path: lowered.display, bytes: result.bytes.length, generation }));
}
