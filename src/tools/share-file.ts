// The `share-file` tool (SPEC section 6): mints one handle for one file under
// `exports.peer_files.root`, for one peer. The path is judged by the same ExportView that serves a
// redeem (an escape of any kind is a refusal, never normalised), the peer's agent card is fetched
// only once `capabilities.network.allow` admits it, the audience is read off that card, and the
// lifetime may only narrow the declared ceiling. Every attempt, minted or refused, lands in the
// trace as `peer_handle_mint` before the caller hears the outcome. Refusals are a Refusal
// (src/codes.ts) whose detail is the sentence the agent reads.
import { Refusal, type Code } from '../codes.js';
import { audienceFromCard } from '../handle/audience.js';
import { mintToken, PAYLOAD_VERSION, randomNonceHex } from '../handle/token.js';
import { destinationMatches, notAllowedDetail, targetFromPeer, type Target } from '../manifest/destinations.js';
import { parseDuration } from '../manifest/grammars.js';
import { handleId } from '../redact.js';
import { peerHandleMint } from '../trace/events.js';
import type { Session } from '../session/session.js';
import { fetchCard } from './peer-card.js';
import { assertLimits, PeerHttpError } from './peer-http.js';
import { toolRefusal } from './refusal.js';

/**
 * A tool refusal: a stable `code` (the trace's `outcome`) and a sentence for the agent. Messages
 * are built from fixed text, declared names (`exports.peer_files.root`), the peer address the
 * caller gave and error codes: never a host path, a token, a key, or text a peer chose.
 */

export interface ShareFileInput {
  /** Relative to `exports.peer_files.root`; lowered as text (percent-decoded once, never normalised). */
  path: string;
  /** The peer capsule: `host:port` (spoken over http) or an http(s) URL. */
  peer: string;
  /** Optional lifetime: seconds as an integer (`90`) or a duration (`'30s'`, `'5m'`...); clamped down to the declared max_ttl. */
  ttl?: string | number;
}

export interface ShareFileResult {
  handle: string;
  handle_id: string;
  expires_at_ms: number;
  audience: string;
}

export interface ShareFileOptions {
  connectTimeoutMs?: number;
  totalTimeoutMs?: number;
  /** Trusted CAs for an https peer instead of the system store. */
  ca?: string | Buffer | Array<string | Buffer>;
}

const ROOT = 'exports.peer_files.root';

/** The agent's view of a resolver refusal: what went wrong, in terms of the declared root. */
const PATH_MESSAGES: Partial<Record<Code, string>> = {
  outside_root: `the path is not a file beneath ${ROOT}: escapes, absolute paths, empty, '.' or '..' components and symlinks leaving the root are refused, never normalised`,
  not_found: `no such file under ${ROOT}`,
  not_a_regular_file: `the path does not name a regular file under ${ROOT}; only a regular file can be shared`,
  symlink_refused: `a symlink was encountered under ${ROOT} and the achieved containment class is scoped`,
};

function pathRefusal(error: unknown): Refusal {
  if (error instanceof Refusal) {
    const known = PATH_MESSAGES[error.code as Code];
    if (known !== undefined) return new Refusal(error.code, known);
    // io_error: the native detail is errno text ("permission denied"), never a path.
    const detail = error.code === 'io_error' ? (error.detail ?? 'unknown error') : error.code;
    return new Refusal('io_error', `the file under ${ROOT} could not be checked: ${detail}`);
  }
  return new Refusal('io_error', `the file under ${ROOT} could not be checked: internal error`);
}

/**
 * Mints a handle for `input.path`, bound to the audience on `input.peer`'s agent card. `input` is
 * typed: callTool has checked it against the schema, a direct caller's compiler against the type.
 * Resolves with the handle only after its `peer_handle_mint` event is written; throws a Refusal
 * otherwise (a trace that cannot be written fails the mint as `io_error`).
 */
