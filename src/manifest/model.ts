// The manifest: turns the text of `murmur.yaml` into a frozen, validated description of what this
// capsule grants (SPEC section 2), and owns every launch diagnostic that comes from the manifest
// itself: E-MAN-003 (a malformed field), E-CAP-001 (a malformed allow-list entry), E-CAP-007 (an
// export root that already resolves outside the workdir) and E-CAP-008 (a persistent capsule with a
// long-lived peer handle). The grammars it uses live beside it (grammars.ts, destinations.ts).
//
// Parsing is pure: E-CAP-007 needs the filesystem and is checked at launch (src/session/checks.ts),
// so that `explain-scope` can answer from the text alone.
// Why this file is long: it is the manifest's one grammar, every block's keys, types and
// diagnostics in reading order; the value grammars live apart (grammars.ts, destinations.ts).

import { createRequire } from 'node:module';
import type { Document } from 'yaml';
import type { Containment } from '../wire.js';
import { parseDestination, type Destination, type Target } from './destinations.js';
import { ManifestError } from './diagnostics.js';
import { BYTE_COUNT, BYTE_MULTIPLIER, DURATION, DURATION_MULTIPLIER, FLAG_BYTE_COUNT, parseScaled } from './grammars.js';

type Yaml = typeof import('yaml');
let yamlLib: Yaml | undefined;
/** The YAML parser, loaded on first use: a confined server's second phase never parses YAML. */
function yaml(): Yaml {
  return (yamlLib ??= createRequire(import.meta.url)('yaml') as Yaml);
}

export type { Containment, Destination, Target };
export { ManifestError };

// ── Public types ─────────────────────────────────────────────────────────────────────────────────

export interface FilesExport {
  root: string;
  mode: 'read-only';
  maxBytes: number;
}

export interface PeerFilesExport {
  root: string;
  /** As declared; null when the manifest does not declare `max_ttl`. */
  maxTtlSecs: number | null;
  /** What the server applies: the declared value, or one hour. */
  effectiveMaxTtlSecs: number;
  maxBytes: number;
}

export interface Manifest {
  name: string;
  version: string;
  files: FilesExport | null;
  peerFiles: PeerFilesExport | null;
  /** null means the `capabilities.peer_fetch` block is absent: no fetch tool exists. */
  peerFetchAllow: Destination[] | null;
  /** Empty means no outbound destination at all. */
  networkAllow: Destination[];
  afterTask: 'exit' | 'sleep';
}

// ── Constants ────────────────────────────────────────────────────────────────────────────────────

/** `10Mi`: the per-file ceiling when a block declares no `max_bytes`. */
export const DEFAULT_MAX_BYTES = 10 * 1024 * 1024;
/** One hour: the handle lifetime ceiling when `exports.peer_files.max_ttl` is absent. */
export const DEFAULT_MAX_TTL_SECS = 3600;
/**
 * A sleeping capsule keeps its instance key alive between tasks, so its handles would stay
 * redeemable indefinitely; fifteen minutes is the longest lifetime such a capsule may declare.
 */
export const SLEEP_MAX_TTL_CEILING_SECS = 900;

/**
 * Anchors and aliases are legal YAML and the runtime's own parts of the manifest may use them, but
 * a handful of nested aliases expands exponentially ("billion laughs"). The manifest is small, so a
 * low ceiling costs a legitimate author nothing.
 */
const MAX_ALIAS_COUNT = 100;
// ── Reading the YAML ─────────────────────────────────────────────────────────────────────────────

type Key = string | number;
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function describe(value: unknown): string {
  if (Array.isArray(value)) return 'a list';
  if (isRecord(value)) return 'a mapping';
  return `'${String(value)}'`;
}

function malformed(field: string, expectation: string, got: string | null, hint: string): ManifestError {
  const suffix = got === null ? '' : ` (got ${got})`;
  return new ManifestError('E-MAN-003', `${field} ${expectation}${suffix}`, hint);
}

