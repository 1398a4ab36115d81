// The one catalogue of every code a client or a runtime can receive: the planes' codes (SPEC
// sections 4 and 6), the server's own answers, and the tools' refusals. Each has its HTTP status
// where it has one and its message in each context it can arise in. Failures flow one way: native
// code → a neutral Refusal (code + detail) → rendered at the edge, as an HTTP reply (http/) or a
// tool result (tools/). Nothing is parsed back out of text. The README's error table is checked
// against this file by a test, in both directions.
import type { NativeCode } from './addon/export.js';

/** Where a code is rendered: the operator plane, the peer plane, the server itself, a tool. */
export type Context = 'files' | 'peer' | 'server' | 'tool';

export type PlaneCode =
  | 'no_resource_plane'
  | 'no_peer_plane'
  | 'not_found'
  | 'outside_root'
  | 'symlink_refused'
  | 'not_a_regular_file'
  | 'too_large'
  | 'method_not_allowed'
  | 'malformed_handle'
  | 'missing_audience'
  | 'handle_not_valid'
  | 'handle_expired'
  | 'over_capacity'
  | 'io_error';

/** The server's own answers, outside either plane's vocabulary. */
export type ServerCode = 'bad_request' | 'shutting_down';

/** Refusals only the tools (share-file, fetch-peer-file) give. */
export type ToolCode = 'invalid_argument' | 'invalid_ttl' | 'unknown_tool' | 'peer_not_allowed' | 'peer_unreachable' | 'issuer_mismatch' | 'etag_mismatch';

export type Code = PlaneCode | ServerCode | ToolCode;

/**
 * fetch-peer-file's outcome when a peer refused without naming a catalogued peer-plane code: its
 * HTTP status. A peer can only ever make us report a code from this catalogue, or this.
 */
export type PeerStatusCode = `http_${number}`;

export interface CatalogueRow {
  /** The HTTP status; null for a code that is only ever a tool result. */
  status: number | null;
  /**
   * The message in each context the code arises in; `{max_bytes}` and `{detail}` are filled in.
   * For a tool the text is the default: a tool refusal usually carries a sentence of its own.
   */
  messages: Readonly<Partial<Record<Context, string>>>;
  /**
   * The other statuses this code is answered with, by the cause that picks each, with its reason
   * phrase (RFC 9110): admission knows more than "bad request" about some requests.
   */
  statuses?: Readonly<Record<string, { status: number; reason: string }>>;
}

const SCOPED = 'a symlink was encountered and the achieved containment class is scoped';

/** The statuses admission answers bad_request with when it knows why, with their reason phrases. */
export const BAD_REQUEST_STATUSES = Object.freeze({
  /** The header block is larger than LIMITS.maxHeaderBytes. */
  header_overflow: { status: 431, reason: 'Request Header Fields Too Large' },
  /** The headers or the whole request did not arrive in time. */
  timeout: { status: 408, reason: 'Request Timeout' },
  /** An Expect other than 100-continue. */
  expectation: { status: 417, reason: 'Expectation Failed' },
});

export const CATALOGUE: Readonly<Record<Code, CatalogueRow>> = Object.freeze({
  no_resource_plane: {
    status: 404,
    messages: { files: 'this capsule declares no exports.files block, so it has no resource plane' },
  },
  no_peer_plane: {
    status: 404,
    messages: {
      peer: 'this capsule declares no exports.peer_files block, so it has no peer plane',
      tool: 'this capsule declares no exports.peer_files block, so it has no peer plane',
    },
  },
  not_found: {
    status: 404,
    messages: {
      files: 'no such file under the export root',
      peer: 'no such file under the peer export root',
      server: 'no such route',
      tool: 'no such file under exports.peer_files.root',
    },
  },
  outside_root: {
    status: 403,
    messages: {
      files: 'the requested path resolves outside the export root',
      peer: 'the handle names a path outside the peer export root',
      tool: 'the path is not a file beneath exports.peer_files.root',
    },
  },
  symlink_refused: {
    status: 403,
    messages: { files: SCOPED, peer: SCOPED, tool: SCOPED },
  },
  not_a_regular_file: {
    status: 403,
    messages: {
      files: 'the requested path is not a regular file',
      peer: 'the handle does not name a regular file',
      tool: 'the path does not name a regular file under exports.peer_files.root',
    },
  },
  too_large: {
    status: 413,
    messages: {
      files: 'file exceeds the declared exports.files.max_bytes of {max_bytes} bytes',
      peer: 'file exceeds the declared exports.peer_files.max_bytes of {max_bytes} bytes',
      tool: "the peer's file exceeds the fetch limit; nothing was stored",
    },
  },
  method_not_allowed: {
    status: 405,
    messages: {
      files: 'the resource plane serves GET only; it has no write path',
      peer: 'the peer plane serves GET only; it has no write path and no list verb',
    },
  },
  malformed_handle: {
    status: 400,
    messages: { peer: 'the handle is not a well-formed mh1 token', tool: 'the handle is not a well-formed mh1 token' },
  },
  missing_audience: {
    status: 400,
    messages: { peer: 'a redeem must assert its audience in the x-murmur-audience header' },
  },
  // One fixed string with nothing interpolated: three different causes must be byte-identical.
  handle_not_valid: { status: 403, messages: { peer: 'the handle is not valid for this capsule' } },
  handle_expired: { status: 410, messages: { peer: 'the handle has expired' } },
  io_error: {
    status: 500,
    messages: {
      files: 'read failed: {detail}',
      peer: 'read failed: {detail}',
      server: 'read failed: {detail}',
      tool: 'the operation failed: {detail}',
    },
  },
  bad_request: {
    status: 400,
    messages: { server: 'the request could not be parsed' },
    statuses: BAD_REQUEST_STATUSES,
  },
  shutting_down: { status: 503, messages: { server: 'the capsule is shutting down' } },
  over_capacity: {
    status: 503,
    messages: {
      files: 'the server is at capacity for reads and listings in flight; retry after the retry-after delay',
      peer: 'the server is at capacity for reads and listings in flight; retry after the retry-after delay',
    },
  },
  invalid_argument: { status: null, messages: { tool: 'the arguments do not match the tool input schema' } },
  invalid_ttl: {
    status: null,
    messages: { tool: "'ttl' must be a duration greater than zero: an integer, optionally suffixed s/m/h/d (e.g. 90, 30s, 5m)" },
  },
  unknown_tool: { status: null, messages: { tool: 'no tool of that name exists here' } },
  peer_not_allowed: {
    status: null,
    messages: { tool: 'the allow list does not include the peer (capabilities.peer_fetch.allow; for share-file, capabilities.network.allow)' },
  },
  peer_unreachable: { status: null, messages: { tool: 'the peer could not be reached' } },
  issuer_mismatch: {
    status: null,
    messages: { tool: "the peer's agent card does not name the session that issued the handle, so the handle was not sent" },
  },
  etag_mismatch: { status: null, messages: { tool: "the body's sha256 does not match the peer's etag; nothing was stored" } },
});