export async function shareFile(session: Session, input: ShareFileInput, opts: ShareFileOptions = {}): Promise<ShareFileResult> {
  assertLimits({ connectTimeoutMs: opts.connectTimeoutMs, totalTimeoutMs: opts.totalTimeoutMs });
  // Empty until the card has been read and yielded one: the trace says which refusals got that far.
  let audience = '';

  const record = async (fields: { handle_id: string | null; path: string; expires_at_ms: number | null; outcome: string; reason: string | null }) => {
    try {
      await session.trace.record(
        peerHandleMint({
          handleId: fields.handle_id,
          path: fields.path,
          audience,
          expiresAtMs: fields.expires_at_ms,
          outcome: fields.outcome,
          reason: fields.reason,
        }),
      );
    } catch {
      throw new Refusal('io_error', 'the trace could not be written, so nothing was minted');
    }
  };
  const refuse = async (raw: Refusal): Promise<never> => {
    // Worded (and redacted: messages quote the caller's `peer` and `path`) before it is traced.
    const error = toolRefusal(raw);
    await record({ handle_id: null, path: input.path, expires_at_ms: null, outcome: error.code, reason: error.detail });
    throw error;
  };

  const declared = session.manifest.peerFiles;
  const view = session.peerFiles;
  const key = session.key;
  if (!declared || !view || !key) {
    return refuse(new Refusal('no_peer_plane', 'this capsule declares no exports.peer_files block, so it has no peer plane'));
  }

  // Arguments first (typed already: callTool validated them against the schema): pure checks, so
  // a bad call costs neither a filesystem nor a network access.
  let relpath: string;
  try {
    relpath = view.lower(input.path, 'text');
  } catch (error) {
    return refuse(pathRefusal(error));
  }

  let requestedTtl: number | null = null;
  if (input.ttl !== undefined) {
    // A number is seconds; a non-integer or a negative one is refused like a malformed string.
    const parsed = typeof input.ttl === 'number' ? (Number.isSafeInteger(input.ttl) && input.ttl > 0 ? input.ttl : null) : parseDuration(input.ttl);
    if (parsed === null) {
      return refuse(new Refusal('invalid_ttl'));
    }
    requestedTtl = parsed;
  }

  let target: Target;
  try {
    target = targetFromPeer(input.peer);
  } catch (error) {
    return refuse(new Refusal('peer_unreachable', (error as Error).message));
  }

  // Resolved beneath the root but not yet known to be servable: a directory or a FIFO would mint
  // a handle that can only ever be refused. Size is left to the redeem, which reads the file.
  try {
    await view.stat(relpath);
  } catch (error) {
    return refuse(pathRefusal(error));
  }

  // The card fetch is an outbound request like any other: it needs the network allow list, and
  // the check happens before a socket exists, so a refused peer sees nothing.
  if (!destinationMatches(session.manifest.networkAllow, target)) {
    // Refused, not unreachable: nothing was tried, and the fix is in the manifest or the peer's name.
    return refuse(
      new Refusal(
        'peer_not_allowed',
        `capabilities.network.allow does not include the peer ${notAllowedDetail(session.manifest.networkAllow, target, input.peer)}, so its agent card cannot be fetched`,
      ),
    );
  }
  let card: unknown;
  try {
    card = await fetchCard(target, opts);
  } catch (error) {
    const why = error instanceof PeerHttpError ? error.message : 'the request failed';
    return refuse(new Refusal('peer_unreachable', `the agent card of '${input.peer}' could not be fetched: ${why}`));
  }
  try {
    audience = audienceFromCard(card);
  } catch (error) {
    // audienceFromCard's messages are fixed sentences naming what the card lacks.
    return refuse(new Refusal('peer_unreachable', (error as Error).message));
  }

  // A ttl may only narrow: above the ceiling it is clamped down, absent it is the ceiling.
  const ceiling = declared.effectiveMaxTtlSecs;
  const ttlSecs = Math.min(requestedTtl ?? ceiling, ceiling);
  let token: string;
  let expiresAtMs: number;
  try {
    expiresAtMs = session.now() + ttlSecs * 1000;
    token = mintToken(key, { v: PAYLOAD_VERSION, iss: session.sessionId, p: relpath, exp: expiresAtMs, n: randomNonceHex() }, audience);
  } catch {
    // A destroyed key (the session closed under us) or a failed RNG: nothing to hand out.
    return refuse(new Refusal('io_error', 'the handle could not be minted: the instance key is unavailable'));
  }
  const id = handleId(token);
  await record({ handle_id: id, path: relpath, expires_at_ms: expiresAtMs, outcome: 'ok', reason: null });
  return { handle: token, handle_id: id, expires_at_ms: expiresAtMs, audience };
}