/**
 * A view over one parsed document. Structure comes from the alias-bounded `toJS` conversion; the
 * document's nodes are consulted only to recover the text an author typed for a scalar the core
 * schema turned into a number or boolean (`version: 1.0` is the float 1, but the author wrote
 * "1.0"; `max_bytes: 0x10` is the integer 16, but it is not a byte count the spec accepts).
 */
class ManifestView {
  constructor(
    private readonly doc: Document.Parsed,
    readonly data: Record<string, unknown>,
  ) {}

  /** The value at `keys`, or undefined when any level is absent. */
  get(keys: readonly Key[]): unknown {
    let value: unknown = this.data;
    for (const key of keys) {
      if (Array.isArray(value) && typeof key === 'number') value = value[key];
      else if (isRecord(value) && typeof key === 'string' && Object.hasOwn(value, key)) value = value[key];
      else return undefined;
    }
    return value;
  }

  /**
   * A mapping-valued key. Absent gives undefined; an explicit null gives an empty mapping (the
   * block is present but declares nothing, so its own required fields then fail); anything else
   * that is not a mapping is malformed.
   */
  mapping(keys: readonly Key[], field: string, hint: string): Record<string, unknown> | undefined {
    const value = this.get(keys);
    if (value === undefined) return undefined;
    if (value === null) return {};
    if (!isRecord(value)) throw malformed(field, 'must be a mapping', describe(value), hint);
    return value;
  }

  /**
   * A scalar as the author wrote it. Null and absent both give undefined (YAML's "no value");
   * a collection is malformed with the caller's expectation.
   */
  text(keys: readonly Key[], field: string, expectation: string, hint: string): string | undefined {
    const value = this.get(keys);
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'string') return value;
    if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
      return this.sourceOf(keys) ?? String(value);
    }
    throw malformed(field, expectation, describe(value), hint);
  }

  private sourceOf(keys: readonly Key[]): string | undefined {
    let node: unknown = this.doc.contents;
    for (const key of keys) {
      if (yaml().isAlias(node)) node = node.resolve(this.doc);
      if (yaml().isMap(node) || yaml().isSeq(node)) node = node.get(key, true);
      else return undefined;
    }
    if (yaml().isAlias(node)) node = node.resolve(this.doc);
    return yaml().isScalar(node) ? node.source : undefined;
  }
}

function loadDocument(text: string, shown: string): ManifestView {
  const lineCounter = new (yaml().LineCounter)();
  const doc = yaml().parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true, strict: true });
  const first = doc.errors[0];
  if (first) {
    const { line, col } = lineCounter.linePos(first.pos[0]);
    // The library's own wording is kept for syntax errors (it is precise), but rephrased where it
    // speaks to a programmer using the library rather than to the author of the file.
    let what = first.message.split('\n')[0] as string;
    let hint = 'fix the YAML syntax at that position; quote values that contain ": " or start with a special character';
    if (first.code === 'DUPLICATE_KEY') {
      // The error marks only where the repeated key starts; read the key itself up to its colon.
      const key = (/^[^:\n,{}]*/.exec(text.slice(first.pos[0]))?.[0] ?? '').trim();
      what = key === '' ? 'a key appears twice in one mapping' : `the key '${key}' appears twice in one mapping`;
      hint = 'each key may appear once per mapping; remove or merge the repeated key';
    } else if (first.code === 'MULTIPLE_DOCS') {
      what = 'it holds more than one YAML document';
      hint = 'a manifest holds exactly one YAML document; remove the extra "---" sections';
    }
    throw new ManifestError('E-MAN-003', `${shown} is not valid YAML: ${what} (line ${line}, column ${col})`, hint);
  }
  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (err) {
    throw new ManifestError(
      'E-MAN-003',
      `${shown} could not be read: ${(err as Error).message}`,
      `keep YAML anchors and aliases few and shallow (at most ${MAX_ALIAS_COUNT} alias expansions)`,
    );
  }
  if (!isRecord(data)) {
    throw new ManifestError(
      'E-MAN-003',
      `${shown} must be a mapping at the top level (got ${data == null ? 'an empty document' : describe(data)})`,
      'start from a mapping with at least `name: <capsule name>` and `version: <version>`',
    );
  }
  return new ManifestView(doc, data);
}
// ── Field rules ──────────────────────────────────────────────────────────────────────────────────

