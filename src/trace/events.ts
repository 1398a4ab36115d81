// The trace's catalogue: every event type, the fields its line carries after the common ones (in
// that order), and one typed builder per type. Nothing else shapes an event: the planes, the tools
// and the session call these, and test/audits/trace-catalogue.test.ts checks EVENT_FIELDS against
// docs/trace.md both ways (as codes.ts is checked against the README).
/** A line's fields after the common ones. */
export type TraceFields = Record<string, unknown>;

export const EVENT_FIELDS = Object.freeze({
  session_start: ['containment_achieved', 'resolver', 'tools_declared', 'capsule', 'confinement', 'effective_grants'],
  resource_list: ['root', 'entry_count', 'total_bytes', 'generation', 'containment_achieved', 'outcome', 'reason'],
  resource_read: ['path', 'outcome', 'bytes', 'sha256', 'generation', 'containment_achieved', 'reason'],
  peer_handle_mint: ['handle_id', 'path', 'audience', 'expires_at_ms', 'outcome', 'reason'],
  peer_handle_redeem: ['handle_id', 'path', 'generation', 'audience_asserted', 'bytes', 'sha256', 'outcome', 'reason'],
  peer_file_fetch: ['peer', 'handle_id', 'stored_path', 'bytes', 'sha256', 'outcome', 'reason'],
  // path: reads and redeems; handle_id: redeems only (null where the event followed names none).
  response_undelivered: ['of', 'path', 'handle_id', 'bytes', 'generation', 'outcome', 'reason'],
  refusals_suppressed: ['client', 'suppressed', 'since_ms', 'clients'],
  session_end: ['reason', 'counts'],
} as const);

export type EventType = keyof typeof EVENT_FIELDS;
/** The events a response follows up with `response_undelivered` when its body did not all leave. */
export type BodyEventType = 'resource_list' | 'resource_read' | 'peer_handle_redeem';

/** One line's worth: its type and its fields in the catalogue's order. */
export interface TraceEvent<T extends EventType = EventType> {
  readonly type: T;
  readonly fields: TraceFields;
}

/** How a decision ended: `ok`, `not_modified`, a catalogue code; `reason` the message sent with it. */
export interface Outcome {
  outcome: string;
  reason: string | null;
}

function event<T extends EventType>(type: T, values: Partial<Record<(typeof EVENT_FIELDS)[T][number], unknown>>): TraceEvent<T> {
  const fields: TraceFields = {};
  const given = values as Record<string, unknown>;
  for (const name of EVENT_FIELDS[type]) fields[name] = given[name] ?? null;
  return { type, fields };
}

export function sessionStart(f: {
  containment: string;
  resolver: string;
  toolsDeclared: unknown;
  capsule: string | null;
  confinement: unknown;
  effectiveGrants: unknown;
}): TraceEvent<'session_start'> {
  // effective_grants last on the line: explain-scope --json is this object byte for byte, read to the line's end.
  return event('session_start', {
    containment_achieved: f.containment,
    resolver: f.resolver,
    tools_declared: f.toolsDeclared,
    // The manifest's name: what `records` shows beside the session id.
    capsule: f.capsule,
    confinement: f.confinement,
    effective_grants: f.effectiveGrants,
  });
}

export function resourceList(
  f: Outcome & { root: string; entryCount: number | null; totalBytes: number | null; generation: number; containment: string },
): TraceEvent<'resource_list'> {
  return event('resource_list', {
    root: f.root,
    entry_count: f.entryCount,
    total_bytes: f.totalBytes,
    generation: f.generation,
    containment_achieved: f.containment,
    outcome: f.outcome,
    reason: f.reason,
  });
}

export function resourceRead(
  f: Outcome & { path: string; bytes: number | null; sha256: string | null; generation: number; containment: string },
): TraceEvent<'resource_read'> {
  return event('resource_read', {
    path: f.path,
    outcome: f.outcome,
    bytes: f.bytes,
    sha256: f.sha256,
    generation: f.generation,
    containment_achieved: f.containment,
    reason: f.reason,
  });
}

/** `path`: the verified payload's path, null until the MAC verified (caller-controlled before that). */
export function peerHandleRedeem(
  f: Outcome & { handleId: string; path: string | null; generation: number; audienceAsserted: string | null; bytes: number | null; sha256: string | null },
): TraceEvent<'peer_handle_redeem'> {
  return event('peer_handle_redeem', {
    handle_id: f.handleId,
    path: f.path,
    generation: f.generation,
    audience_asserted: f.audienceAsserted,
    bytes: f.bytes,
    sha256: f.sha256,
    outcome: f.outcome,
    reason: f.reason,
  });
}

export function peerHandleMint(
  f: Outcome & { handleId: string | null; path: string | null; audience: string; expiresAtMs: number | null },
): TraceEvent<'peer_handle_mint'> {
  return event('peer_handle_mint', {
    handle_id: f.handleId,
    path: f.path,
    audience: f.audience,
    expires_at_ms: f.expiresAtMs,
    outcome: f.outcome,
    reason: f.reason,
  });
}

export function peerFileFetch(
  f: Outcome & { peer: string | null; handleId: string | null; storedPath: string | null; bytes: number | null; sha256: string | null },
): TraceEvent<'peer_file_fetch'> {
  return event('peer_file_fetch', {
    peer: f.peer,
    handle_id: f.handleId,
    stored_path: f.storedPath,
    bytes: f.bytes,
    sha256: f.sha256,
    outcome: f.outcome,
    reason: f.reason,
  });
}

/** Why a body was not delivered, when nothing more specific is known. */
export const UNDELIVERED_REASON = 'the connection closed before the whole body was sent';

/**
 * The follow-up of a body event whose response closed before all of it left: which event, and
 * what it named (its path and handle id: null where it named none), taken from that event rather
 * than restated; `bytes` is what was to be sent.
 */
export function responseUndelivered(of: TraceEvent<BodyEventType>, bytes: number, reason: string = UNDELIVERED_REASON): TraceEvent<'response_undelivered'> {
  return event('response_undelivered', {
    of: of.type,
    path: of.fields.path,
    handle_id: of.fields.handle_id,
    bytes,
    generation: of.fields.generation,
    outcome: 'undelivered',
    reason,
  });
}

export function refusalsSuppressed(f: { client: string | null; suppressed: number; sinceMs: number; clients: number }): TraceEvent<'refusals_suppressed'> {
  return event('refusals_suppressed', { client: f.client, suppressed: f.suppressed, since_ms: f.sinceMs, clients: f.clients });
}

export function sessionEnd(f: { reason: string; counts: Record<string, number> }): TraceEvent<'session_end'> {
  return event('session_end', { reason: f.reason, counts: f.counts });
}
