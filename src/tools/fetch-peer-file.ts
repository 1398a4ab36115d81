// The `fetch-peer-file` tool (SPEC section 6): redeems a peer's handle and lands the bytes as a
// file at `peer-in/<handle_id>-<sanitised basename>` in this capsule's workdir, in named steps:
// match the peer against `capabilities.peer_fetch.allow` (before any socket exists), parse the
// handle (once), check the issuer on the peer's card, redeem under a connect timeout, a total
// timeout and a byte cap, judge the answer on its headers, then verify and land: the body streams
// into an exclusive temporary file created beneath the workdir descriptor (src/addon/landing.ts: no
// symlink followed, a symlinked `peer-in` refused) while it is hashed (src/response-body.ts),
// and is renamed into place only when the peer's etag names exactly those bytes. Every attempt
// lands in the trace as `peer_file_fetch`. The token itself goes only into the request line:
// never into a result, a refusal, or the record.
// Why this file is long: the tool is one sequence of named steps, each a guarantee with its own
// refusal, read top to bottom; the HTTP and the card live apart (peer-http.ts, peer-card.ts).
import { isPeerPlaneCode, Refusal, type PeerStatusCode, type PlaneCode } from '../codes.js';
import { ownAudience, sessionIdFromCard } from '../handle/audience.js';
import { readUnverified } from '../handle/token.js';
import { destinationMatches, notAllowedDetail, targetFromPeer, type Destination, type Target } from '../manifest/destinations.js';
import * as native from '../addon/export.js';
import { Landing } from '../addon/landing.js';
import { BodyFailure, ERROR_BODY_MAX_BYTES, readVerifiedBody, type VerifiedBody } from '../response-body.js';
import { outboundGuardProblem } from '../outbound-client.js';
import { handleId } from '../redact.js';
import { PEER_INBOX_DIR } from '../manifest/scope.js';
import { peerFileFetch } from '../trace/events.js';
import type { Session } from '../session/session.js';
import { CAPSULE_EXTENSION_URI, HEADER, parseEtag, PEER_PREFIX } from '../wire.js';
import { fetchCard } from './peer-card.js';
import { assertLimits, getStream, PeerHttpError, type PeerResponse } from './peer-http.js';
import { toolRefusal } from './refusal.js';
import { FETCH_CONNECT_TIMEOUT_MS, FETCH_TOTAL_TIMEOUT_MS } from '../limits.js';

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
  /** Largest file accepted; default the session's fetchMaxBytes (10 MiB unless the launch said). */
  maxBytes?: number;
  connectTimeoutMs?: number;
  totalTimeoutMs?: number;
  /** Trusted CAs for an https peer instead of the system store. */
  ca?: string | Buffer | Array<string | Buffer>;
}

/** The limits one fetch runs under, as the caller gave them (the card fetch has its own defaults). */
interface FetchLimits {
  maxBytes: number;
  connectTimeoutMs: number | undefined;
  totalTimeoutMs: number | undefined;
  ca: FetchPeerFileOptions['ca'];
}

/** A peer's handle, read once without its MAC (this process cannot verify it). */
interface PeerHandle {
  token: string;
  /** The session its payload claims minted it: where the token may be sent, if the card agrees. */
  issuer: string | null;
  /** Where its bytes land: `peer-in/<handle_id>-<name>`, the name hinted by its payload. */
  stored: string;
}

/** The redeem's answer as judged on its status line and headers. */
interface Answer {
  /** The SHA-256 its etag names. */
  sha256: string;
  generation: number | null;
}

/** What one fetch holds open, released whatever happens: the redeem's connection and the landing. */
class Held {
  response: PeerResponse | null = null;
  /** The addon owns the inbox descriptors; this only holds the landing that acts on them. */
  landing: Landing | null = null;
  committed = false;

  async release(): Promise<void> {
    await this.response?.close();
    // Not committed: abort removes the temporary file (or a file a failed commit already renamed).
    // Committed: close keeps it. Either way the addon closes both descriptors.
    if (this.landing !== null) await (this.committed ? this.landing.close() : this.landing.abort()).catch(() => undefined);
  }
}

/**
 * Redeems `input.handle` at `input.peer` and lands the bytes. `input` is typed: callTool has
 * checked it against the schema, a direct caller's compiler against the type. Resolves once the
 * file is in place and its `peer_file_fetch` event is written; throws a Refusal otherwise, having
 * left no temporary file behind and closed every descriptor it was handed. Each step throws the
 * Refusal that ends the fetch; it is traced here, before anything is released.
 */