const RELATIVE_PATH = 'must be a relative path inside the workdir';
const BYTE_COUNT_RULE = 'must be a byte count, optionally suffixed Ki/Mi/Gi';
const DURATION_RULE = 'must be a duration: an integer, optionally suffixed s/m/h/d';
const NON_EMPTY_DESTINATIONS = 'must be a non-empty list of network destinations';

function requiredString(view: ManifestView, key: string, hint: string): string {
  const value = view.text([key], key, 'must be a string', hint);
  if (value === undefined) throw malformed(key, 'is required and must be a string', null, hint);
  if (value.trim() === '') throw malformed(key, 'must be a non-empty string', `'${value}'`, hint);
  return value;
}

/** An export root, kept verbatim once it passes the lexical rules. */
function exportRoot(view: ManifestView, block: string[], field: string): string {
  const keys = [...block, 'root'];
  const rootHint = (extra: string) => `${extra}, e.g. \`root: out/\``;
  const root = view.text(keys, field, RELATIVE_PATH, rootHint('give a path relative to the workdir'));
  if (root === undefined) {
    throw malformed(
      field,
      `is required in the ${block.join('.')} block and ${RELATIVE_PATH}`,
      null,
      rootHint('name the subtree to export, relative to the workdir'),
    );
  }
  const refuse = (why: string) => malformed(field, RELATIVE_PATH, `'${root}'`, rootHint(why));
  if (root === '') throw refuse('the root must not be empty');
  if (root.includes('\0')) throw refuse('remove the NUL byte');
  // Control characters cannot be echoed in x-murmur-export-root, in a listing or in a terminal
  // without being mistaken for structure; no real directory name needs them.
  if (/[\u0001-\u001f\u007f-\u009f]/.test(root)) throw refuse('remove the control characters');
  if (root.startsWith('/')) throw refuse('drop the leading "/": roots are relative to the workdir');
  if (root.split('/').includes('..')) {
    throw refuse('remove the ".." component: a root may not climb out of the workdir');
  }
  return root;
}

/** Appended to the spec's phrase when the text has the right shape but the wrong value. */
function qualifier(why: 'syntax' | 'zero' | 'overflow', unit: string): string {
  if (why === 'zero') return ', greater than 0';
  if (why === 'overflow') return `, no larger than ${Number.MAX_SAFE_INTEGER}${unit}`;
  return '';
}

function byteCount(view: ManifestView, block: string[], field: string): number {
  const hint = 'write a whole number of bytes, optionally suffixed Ki, Mi or Gi (powers of 1024), e.g. 10Mi; ' + 'omit the key for the 10Mi default';
  const text = view.text([...block, 'max_bytes'], field, BYTE_COUNT_RULE, hint);
  if (text === undefined) return DEFAULT_MAX_BYTES;
  const parsed = parseScaled(text, BYTE_COUNT, BYTE_MULTIPLIER);
  if (parsed.ok) return parsed.value;
  // `10MB` is what the command line's flags accept; say why the manifest does not.
  const si =
    parsed.why === 'syntax' && FLAG_BYTE_COUNT.test(text.trim())
      ? `; '${text.trim()}' is a form the command-line flags accept, but the manifest is read by the runtime too and keeps Ki/Mi/Gi only`
      : '';
  throw malformed(field, `${BYTE_COUNT_RULE}${qualifier(parsed.why, '')}`, `'${text}'`, `${hint}${si}`);
}

