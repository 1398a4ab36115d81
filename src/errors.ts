// The one error catalogue of both planes: wire code → status → message, and the mapping from
// every native code to a wire code. The README's error table is checked against this file by a
// test, in both directions, so neither can drift.
import { NativeError, type NativeCode } from './native.js';

export type Plane = 'files' | 'peer';

export type WireCode =
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
  | 'io_error';

interface CatalogueRow {
  status: number;
  /** Message per plane; `{max_bytes}` and `{detail}` are filled in. Absent: not a code of that plane. */
  files?: string;
  peer?: string;
}

export const CATALOGUE: Readonly<Record<WireCode, CatalogueRow>> = Object.freeze({
  no_resource_plane: {
    status: 404,
    files: 'this capsule declares no exports.files block, so it has no resource plane',
  },
  no_peer_plane: {
    status: 404,
    peer: 'this capsule declares no exports.peer_files block, so it has no peer plane',
  },
  not_found: {
    status: 404,
    files: 'no such file under the export root',
    peer: 'no such file under the peer export root',
  },
  outside_root: {
    status: 403,
    files: 'the requested path resolves outside the export root',
    peer: 'the handle names a path outside the peer export root',
  },
  symlink_refused: {
    status: 403,
    files: 'a symlink was encountered and the achieved containment class is scoped',
    peer: 'a symlink was encountered and the achieved containment class is scoped',
  },
  not_a_regular_file: {
    status: 403,
    files: 'the requested path is not a regular file',
    peer: 'the handle does not name a regular file',
  },
  too_large: {
    status: 413,
    files: 'file exceeds the declared exports.files.max_bytes of {max_bytes} bytes',
    peer: 'file exceeds the declared exports.peer_files.max_bytes of {max_bytes} bytes',
  },
  method_not_allowed: {
    status: 405,
    files: 'the resource plane serves GET only; it has no write path',
    peer: 'the peer plane serves GET only; it has no write path and no list verb',
  },
  malformed_handle: { status: 400, peer: 'the handle is not a well-formed mh1 token' },
  missing_audience: {
    status: 400,
    peer: 'a redeem must assert its audience in the x-murmur-audience header',
  },
  // One fixed string with nothing interpolated: three different causes must be byte-identical.
  handle_not_valid: { status: 403, peer: 'the handle is not valid for this capsule' },
  handle_expired: { status: 410, peer: 'the handle has expired' },
  io_error: { status: 500, files: 'read failed: {detail}', peer: 'read failed: {detail}' },
});

/** How each native code reads on the wire. UNSAFE_INBOX only arises when landing a fetch. */
export const NATIVE_TO_WIRE: Readonly<Record<NativeCode, WireCode>> = Object.freeze({
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
  IO_ERROR: 'io_error',
});

/** A refusal in the wire vocabulary: what the body says and what the trace records. */
export class PlaneError extends Error {
  readonly code: WireCode;
  readonly status: number;
  readonly plane: Plane;
  constructor(plane: Plane, code: WireCode, params: { maxBytes?: number; detail?: string } = {}) {
    super(messageFor(plane, code, params));
    this.name = 'PlaneError';
    this.plane = plane;
    this.code = code;
    this.status = CATALOGUE[code].status;
  }

  body(): Buffer {
    return Buffer.from(JSON.stringify({ error: this.code, message: this.message }));
  }
}

export function messageFor(plane: Plane, code: WireCode, params: { maxBytes?: number; detail?: string } = {}): string {
  const row = CATALOGUE[code];
  const template = row[plane] ?? row.files ?? row.peer ?? code;
  return template
    .replace('{max_bytes}', String(params.maxBytes ?? 0))
    .replace('{detail}', params.detail || 'unknown error');
}

/**
 * Any failure of a native call, as a PlaneError. Anything that is not a NativeError is an
 * io_error: an unexpected exception fails closed and its text (which could carry a host path) is
 * not echoed.
 */
export function fromNative(plane: Plane, error: unknown, maxBytes: number): PlaneError {
  if (error instanceof NativeError) {
    const code = NATIVE_TO_WIRE[error.code] ?? 'io_error';
    return new PlaneError(plane, code, { maxBytes, detail: error.detail || error.code.toLowerCase() });
  }
  return new PlaneError(plane, 'io_error', { detail: 'internal error' });
}

/**
 * A refusal by one of the agent-loop tools (share-file, fetch-peer-file): a stable code, which is
 * also the trace's outcome, and a message that carries no host path and no secret.
 */
export class ToolError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = 'ToolError';
    this.code = code;
  }
}
