// Scope: what a launch grants, answered before any session exists. Owns the effective-grants
// object (the `explain-scope --json` line, recorded verbatim as `session_start.effective_grants`),
// its human rendering, and the runtime-writes table: the one declaration of every path this server
// writes inside a workdir, so that a consumer diffing the workdir can tell the capsule's changes
// from the runtime's without a hand-kept exclusion list (SPEC section 9, seeds/runtime-writes.txt).
//
// Everything here is a pure function of a parsed manifest and the achieved containment class.

import type { Manifest } from './model.js';
import type { Containment } from '../wire.js';

/** One path the server writes inside a workdir. */
export interface RuntimeWrite {
  /** Relative to the accessible workdir; carries SESSION_ID_PLACEHOLDER where a session id appears. */
  path: string;
  /** `directory` means the server owns that directory's whole subtree. */
  kind: 'file' | 'directory';
  /** Which workdir the path lands in: the accessible one a consumer diffs, or the session's own. */
  scope: 'accessible' | 'session';
  /** When the path appears, e.g. `peer-fetch`: only after a fetch-peer-file call lands a file. */
  condition: string;
}

/**
 * The literal segment a declared path carries instead of a session id. explain-scope answers before
 * a session exists, so both renderings keep the placeholder and a consumer can compare a captured
 * declaration with the trace's byte for byte; `session_start.session_id` supplies the substitution.
 */
export const SESSION_ID_PLACEHOLDER = '<session-id>';

/** Where fetch-peer-file lands fetched bytes, relative to the accessible workdir. */
export const PEER_INBOX_DIR = 'peer-in';

/**
 * Every path this server writes inside a workdir. Add a row here before adding a write; a test
 * reads the project's source and fails on any workdir write this table does not declare.
 *
 * Rows are listed whatever the manifest says. Only a `sealed` condition (host state a report has
 * already probed) may filter the set; every other condition turns on what the session does after
 * it starts, which no report can know, so the row is declared and the condition says when it
 * appears. A declaration that varied with the manifest would also be one more thing for a consumer
 * to get wrong when comparing it across capsules.
 */
export const RUNTIME_WRITES: readonly RuntimeWrite[] = Object.freeze([
  Object.freeze({ path: PEER_INBOX_DIR, kind: 'directory', scope: 'accessible', condition: 'peer-fetch' } as const),
]);

/** The `explain-scope --json` object. Key order is part of the contract (JSON.stringify keeps it). */
export interface EffectiveGrants {
  exports_files: { root: string; mode: 'read-only'; max_bytes: number } | null;
  peer_files: { root: string; max_ttl_secs: number; max_bytes: number } | null;
  /** `[]` when `capabilities.peer_fetch` is absent (no fetch tool), as in the public reference. */
  peer_fetch_allow: string[];
  network_allow: string[];
  achieved_containment: Containment;
  runtime_writes: RuntimeWrite[];
}

/**
 * What a launch of this manifest grants, defaults applied. Allow lists are given as the entries the
 * operator wrote (their `raw` form), so the record reads like the manifest it came from. A fresh,
 * mutable object each call: callers serialise it, and nothing they do to it reaches the table.
 */
export function effectiveGrants(m: Manifest, containment: Containment): EffectiveGrants {
  return {
    exports_files: m.files === null ? null : { root: m.files.root, mode: m.files.mode, max_bytes: m.files.maxBytes },
    peer_files: m.peerFiles === null ? null : { root: m.peerFiles.root, max_ttl_secs: m.peerFiles.effectiveMaxTtlSecs, max_bytes: m.peerFiles.maxBytes },
    peer_fetch_allow: m.peerFetchAllow === null ? [] : m.peerFetchAllow.map((d) => d.raw),
    network_allow: m.networkAllow.map((d) => d.raw),
    achieved_containment: containment,
    runtime_writes: RUNTIME_WRITES.map(({ path, kind, scope, condition }) => ({ path, kind, scope, condition })),
  };
}

/** The `  runtime writes:` block of the human rendering, one row per declared path. */
export function renderRuntimeWrites(rows: readonly RuntimeWrite[]): string {
  const lines = ['  runtime writes:'];
  if (rows.length === 0) lines.push('    <none>');
  for (const r of rows) lines.push(`    - ${r.path} (${r.kind}, ${r.scope}, ${r.condition})`);
  return lines.join('\n');
}

function listLines(label: string, entries: readonly string[]): string[] {
  if (entries.length === 0) return [`  ${label}: <none>`];
  return [`  ${label}:`, ...entries.map((e) => `    - ${e}`)];
}

/**
 * The human form of explain-scope. Sections in a fixed order, every undeclared plane stated as such
 * rather than omitted (an operator reading this should not have to infer a deny from a gap), and a
 * trailing newline so it can be written to stdout as-is.
 */
export function renderExplainScope(m: Manifest, containment: Containment): string {
  const g = effectiveGrants(m, containment);
  const out: string[] = [`capsule: ${m.name} ${m.version}`, `achieved containment: ${containment}`];

  out.push('resource plane:');
  if (g.exports_files === null) {
    out.push('  not declared: no exports.files block, so there is no resource plane');
  } else {
    out.push(`  root: ${g.exports_files.root}`, `  mode: ${g.exports_files.mode}`, `  max bytes: ${g.exports_files.max_bytes} per file`);
  }

  out.push('peer handoff:');
  if (g.peer_files === null) {
    out.push('  share-file: not declared: no exports.peer_files block, so nothing can be shared');
  } else {
    const ttlSource = m.peerFiles?.maxTtlSecs === null ? ' (default; max_ttl not declared)' : '';
    out.push(`  root: ${g.peer_files.root}`, `  max handle ttl: ${g.peer_files.max_ttl_secs}s${ttlSource}`, `  max bytes: ${g.peer_files.max_bytes} per file`);
  }
  if (m.peerFetchAllow === null) {
    out.push('  fetch-peer-file: not declared: no capabilities.peer_fetch block, so nothing can be fetched');
  } else {
    out.push(...listLines('peer_fetch allow', g.peer_fetch_allow));
  }

  out.push('network:');
  out.push(...listLines('allow', g.network_allow));

  out.push('workdir:');
  out.push(renderRuntimeWrites(RUNTIME_WRITES));

  return `${out.join('\n')}\n`;
}