function duration(view: ManifestView, keys: Key[], field: string): { secs: number; text: string } | null {
  const hint = 'write whole seconds, or an integer suffixed s, m, h or d (lowercase, no space), e.g. 15m or 1h';
  const text = view.text(keys, field, DURATION_RULE, hint);
  if (text === undefined) return null;
  const parsed = parseScaled(text, DURATION, DURATION_MULTIPLIER);
  if (parsed.ok) return { secs: parsed.value, text };
  throw malformed(field, `${DURATION_RULE}${qualifier(parsed.why, 's')}`, `'${text}'`, hint);
}

/**
 * An allow list. `requireNonEmpty` distinguishes `peer_fetch.allow` (declaring the block without a
 * destination would be a fetch tool that can reach nothing, almost certainly a mistake) from
 * `network.allow` (empty is the ordinary deny-all).
 */
function destinationList(view: ManifestView, keys: Key[], field: string, requireNonEmpty: boolean): Destination[] {
  const expectation = requireNonEmpty ? NON_EMPTY_DESTINATIONS : 'must be a list of network destinations';
  const hint = `list entries under ${field}, one per line, e.g. "- http://localhost:8080" or "- localhost:8080"`;
  const value = view.get(keys);
  if (value === undefined || value === null) {
    if (requireNonEmpty) throw malformed(field, expectation, value === null ? "'null'" : null, hint);
    return [];
  }
  if (!Array.isArray(value)) throw malformed(field, expectation, describe(value), hint);
  if (requireNonEmpty && value.length === 0) throw malformed(field, expectation, 'an empty list', hint);
  return value.map((_item, i) => {
    const itemField = `${field}[${i}]`;
    const entry = view.text([...keys, i], itemField, 'must be a network destination string', hint);
    if (entry === undefined) throw malformed(itemField, 'must be a network destination string', "'null'", hint);
    try {
      return parseDestination(entry);
    } catch (err) {
      const e = err as ManifestError;
      // peer_fetch.allow, as in the public reference: a field-level E-MAN-003 naming the list.
      if (requireNonEmpty) throw malformed(field, expectation, `'${entry}'`, `${hint}; ${e.message}`);
      // network.allow: the entry's own E-CAP-001; the hint adds which list the entry sits in.
      throw new ManifestError(e.code, e.message, `in ${field}: ${e.hint}`);
    }
  });
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

/**
 * Parses and validates `murmur.yaml`; `source`, when given, is the path the text was read from,
 * named by the diagnostics about the file as a whole. Pure: no filesystem access. Throws the first ManifestError
 * met, checking fields in document order (identity, exports, capabilities, lifecycle) and the
 * cross-field E-CAP-008 rule last, once every field it depends on is known to be well-formed.
 */
export function parseManifest(text: string, source?: string): Manifest {
  // Whole-file diagnostics name the file that was read; field diagnostics name the field.
  const view = loadDocument(text, source === undefined ? 'murmur.yaml' : `the manifest '${source}'`);

  const name = requiredString(view, 'name', 'give the capsule a top-level name, e.g. `name: reporter`; it names the capsule in its agent card and audience');
  const version = requiredString(view, 'version', 'give the capsule a top-level version string, e.g. `version: "0.1.0"`');

  const sectionHint = (key: string) => `${key} holds named blocks; write it as a mapping or leave it out`;
  view.mapping(['exports'], 'exports', sectionHint('exports'));
  view.mapping(['capabilities'], 'capabilities', sectionHint('capabilities'));
  view.mapping(['lifecycle'], 'lifecycle', sectionHint('lifecycle'));

  let files: FilesExport | null = null;
  const filesBlock = view.mapping(['exports', 'files'], 'exports.files', 'declare root and mode under exports.files, or leave the block out');
  if (filesBlock !== undefined) {
    const root = exportRoot(view, ['exports', 'files'], 'exports.files.root');
    const modeHint = 'the resource plane has no write path; declare `mode: read-only`';
    const mode = view.text(['exports', 'files', 'mode'], 'exports.files.mode', 'must be read-only', modeHint);
    if (mode === undefined) {
      throw malformed('exports.files.mode', 'is required in the exports.files block and must be read-only', null, modeHint);
    }
    if (mode !== 'read-only') throw malformed('exports.files.mode', 'must be read-only', `'${mode}'`, modeHint);
    files = { root, mode, maxBytes: byteCount(view, ['exports', 'files'], 'exports.files.max_bytes') };
  }

  let peerFiles: PeerFilesExport | null = null;
  let declaredTtlText: string | null = null;
  const peerBlock = view.mapping(['exports', 'peer_files'], 'exports.peer_files', 'declare root under exports.peer_files, or leave the block out');
  if (peerBlock !== undefined) {
    const root = exportRoot(view, ['exports', 'peer_files'], 'exports.peer_files.root');
    const ttl = duration(view, ['exports', 'peer_files', 'max_ttl'], 'exports.peer_files.max_ttl');
    declaredTtlText = ttl?.text ?? null;
    peerFiles = {
      root,
      maxTtlSecs: ttl?.secs ?? null,
      effectiveMaxTtlSecs: ttl?.secs ?? DEFAULT_MAX_TTL_SECS,
      maxBytes: byteCount(view, ['exports', 'peer_files'], 'exports.peer_files.max_bytes'),
    };
  }

  const fetchBlock = view.mapping(
    ['capabilities', 'peer_fetch'],
    'capabilities.peer_fetch',
    'declare `allow:` with the peers this capsule may fetch from, or leave the block out',
  );
  const peerFetchAllow =
    fetchBlock === undefined ? null : destinationList(view, ['capabilities', 'peer_fetch', 'allow'], 'capabilities.peer_fetch.allow', true);

  view.mapping(['capabilities', 'network'], 'capabilities.network', 'declare `allow:` with outbound destinations, or leave the block out');
  const networkAllow = destinationList(view, ['capabilities', 'network', 'allow'], 'capabilities.network.allow', false);

  const afterHint = 'use `exit` (the default: the capsule ends after its task) or `sleep` (it stays alive between tasks)';
  const afterText = view.text(['lifecycle', 'after_task'], 'lifecycle.after_task', 'must be exit or sleep', afterHint);
  if (afterText !== undefined && afterText !== 'exit' && afterText !== 'sleep') {
    throw malformed('lifecycle.after_task', 'must be exit or sleep', `'${afterText}'`, afterHint);
  }
  const afterTask = afterText ?? 'exit';

  // A sleeping capsule keeps its key across tasks, so only a short declared lifetime bounds how long
  // a leaked handle stays good; the one-hour default is too long to apply silently.
  if (peerFiles !== null && afterTask === 'sleep' && (peerFiles.maxTtlSecs === null || peerFiles.maxTtlSecs > SLEEP_MAX_TTL_CEILING_SECS)) {
    const declared = declaredTtlText === null ? 'is not declared' : `is '${declaredTtlText}' (${peerFiles.maxTtlSecs}s)`;
    throw new ManifestError(
      'E-CAP-008',
      `exports.peer_files.max_ttl ${declared}, but with lifecycle.after_task: sleep ` + `it is required and at most ${SLEEP_MAX_TTL_CEILING_SECS}s`,
      'declare `max_ttl: 15m` or less under exports.peer_files; a consumer that needs the bytes later ' +
        'should have the operator relaunch the runtime against the workdir and request again',
    );
  }

  return deepFreeze({ name, version, files, peerFiles, peerFetchAllow, networkAllow, afterTask });
}

// ── Keys this server does not read ───────────────────────────────────────────────────────────────

/** A key the manifest holds that this server does not read, and the known key it is likely meant as. */
export interface UnknownKey {
  /** Dotted, as in a diagnostic: `exports.file`. */
  key: string;
  suggestion: string | null;
  /**
   * The key sits in a block this server owns (`exports` and below, the two allow-list blocks):
   * there it is an error, since a typo there leaves a plane or a grant silently undeclared.
   */
  owned: boolean;
}

/**
 * The keys this server reads. In the blocks it owns (`exports` and below, the two allow-list
 * blocks) every other key is reported, and refused: `exports.file:` for `files:` would otherwise
 * start a server whose every listing is `no_resource_plane`. Elsewhere the manifest belongs to the
 * runtime, so only a key within two edits of a known one is reported (`exprots`, `capabilites`): a
 * likely typo, not the runtime's own, and a warning unless --strict.
 */
const KNOWN_KEYS: ReadonlyArray<{ path: string; keys: readonly string[]; owned: boolean }> = [
  { path: '', keys: ['name', 'version', 'exports', 'capabilities', 'lifecycle'], owned: false },
  { path: 'exports', keys: ['files', 'peer_files'], owned: true },
  { path: 'exports.files', keys: ['root', 'mode', 'max_bytes'], owned: true },
  { path: 'exports.peer_files', keys: ['root', 'max_ttl', 'max_bytes'], owned: true },
  { path: 'capabilities', keys: ['peer_fetch', 'network'], owned: false },
  { path: 'capabilities.peer_fetch', keys: ['allow'], owned: true },
  { path: 'capabilities.network', keys: ['allow'], owned: true },
  { path: 'lifecycle', keys: ['after_task'], owned: false },
];

/** Levenshtein distance, for suggestions between short keys. */
function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return row[b.length]!;
}