export const CODES: readonly Code[] = Object.freeze(Object.keys(CATALOGUE) as Code[]);

export function isCode(value: unknown): value is Code {
  return typeof value === 'string' && Object.hasOwn(CATALOGUE, value);
}

/** The codes a peer plane can answer with: the only ones fetch-peer-file repeats from a peer. */
export function isPeerPlaneCode(value: unknown): value is PlaneCode {
  return isCode(value) && CATALOGUE[value].messages.peer !== undefined;
}

/** How each native code reads in the catalogue. UNSAFE_INBOX only arises when landing a fetch. */
export const NATIVE_TO_CODE: Readonly<Record<NativeCode, PlaneCode>> = Object.freeze({
  NOT_FOUND: 'not_found',
  OUTSIDE_ROOT: 'outside_root',
  SYMLINK_REFUSED: 'symlink_refused',
  NOT_A_REGULAR_FILE: 'not_a_regular_file',
  TOO_LARGE: 'too_large',
  UNSAFE_INBOX: 'io_error',
  // A listing or read stopped early; the native detail says which ("the listing was cancelled",
  // "the listing exceeded its time budget of N ms") and becomes the io_error message.
  CANCELLED: 'io_error',
  TIME_BUDGET: 'io_error',
  // Only a stream's chunk rejects with it, after the headers: never rendered, the connection is reset.
  FILE_CHANGED: 'io_error',
  IO_ERROR: 'io_error',
});

/**
 * A refusal, neutral about where it will be rendered: a catalogued code and a detail. On a plane
 * the detail fills the message's `{detail}` (errno text, never a path); a tool's detail is the
 * whole sentence the caller reads. Details never carry a host path, a token or a key.
 */
export class Refusal extends Error {
  readonly code: Code | PeerStatusCode;
  readonly detail: string | null;
  constructor(code: Code | PeerStatusCode, detail: string | null = null) {
    super(detail ?? code);
    this.name = 'Refusal';
    this.code = code;
    this.detail = detail;
  }
}

/**
 * Anything caught at an edge, as a Refusal: a Refusal as it is, anything else an io_error whose
 * own text (it may hold a host path, or a token) is never passed on. The one place an unexpected
 * error becomes io_error.
 */
export function asRefusal(error: unknown, detail = 'internal error'): Refusal {
  return error instanceof Refusal ? error : new Refusal('io_error', detail);
}

export interface RenderParams {
  maxBytes?: number;
}

/** The message a code carries in `context`, parameters filled in. */
export function messageFor(context: Context, code: Code, detail: string | null = null, params: RenderParams = {}): string {
  const m = CATALOGUE[code].messages;
  const template = m[context] ?? m.files ?? m.peer ?? m.server ?? m.tool ?? code;
  return template.replace('{max_bytes}', String(params.maxBytes ?? 0)).replace('{detail}', detail || 'unknown error');
}

/** An HTTP rendering: status and the spec's JSON error body. */
export interface Rendered {
  code: Code;
  status: number;
  message: string;
  body: Buffer;
}

export function renderHttp(context: Exclude<Context, 'tool'>, refusal: Refusal, params: RenderParams = {}): Rendered {
  // Tool-only codes never reach an HTTP edge; if one did, it would fail closed as io_error.
  const code: Code = isCode(refusal.code) && CATALOGUE[refusal.code].status !== null ? refusal.code : 'io_error';
  const detail = code === refusal.code ? refusal.detail : 'internal error';
  const message = messageFor(context, code, detail, params);
  return { code, status: CATALOGUE[code].status!, message, body: Buffer.from(JSON.stringify({ error: code, message })) };
}

/** A tool rendering: the code (also the trace's outcome) and the sentence for the agent. */
export function renderTool(refusal: Refusal): { code: string; message: string } {
  if (refusal.detail !== null) return { code: refusal.code, message: refusal.detail };
  return { code: refusal.code, message: isCode(refusal.code) ? messageFor('tool', refusal.code) : refusal.code };
}

/** A command-line mistake (a bad option value): exit status 2, one line on stderr. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}