export async function fetchPeerFile(session: Session, input: FetchPeerFileInput, opts: FetchPeerFileOptions = {}): Promise<FetchPeerFileResult> {
  const limits = fetchLimits(session, opts);
  const id = handleId(input.handle);
  const trace = fetchTrace(session, input.peer, id);
  const held = new Held();
  try {
    let handle: PeerHandle;
    let answer: Answer;
    let body: VerifiedBody;
    try {
      // Before any connection: the operator's allow list, then the token's shape.
      const target = matchPeer(session.manifest.peerFetchAllow, input.peer);
      await refuseWithoutGuard();
      handle = parseHandle(input.handle, id);
      const audience = assertedAudience(session);
      await checkIssuer(target, handle, input.peer, limits);
      held.response = await redeem(target, handle, audience, input.peer, limits);
      answer = await judgeAnswer(held.response, limits.maxBytes);
      body = await verifyAndLand(session, held, handle, answer, input.peer, limits.maxBytes);
    } catch (error) {
      throw error instanceof Refusal ? await trace.refused(error) : error;
    }
    try {
      await trace.landed(handle.stored, body);
    } catch (error) {
      // The trace is the account of what entered the workdir: a file it does not record goes.
      await held.landing?.abort().catch(() => undefined);
      throw error;
    }
    return { path: handle.stored, bytes: body.bytes, sha256: body.sha256, peer: input.peer, generation: answer.generation };
  } finally {
    await held.release();
  }
}

/**
 * No fetch without the outbound guard (src/outbound-client.ts): with an undici whose private fields
 * moved, a peer could end this process in the middle of a fetch, session_end and all.
 */
async function refuseWithoutGuard(): Promise<void> {
  const problem = await outboundGuardProblem();
  if (problem !== null) {
    throw new Refusal(
      'io_error',
      `fetch-peer-file is disabled: ${problem}, so a peer could end this process in the middle of a fetch; install the undici version this package's lockfile names`,
    );
  }
}

/** The caller's limits, checked: a bad one is the caller's mistake (a TypeError), never traced. */
function fetchLimits(session: Session, opts: FetchPeerFileOptions): FetchLimits {
  const maxBytes = opts.maxBytes ?? session.fetchMaxBytes;
  assertLimits({ maxBytes, connectTimeoutMs: opts.connectTimeoutMs, totalTimeoutMs: opts.totalTimeoutMs });
  return { maxBytes, connectTimeoutMs: opts.connectTimeoutMs, totalTimeoutMs: opts.totalTimeoutMs, ca: opts.ca };
}

/** The `peer_file_fetch` record of this attempt: a refusal or the landed file, written once. */
function fetchTrace(session: Session, peer: string, id: string) {
  const record = async (fields: { storedPath: string | null; bytes: number | null; sha256: string | null; outcome: string; reason: string | null }) => {
    try {
      await session.trace.record(peerFileFetch({ peer, handleId: id, ...fields }));
    } catch {
      throw new Refusal('io_error', 'the trace could not be written, so the fetch was not completed');
    }
  };
  return {
    /** Words the refusal (it may quote the caller's `peer`, never the token), records it, and returns it to be thrown. */
    async refused(raw: Refusal): Promise<Refusal> {
      const error = toolRefusal(raw);
      await record({ storedPath: null, bytes: null, sha256: null, outcome: error.code, reason: error.detail });
      return error;
    },
    landed: (stored: string, body: VerifiedBody) => record({ storedPath: stored, bytes: body.bytes, sha256: body.sha256, outcome: 'ok', reason: null }),
  };
}

/** The peer as a target, only if `capabilities.peer_fetch.allow` admits it: checked before any socket exists. */
function matchPeer(allow: readonly Destination[] | null, peer: string): Target {
  if (allow === null) throw new Refusal('peer_not_allowed', 'this capsule declares no capabilities.peer_fetch block, so it fetches from no peer');
  let target: Target;
  try {
    target = targetFromPeer(peer);
  } catch (error) {
    throw new Refusal('peer_not_allowed', (error as Error).message);
  }
  if (!destinationMatches(allow, target)) {
    throw new Refusal('peer_not_allowed', `capabilities.peer_fetch.allow does not include the peer ${notAllowedDetail(allow, target, peer)}`);
  }
  return target;
}

/**
 * The handle, split and decoded once. A token travels as one path segment: anything not shaped
 * like one could carry `/`, `?` or `..` into the request line and address something else on the
 * peer, so it is refused here.
 */
function parseHandle(token: string, id: string): PeerHandle {
  const read = readUnverified(token);
  if (read === null) throw new Refusal('malformed_handle', 'the handle is not a well-formed mh1 token');
  return { token, issuer: read.payload?.iss ?? null, stored: storedPathFor(id, read.payload?.p ?? null) };
}

/** The audience this capsule asserts is its own identity; a session that serves nothing has none. */
function assertedAudience(session: Session): string {
  if (session.advertisedUrl === null) throw new Refusal('io_error', 'this session has no advertised URL, so it has no audience to assert');
  return ownAudience(session.manifest.name, session.advertisedUrl);
}

/**
 * A handle is a bearer token: it goes only to the peer that issued it. The card is read first (no
 * token travels with it) and must name the session in the handle's unverified `iss`, so a
 * prompt-injected "fetch A's handle from B" never hands A's token to B. A peer that lies on its
 * card defeats this; the README's security model says what would close that.
 */
