// The `fetch-peer-file` tool (SPEC section 6): redeems a peer's handle and lands the bytes as a
// file at `peer-in/<handle_id>-<sanitised basename>` in this capsule's workdir. The peer is matched
// against `capabilities.peer_fetch.allow` before any socket exists; the redeem runs under a connect
// timeout, a total timeout and a byte cap; the body streams into an exclusive temporary file
// created beneath the workdir descriptor (src/native.ts: no symlink followed, a symlinked `peer-in`
// refused) while it is hashed, and is renamed into place only when the peer's etag names exactly
// those bytes. Every attempt lands in the trace as `peer_file_fetch`. The token itself goes only
// into the request line: never into a result, a refusal, or the record.
import { isPeerPlaneCode, Refusal, type PeerStatusCode, type PlaneCode } from '../codes.js';
import { ownAudience, sessionIdFromCard } from '../handle/audience.js';
import { checkShape, decodePayloadUnverified } from '../handle/token.js';
import { destinationMatches, targetFromPeer, type Target } from '../manifest/destinations.js';
import * as native from '../native.js';
import { BodyFailure, ERROR_BODY_MAX_BYTES, readVerifiedBody, type VerifiedBody } from '../response-body.js';
import { handleId } from '../redact.js';
import { PEER_INBOX_DIR } from '../manifest/scope.js';
import { peerFileFetch } from '../trace/events.js';
import type { Session } from '../session/session.js';
import { CAPSULE_EXTENSION_URI, HEADER, parseEtag, PEER_PREFIX } from '../wire.js';
import { fetchCard } from './peer-card.js';
import { assertLimits, getStream, PeerHttpError, type PeerResponse } from './peer-http.js';
import { toolRefusal } from './refusal.js';

export interface FetchPeerFileInput {
  /** The peer capsule: `host:port` (spoken over http) or an http(s) URL. */
  peer: string;
  /** The mh1 token the peer handed over. */
  handle: string;
}

export interface FetchPeerFileResult {
  /** Where the bytes landed, relative to the workdir: `peer-in/<handle_id>-<name>`. */
  path: string;
  bytes: number;
  sha256: string;
  peer: string;
  /** The peer's generation when it served the bytes (its `x-murmur-generation`), if it said. */
  generation: number | null;
}

export interface FetchPeerFileOptions {
  /** Largest file accepted; default 10 MiB. */
  maxBytes?: number;
  connectTimeoutMs?: number;
  totalTimeoutMs?: number;
  /** Trusted CAs for an https peer instead of the system store. */
  ca?: string | Buffer | Array<string | Buffer>;
}

export const DEFAULT_FETCH_MAX_BYTES = 10 * 1024 * 1024;
export const FETCH_CONNECT_TIMEOUT_MS = 5_000;
export const FETCH_TOTAL_TIMEOUT_MS = 60_000;

/**
 * The peer's refusal code from its JSON body when it is one a peer plane can answer with, else
 * `http_<status>`. A peer can therefore never make the trace report one of our own decisions (a
 * `peer_not_allowed` for a peer that was in fact contacted) or a code outside the catalogue.
 */
async function peerCode(response: PeerResponse): Promise<PlaneCode | PeerStatusCode> {
  const fallback: PeerStatusCode = `http_${response.status}`;
  try {
    const body = await response.readAll(ERROR_BODY_MAX_BYTES);
    const parsed: unknown = JSON.parse(body.toString('utf8'));
    const code = (parsed as { error?: unknown } | null)?.error;
    return isPeerPlaneCode(code) ? code : fallback;
  } catch {
    return fallback;
  }
}

function generationOf(response: PeerResponse): number | null {
  const value = response.header('x-murmur-generation');
  return value !== null && /^[0-9]{1,15}$/.test(value) ? Number(value) : null;
}

function tooLarge(maxBytes: number): Refusal {
  return new Refusal('too_large', `the peer's file exceeds the fetch limit of ${maxBytes} bytes; nothing was stored`);
}

function transportRefusal(error: unknown, peer: string, maxBytes: number): Refusal {
  if (error instanceof PeerHttpError && error.kind === 'too_large') return tooLarge(maxBytes);
  const why = error instanceof PeerHttpError ? error.message : 'the request failed';
  return new Refusal('peer_unreachable', `the peer '${peer}' could not be fetched from: ${why}`);
}