function closest(key: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let bestDistance = 3;
  for (const k of known) {
    const d = editDistance(key.toLowerCase(), k);
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  return best;
}

/** The keys of a (valid) manifest this server does not read; see KNOWN_KEYS for which are reported. */
export function unknownKeys(text: string, source?: string): UnknownKey[] {
  const view = loadDocument(text, source === undefined ? 'murmur.yaml' : `the manifest '${source}'`);
  const found: UnknownKey[] = [];
  for (const { path, keys, owned } of KNOWN_KEYS) {
    const block = path === '' ? view.data : view.get(path.split('.'));
    if (!isRecord(block)) continue;
    for (const key of Object.keys(block)) {
      if (keys.includes(key)) continue;
      const suggestion = closest(key, keys);
      if (!owned && suggestion === null) continue;
      const prefix = path === '' ? '' : `${path}.`;
      found.push({ key: `${prefix}${key}`, suggestion: suggestion === null ? null : `${prefix}${suggestion}`, owned });
    }
  }
  return found;
}

/** How a diagnostic names an unknown key: the closest known key, or else the keys its block has. */
export function describeUnknownKey(k: UnknownKey): string {
  if (k.suggestion) return `unknown key '${k.key}' (did you mean '${k.suggestion}'?)`;
  const dot = k.key.lastIndexOf('.');
  const block = KNOWN_KEYS.find((b) => b.path === (dot < 0 ? '' : k.key.slice(0, dot)));
  return `unknown key '${k.key}'${block ? ` (${block.path || 'the top level'} has ${block.keys.join(', ')})` : ''}`;
}

/**
 * The unknown keys that stop a launch: those in a block this server owns, always; the runtime's
 * typos too under --strict. Throws one E-MAN-003 naming them all; returns the ones left to warn of.
 */
export function refuseUnknownKeys(found: readonly UnknownKey[], shown: string, strict: boolean): UnknownKey[] {
  const refused = found.filter((k) => strict || k.owned);
  if (refused.length === 0) return [...found];
  const owned = refused.some((k) => k.owned);
  throw new ManifestError(
    'E-MAN-003',
    `${shown}: ${refused.map(describeUnknownKey).join(', ')}`,
    owned
      ? 'this server reads that block and would ignore the key, leaving what it meant undeclared: fix the key'
      : 'this server does not read it: fix the key, or drop --strict to have it ignored with a warning',
  );
}