async function checkIssuer(target: Target, handle: PeerHandle, peer: string, limits: FetchLimits): Promise<void> {
  let card: unknown;
  try {
    card = await fetchCard(target, { connectTimeoutMs: limits.connectTimeoutMs, totalTimeoutMs: limits.totalTimeoutMs, ca: limits.ca });
  } catch (error) {
    const why = error instanceof PeerHttpError ? error.message : 'the request failed';
    throw new Refusal('peer_unreachable', `the agent card of '${peer}' could not be fetched, so the handle was not sent: ${why}`);
  }
  if (handle.issuer === null || sessionIdFromCard(card, CAPSULE_EXTENSION_URI) !== handle.issuer) {
    throw new Refusal('issuer_mismatch', `the agent card of '${peer}' does not name the session that issued the handle, so the handle was not sent`);
  }
}

/** The redeem: the token in the request line, this capsule's audience asserted, under the limits. */
async function redeem(target: Target, handle: PeerHandle, audience: string, peer: string, limits: FetchLimits): Promise<PeerResponse> {
  try {
    return await getStream(target, `${PEER_PREFIX}/${handle.token}`, {
      connectTimeoutMs: limits.connectTimeoutMs ?? FETCH_CONNECT_TIMEOUT_MS,
      totalTimeoutMs: limits.totalTimeoutMs ?? FETCH_TOTAL_TIMEOUT_MS,
      maxBytes: limits.maxBytes,
      headers: { [HEADER.audience]: audience },
      ...(limits.ca !== undefined ? { ca: limits.ca } : {}),
    });
  } catch (error) {
    throw transportRefusal(error, peer, limits.maxBytes);
  }
}

/** The answer judged on its status and headers alone, before a byte of the body is read or written. */
async function judgeAnswer(response: PeerResponse, maxBytes: number): Promise<Answer> {
  const generation = generationOf(response);
  if (response.status !== 200) {
    const code = await peerCode(response);
    throw new Refusal(code, `the peer refused the redeem: ${code} (HTTP ${response.status})`);
  }
  const sha256 = parseEtag(response.header('etag'));
  if (sha256 === null) throw new Refusal('etag_mismatch', `the peer's etag is not "sha256:<hex>", so the bytes cannot be checked; nothing was stored`);
  if (response.contentLength !== null && response.contentLength > maxBytes) throw tooLarge(maxBytes);
  return { sha256, generation };
}

/**
 * The body streamed into an exclusive temporary file in the inbox while it is hashed, and renamed
 * into place only when the etag names exactly those bytes. Commit fsyncs the file, renames it over
 * the final name (never through a link there) and fsyncs the inbox, so a crash leaves a temporary
 * file or the whole file, never a torn one.
 */
async function verifyAndLand(session: Session, held: Held, handle: PeerHandle, answer: Answer, peer: string, maxBytes: number): Promise<VerifiedBody> {
  const landing = (held.landing = await openLanding(session));
  let body: VerifiedBody;
  try {
    body = await readVerifiedBody(held.response!.chunks(maxBytes), { sha256: answer.sha256, maxBytes, sink: (chunk) => landing.write(chunk) });
  } catch (error) {
    throw bodyRefusal(error, peer, maxBytes);
  }
  try {
    await landing.commit(handle.stored.slice(PEER_INBOX_DIR.length + 1));
  } catch (error) {
    throw new Refusal('io_error', `the fetched file could not be landed: ${nativeDetail(error, 'internal error')}`);
  }
  held.committed = true;
  return body;
}

/** A landing in the inbox (the addon refuses a `peer-in` that is a symlink or not a directory). */
async function openLanding(session: Session): Promise<Landing> {
  try {
    return await Landing.open(session.workdirDescriptor, PEER_INBOX_DIR);
  } catch (error) {
    const unsafe = error instanceof native.NativeError && error.code === 'UNSAFE_INBOX';
    throw new Refusal(
      'io_error',
      unsafe
        ? `the inbox '${PEER_INBOX_DIR}' is a symlink or not a directory, so nothing was written`
        : `the inbox '${PEER_INBOX_DIR}' could not be written: ${nativeDetail(error, 'internal error')}`,
    );
  }
}

// ── Reading what the peer said ───────────────────────────────────────────────

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
  const value = response.header(HEADER.generation);
  return value !== null && /^[0-9]{1,15}$/.test(value) ? Number(value) : null;
}

/** A native error's detail (never a path), else `fallback`. */
function nativeDetail(error: unknown, fallback: string): string {
  return error instanceof native.NativeError ? error.detail || error.code : fallback;
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
    case 'sink':
      return new Refusal('io_error', `the fetched file could not be written (${nativeDetail(error.cause, 'write failed')})`);
    case 'too_large':
      return tooLarge(maxBytes);
    default:
      // `stream`: the transport's own failure (a cut connection, a timeout, the cap passed
      // mid-stream). No content-length is held to here (undici frames by it), so never `short`.
      return transportRefusal(error.cause, peer, maxBytes);
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