/** A body the verified reader did not accept, as the refusal the agent reads. */
function bodyRefusal(error: unknown, peer: string, maxBytes: number): Refusal {
  if (!(error instanceof BodyFailure)) return transportRefusal(error, peer, maxBytes);
  switch (error.kind) {
    case 'mismatch':
      return new Refusal('etag_mismatch', "the body's sha256 does not match the peer's etag; nothing was stored");
    case 'sink': {
      const cause = error.cause;
      return new Refusal('io_error', `the fetched file could not be written (${cause instanceof native.NativeError ? cause.detail || cause.code : 'write failed'})`);
    }
    case 'too_large':
      return tooLarge(maxBytes);
    default:
      // `stream`: the transport's own failure (a cut connection, a timeout, the cap passed
      // mid-stream). No content-length is held to here (undici frames by it), so never `short`.
      return transportRefusal(error.cause, peer, maxBytes);
  }
}

/**
 * Redeems `input.handle` at `input.peer` and lands the bytes. `input` is typed: callTool has
 * checked it against the schema, a direct caller's compiler against the type. Resolves once the
 * file is in place and its `peer_file_fetch` event is written; throws a Refusal otherwise, having
 * left no temporary file behind and closed every descriptor it was handed.
 */
export async function fetchPeerFile(
  session: Session,
  input: FetchPeerFileInput,
  opts: FetchPeerFileOptions = {},
): Promise<FetchPeerFileResult> {
  const maxBytes = opts.maxBytes ?? DEFAULT_FETCH_MAX_BYTES;
  assertLimits({ maxBytes, connectTimeoutMs: opts.connectTimeoutMs, totalTimeoutMs: opts.totalTimeoutMs });
  const { peer, handle } = input;
  const hid = handleId(handle);

  const record = async (fields: { stored_path: string | null; bytes: number | null; sha256: string | null; outcome: string; reason: string | null }) => {
    try {
      await session.trace.record(
        peerFileFetch({
          peer,
          handleId: hid,
          storedPath: fields.stored_path,
          bytes: fields.bytes,
          sha256: fields.sha256,
          outcome: fields.outcome,
          reason: fields.reason,
        }),
      );
    } catch {
      throw new Refusal('io_error', 'the trace could not be written, so the fetch was not completed');
    }
  };
  const refuse = async (code: Refusal['code'], message: string): Promise<never> => {
    // No message is built from the token, but one quoting the caller's `peer` may carry one.
    const error = toolRefusal(new Refusal(code, message));
    await record({ stored_path: null, bytes: null, sha256: null, outcome: error.code, reason: error.detail });
    throw error;
  };

  // ── Before any connection: the operator's allow list, then the token's shape ──
  const allow = session.manifest.peerFetchAllow;
  if (allow === null) {
    return refuse('peer_not_allowed', 'this capsule declares no capabilities.peer_fetch block, so it fetches from no peer');
  }
  let target: Target;
  try {
    target = targetFromPeer(peer);
  } catch (error) {
    return refuse('peer_not_allowed', (error as Error).message);
  }
  if (!destinationMatches(allow, target)) {
    return refuse('peer_not_allowed', `capabilities.peer_fetch.allow does not include the peer '${peer}'`);
  }
  // A token travels as one path segment. Anything not shaped like one could carry `/`, `?` or `..`
  // into the request line and address something else on the peer, so it is refused here.
  if (!checkShape(handle)) {
    return refuse('malformed_handle', 'the handle is not a well-formed mh1 token');
  }

  // The audience this capsule asserts is its own identity; a session that serves nothing has none.
  const advertisedUrl = session.advertisedUrl;
  if (advertisedUrl === null) {
    return refuse('io_error', 'this session has no advertised URL, so it has no audience to assert');
  }

  // ── The issuer ──
  // A handle is a bearer token: it goes only to the peer that issued it. The card is read first
  // (no token travels with it) and must name the session in the token's (unverified) `iss`, so a
  // prompt-injected "fetch A's handle from B" never hands A's token to B. A peer that lies on its
  // card defeats this; the README's security model says what would close that.
  const iss = decodePayloadUnverified(handle)?.iss ?? null;
  let card: unknown;
  try {
    card = await fetchCard(target, { connectTimeoutMs: opts.connectTimeoutMs, totalTimeoutMs: opts.totalTimeoutMs, ca: opts.ca });
  } catch (error) {
    const why = error instanceof PeerHttpError ? error.message : 'the request failed';
    return refuse('peer_unreachable', `the agent card of '${peer}' could not be fetched, so the handle was not sent: ${why}`);
  }
  const cardSession = sessionIdFromCard(card, CAPSULE_EXTENSION_URI);
  if (iss === null || cardSession !== iss) {
    return refuse('issuer_mismatch', `the agent card of '${peer}' does not name the session that issued the handle, so the handle was not sent`);
  }

  // ── The redeem ──
  let response: PeerResponse;
  try {
    response = await getStream(target, `${PEER_PREFIX}/${handle}`, {
      connectTimeoutMs: opts.connectTimeoutMs ?? FETCH_CONNECT_TIMEOUT_MS,
      totalTimeoutMs: opts.totalTimeoutMs ?? FETCH_TOTAL_TIMEOUT_MS,
      maxBytes,
      headers: { [HEADER.audience]: ownAudience(session.manifest.name, advertisedUrl) },
      ...(opts.ca !== undefined ? { ca: opts.ca } : {}),
    });
  } catch (error) {
    const refusal = transportRefusal(error, peer, maxBytes);
    return refuse(refusal.code, refusal.detail ?? refusal.code);
  }

  // The addon owns the inbox descriptors; this only holds the landing that acts on them.
  let landing: native.Landing | null = null;
  let landedName: string | null = null;
  try {
    const generation = generationOf(response);
    if (response.status !== 200) {
      const code = await peerCode(response);
      return await refuse(code, `the peer refused the redeem: ${code} (HTTP ${response.status})`);
    }
    // Both refusable from the headers alone, before a byte of the body is read or written.
    const expected = parseEtag(response.header('etag'));
    if (expected === null) {
      return await refuse('etag_mismatch', `the peer's etag is not "sha256:<hex>", so the bytes cannot be checked; nothing was stored`);
    }
    if (response.contentLength !== null && response.contentLength > maxBytes) {
      const refusal = tooLarge(maxBytes);
      return await refuse(refusal.code, refusal.detail!);
    }

    const stored = storedPathFor(handleId(handle), decodePayloadUnverified(handle)?.p ?? null);
    const finalName = stored.slice(PEER_INBOX_DIR.length + 1);
    try {
      landing = await native.Landing.open(session.workdirDescriptor, PEER_INBOX_DIR);
    } catch (error) {
      const unsafe = error instanceof native.NativeError && error.code === 'UNSAFE_INBOX';
      return await refuse('io_error', unsafe
        ? `the inbox '${PEER_INBOX_DIR}' is a symlink or not a directory, so nothing was written`
        : `the inbox '${PEER_INBOX_DIR}' could not be written: ${error instanceof native.NativeError ? error.detail || error.code : 'internal error'}`);
    }

    let body: VerifiedBody;
    try {
      const sink = landing.write.bind(landing);
      body = await readVerifiedBody(response.chunks(maxBytes), { sha256: expected, maxBytes, sink });
    } catch (error) {
      const refusal = bodyRefusal(error, peer, maxBytes);
      return await refuse(refusal.code, refusal.detail ?? refusal.code);
    }
    const { bytes, sha256 } = body;

    try {
      // Commit fsyncs the file, renames it over the final name (never through a link there) and
      // fsyncs the inbox, so a crash leaves a temporary file or the whole file, never a torn one.
      await landing.commit(finalName);
    } catch (error) {
      return await refuse('io_error', `the fetched file could not be landed: ${error instanceof native.NativeError ? error.detail || error.code : 'internal error'}`);
    }
    landedName = finalName;
    try {
      await record({ stored_path: stored, bytes, sha256, outcome: 'ok', reason: null });
    } catch (error) {
      // The trace is the account of what entered the workdir: a file it does not record goes.
      await landing.abort().catch(() => undefined);
      throw error;
    }
    return { path: stored, bytes, sha256, peer, generation };
  } finally {
    await response.close();
    // Not landed: abort removes the temporary file (or a file a failed commit already renamed).
    // Landed: close keeps it. Either way the addon closes both descriptors.
    if (landing !== null) await (landedName === null ? landing.abort() : landing.close()).catch(() => undefined);
  }
}

// ── Where a fetched file lands ───────────────────────────────────────────────

const MAX_BASENAME_CHARS = 120;

/**
 * `peer-in/<handle_id>-<basename>`, runtime-chosen. The hint comes from an unverified payload,
 * so only its last `/` segment is used, every character outside `[A-Za-z0-9._-]` becomes `_`,
 * it is cut to 120 characters, and an empty, `.` or `..` result becomes `file`. The handle_id
 * prefix keeps two handles with the same hint from colliding.
 */
export function storedPathFor(id: string, basenameHint: string | null): string {
  const last = basenameHint === null ? '' : basenameHint.slice(basenameHint.lastIndexOf('/') + 1);
  let name = '';
  let count = 0;
  // Iterating the string walks code points, so one non-ASCII character becomes one '_'.
  for (const ch of last) {
    if (count === MAX_BASENAME_CHARS) break;
    name += /^[A-Za-z0-9._-]$/.test(ch) ? ch : '_';
    count++;
  }
  if (name === '' || name === '.' || name === '..') name = 'file';
  return `${PEER_INBOX_DIR}/${id}-${name}`;
}
