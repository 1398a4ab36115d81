/**
 * The audience string a peer handle is bound to: `<name>@<host:port>`, lowercased.
 *
 * Both sides compute it without exchanging it. The minter derives it from the card it fetched
 * from the peer; the fetcher asserts it from the two fields of its own identity that its card
 * publishes. This file owns that derivation, so that the two computations are one function and
 * cannot drift apart.
 */

const NO_NAME = "the peer's agent card carries no 'name'";
const NO_JSONRPC_URL = "the peer's agent card has no 'supportedInterfaces' entry " + "with 'protocolBinding' JSONRPC and a 'url'";

/**
 * Unicode `White_Space`, the set Rust's `str::trim` strips: the reference's audience is trimmed
 * with it. JavaScript's `trim` differs on two code points (it keeps U+0085 NEXT LINE and strips
 * U+FEFF, which is not white space), so the same card would give two audiences and no MAC would
 * ever verify between a Rust capsule and this server.
 */
const WHITE_SPACE = '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const EDGE_WHITE_SPACE = new RegExp(`^[${WHITE_SPACE}]+|[${WHITE_SPACE}]+$`, 'g');

/** `text` without leading and trailing Unicode White_Space: exactly Rust's `str::trim`. */
export function trimWhiteSpace(text: string): string {
  return text.replace(EDGE_WHITE_SPACE, '');
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `host:port` out of a URL or a bare address: the scheme stripped, then cut at the first `/`. */
function hostPort(url: string): string {
  const trimmed = trimWhiteSpace(url);
  const schemeEnd = trimmed.indexOf('://');
  const rest = schemeEnd === -1 ? trimmed : trimmed.slice(schemeEnd + 3);
  const slash = rest.indexOf('/');
  return slash === -1 ? rest : rest.slice(0, slash);
}

/**
 * The `url` of the card's first `supportedInterfaces` entry whose `protocolBinding` is
 * `JSONRPC`, or null. Only the first such entry counts: it is the one the peer serves on.
 */
function jsonRpcUrl(card: Record<string, unknown>): string | null {
  const interfaces = card.supportedInterfaces;
  if (!Array.isArray(interfaces)) return null;
  const entry: unknown = interfaces.find((candidate: unknown) => isRecord(candidate) && candidate.protocolBinding === 'JSONRPC');
  if (!isRecord(entry)) return null;
  const url = entry.url;
  return typeof url === 'string' ? url : null;
}

function audienceOf(name: string, url: string): string {
  return `${trimWhiteSpace(name)}@${hostPort(url)}`.toLowerCase();
}

/**
 * The audience a handle for this peer is minted for, read off the peer's own agent card.
 * Throws, naming what is missing, when the card has no usable name or JSONRPC url.
 */
export function audienceFromCard(card: unknown): string {
  if (!isRecord(card)) throw new Error(NO_NAME);
  const name = card.name;
  if (typeof name !== 'string' || trimWhiteSpace(name) === '') throw new Error(NO_NAME);
  const url = jsonRpcUrl(card);
  // A url that is blank, or only a scheme, names no host a peer could be reached at.
  if (url === null || hostPort(url) === '') throw new Error(NO_JSONRPC_URL);
  return audienceOf(name, url);
}

/**
 * This capsule's own audience, asserted on every redeem it issues: the string a peer derives
 * from the card this capsule publishes with `name` and `advertisedUrl`.
 */
export function ownAudience(name: string, advertisedUrl: string): string {
  return audienceOf(name, advertisedUrl);
}

/**
 * The session id a peer's card publishes (the capsule extension's `params.sessionId`), or null.
 * A handle's `iss` names the session that minted it: fetch-peer-file sends a token only to a peer
 * whose card names that session.
 */
export function sessionIdFromCard(card: unknown, extensionUri: string): string | null {
  if (!isRecord(card)) return null;
  const capabilities = card.capabilities;
  if (!isRecord(capabilities) || !Array.isArray(capabilities.extensions)) return null;
  const extension: unknown = capabilities.extensions.find((e: unknown) => isRecord(e) && e.uri === extensionUri);
  if (!isRecord(extension) || !isRecord(extension.params)) return null;
  const id = extension.params.sessionId;
  return typeof id === 'string' ? id : null;
}
