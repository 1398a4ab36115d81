// The manifest: turns the text of `murmur.yaml` into a frozen, validated description of what this
// capsule grants (SPEC section 2), and owns every launch diagnostic that comes from the manifest
// itself: E-MAN-003 (a malformed field), E-CAP-001 (a malformed allow-list entry), E-CAP-007 (an
// export root that already resolves outside the workdir) and E-CAP-008 (a persistent capsule with a
// long-lived peer handle). It also owns the small grammars the manifest shares with the rest of the
// server -- byte counts, durations and network destinations -- and the one destination matcher both
// allow lists use, so that a grammar or a match rule exists in exactly one place.
//
// Parsing is pure. The single filesystem access lives in `checkRootsInsideWorkdir`, which the
// launcher calls separately, so that `explain-scope` can answer from the text alone.

import fs from 'node:fs';
import path from 'node:path';
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';

// ── Public types ─────────────────────────────────────────────────────────────────────────────────

/** The containment class the capsule's sandbox achieved (SPEC section 3). */
export type Containment = 'advisory' | 'scoped' | 'sealed';

/**
 * One entry of an allow list. `scheme` set means a URL entry (port then always set, defaulted by
 * scheme); `scheme` null and `port` set means `host:port`; both null means a bare host.
 */
export interface Destination {
  raw: string;
  scheme: 'http' | 'https' | null;
  host: string;
  port: number | null;
}

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

/** A target one concrete outbound connection would reach. */
export interface Target {
  scheme: 'http' | 'https';
  host: string;
  port: number;
}

export type ManifestErrorCode = 'E-MAN-003' | 'E-CAP-001' | 'E-CAP-007' | 'E-CAP-008';

/** A launch diagnostic. The launcher prints `render()` to stderr and exits with status 2. */
export class ManifestError extends Error {
  override readonly name = 'ManifestError';
  readonly code: ManifestErrorCode;
  readonly hint: string;

  constructor(code: ManifestErrorCode, message: string, hint: string) {
    super(message);
    this.code = code;
    this.hint = hint;
  }

  render(): string {
    return `error[${this.code}]: ${this.message}\n  hint: ${this.hint}`;
  }
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

// ── Grammars ─────────────────────────────────────────────────────────────────────────────────────

type Parsed = { ok: true; value: number } | { ok: false; why: 'syntax' | 'zero' | 'overflow' };

const BYTE_COUNT = /^([0-9]+)(Ki|Mi|Gi)?$/;
const BYTE_MULTIPLIER: Record<string, bigint> = { Ki: 1024n, Mi: 1024n ** 2n, Gi: 1024n ** 3n };
const DURATION = /^([0-9]+)([smhd])?$/;
const DURATION_MULTIPLIER: Record<string, bigint> = { s: 1n, m: 60n, h: 3600n, d: 86400n };

// BigInt arithmetic so that overflow is detected rather than silently rounded: a Number would turn
// `99999999999999999999` into a plausible-looking ceiling.
function parseScaled(s: string, grammar: RegExp, multipliers: Record<string, bigint>): Parsed {
  const match = grammar.exec(s.trim());
  if (!match) return { ok: false, why: 'syntax' };
  const digits = match[1] as string;
  const unit = match[2];
  const value = BigInt(digits) * (unit === undefined ? 1n : (multipliers[unit] as bigint));
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) return { ok: false, why: 'overflow' };
  if (value === 0n) return { ok: false, why: 'zero' };
  return { ok: true, value: Number(value) };
}

/**
 * A byte count: trimmed ASCII digits with an optional case-sensitive `Ki`/`Mi`/`Gi` suffix.
 * Returns null when refused. Zero is refused too: every byte count in this project is a ceiling
 * that must admit at least one byte, so no caller can be handed a zero by accident.
 */
export function parseByteCount(s: string): number | null {
  const parsed = parseScaled(s, BYTE_COUNT, BYTE_MULTIPLIER);
  return parsed.ok ? parsed.value : null;
}

/**
 * A duration in seconds: trimmed digits with an optional lowercase `s`/`m`/`h`/`d` suffix; a bare
 * integer is seconds. Returns null when refused, zero included (a zero lifetime is never useful and
 * a zero TTL would mint handles that are born expired).
 */
export function parseDuration(s: string): number | null {
  const parsed = parseScaled(s, DURATION, DURATION_MULTIPLIER);
  return parsed.ok ? parsed.value : null;
}

// ── Destinations ─────────────────────────────────────────────────────────────────────────────────

type Parse<T> = { ok: true; value: T } | { ok: false; reason: string };

const DEFAULT_PORT = { http: 80, https: 443 } as const;
// Hosts are kept to a syntax that means the same thing to every later consumer (undici, WHATWG URL):
// DNS-style labels, or a bracketed IPv6 literal. Percent-escapes, userinfo, zone ids and non-ASCII
// are refused rather than interpreted, so the string an allow list matches is the string a
// connection is made to.
const REG_NAME = /^[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?$/;
const IPV6_LITERAL = /^\[[0-9a-f.]*:[0-9a-f:.]*\]$/;
const SCHEME = /^[a-z][a-z0-9+.-]*$/i;

function parsePort(text: string): Parse<number> {
  if (text === '') return { ok: false, reason: 'the port after ":" is empty' };
  // No leading zeros and no sign: one spelling per port, so `raw` entries compare predictably.
  if (!/^[1-9][0-9]{0,4}$/.test(text) || Number(text) > 65535) {
    return { ok: false, reason: `invalid port '${text}': a port is an integer from 1 to 65535` };
  }
  return { ok: true, value: Number(text) };
}

/** `host`, `host:port`, `[v6]` or `[v6]:port`, with nothing else around it. */
function parseAuthority(authority: string): Parse<{ host: string; port: number | null }> {
  if (authority.includes('@')) {
    return { ok: false, reason: 'it carries userinfo ("user@"); a destination names a host only' };
  }
  let hostText: string;
  let portText: string | null;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close < 0) return { ok: false, reason: 'an IPv6 literal is missing its closing "]"' };
    hostText = authority.slice(0, close + 1);
    const rest = authority.slice(close + 1);
    if (rest === '') portText = null;
    else if (rest.startsWith(':')) portText = rest.slice(1);
    else return { ok: false, reason: `unexpected '${rest}' after the IPv6 literal` };
  } else {
    const colons = authority.split(':').length - 1;
    if (colons > 1) {
      return { ok: false, reason: 'an IPv6 address must be written in brackets, e.g. [::1]:8080' };
    }
    const colon = authority.indexOf(':');
    hostText = colon < 0 ? authority : authority.slice(0, colon);
    portText = colon < 0 ? null : authority.slice(colon + 1);
  }
  if (hostText === '') return { ok: false, reason: 'the host is empty' };
  const host = hostText.toLowerCase();
  if (!REG_NAME.test(host) && !IPV6_LITERAL.test(host)) {
    return { ok: false, reason: `invalid host '${hostText}'` };
  }
  if (portText === null) return { ok: true, value: { host, port: null } };
  const port = parsePort(portText);
  if (!port.ok) return port;
  return { ok: true, value: { host, port: port.value } };
}

/** Names the first thing after an authority that a destination may not carry. */
function refuseTail(tail: string, form: 'url' | 'bare'): string | null {
  const pathEnd = tail.search(/[?#]/);
  const pathPart = pathEnd < 0 ? tail : tail.slice(0, pathEnd);
  const allowedPath = form === 'url' ? ['', '/'] : [''];
  if (!allowedPath.includes(pathPart)) {
    return form === 'url'
      ? `it has a path ('${pathPart}'); a URL destination may only end in '/'`
      : `it has a path ('${pathPart}'); a bare host or host:port takes no path`;
  }
  if (pathEnd < 0) return null;
  return tail[pathEnd] === '?'
    ? 'it has a query; a destination names scheme, host and port only'
    : 'it has a fragment; a destination names scheme, host and port only';
}

function parseDestinationText(entry: string): Parse<Destination> {
  if (entry === '') return { ok: false, reason: 'the entry is empty' };
  // Checked before anything else so that `localhost 8080` is not reported as a bad host.
  if (/[\s\x00-\x1f\x7f]/.test(entry)) {
    return { ok: false, reason: 'it contains whitespace or a control character' };
  }
  const sep = entry.indexOf('://');
  if (sep >= 0) {
    const schemeText = entry.slice(0, sep);
    if (!SCHEME.test(schemeText)) return { ok: false, reason: `malformed URL scheme '${schemeText}'` };
    const scheme = schemeText.toLowerCase();
    if (scheme !== 'http' && scheme !== 'https') {
      return { ok: false, reason: `unsupported scheme '${schemeText}': only http and https URLs are accepted` };
    }
    const rest = entry.slice(sep + 3);
    const authEnd = rest.search(/[/?#]/);
    const authority = authEnd < 0 ? rest : rest.slice(0, authEnd);
    const tailRefusal = refuseTail(authEnd < 0 ? '' : rest.slice(authEnd), 'url');
    if (tailRefusal !== null) return { ok: false, reason: tailRefusal };
    const parsed = parseAuthority(authority);
    if (!parsed.ok) return parsed;
    return {
      ok: true,
      value: { raw: entry, scheme, host: parsed.value.host, port: parsed.value.port ?? DEFAULT_PORT[scheme] },
    };
  }
  const authEnd = entry.search(/[/?#]/);
  if (authEnd >= 0) return { ok: false, reason: refuseTail(entry.slice(authEnd), 'bare') as string };
  const parsed = parseAuthority(entry);
  if (!parsed.ok) return parsed;
  return { ok: true, value: { raw: entry, scheme: null, host: parsed.value.host, port: parsed.value.port } };
}

const DESTINATION_HINT =
  'write an http(s) URL with no path, query or fragment (http://localhost:8080), a bare host ' +
  '(localhost) or host:port (localhost:8080)';

/** Parses one allow-list entry. Throws E-CAP-001 naming the entry and why it was refused. */
export function parseDestination(entry: string): Destination {
  const parsed = parseDestinationText(entry);
  if (!parsed.ok) {
    throw new ManifestError('E-CAP-001', `invalid network allow entry '${entry}': ${parsed.reason}`, DESTINATION_HINT);
  }
  return parsed.value;
}

/**
 * Whether any entry admits the target. The one matcher for both allow lists: a URL entry pins
 * scheme, host and port; `host:port` pins host and port; a bare host pins the host. Hosts compare
 * exactly after lowercasing, with no resolution, so `localhost` does not admit `127.0.0.1`.
 */
export function destinationMatches(list: readonly Destination[], target: Target): boolean {
  const host = target.host.toLowerCase();
  return list.some((d) => {
    if (d.host !== host) return false;
    if (d.scheme !== null) return d.scheme === target.scheme && d.port === target.port;
    if (d.port !== null) return d.port === target.port;
    return true;
  });
}

/**
 * The concrete target a peer address names: `host:port` (spoken over http) or an http(s) URL
 * (port defaulted by scheme). A bare host is refused because it names no port to connect to. The
 * same parser as the allow lists, so what is matched is exactly what is connected to.
 */
export function targetFromPeer(peer: string): Target {
  const parsed = parseDestinationText(peer);
  if (!parsed.ok) throw new Error(`invalid peer '${peer}': ${parsed.reason}`);
  const { scheme, host, port } = parsed.value;
  if (port === null) {
    throw new Error(`invalid peer '${peer}': a peer is host:port or an http(s) URL, and a bare host names no port`);
  }
  return { scheme: scheme ?? 'http', host, port };
}

// ── Reading the YAML ─────────────────────────────────────────────────────────────────────────────

type Key = string | number;
const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

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
      if (isAlias(node)) node = node.resolve(this.doc);
      if (isMap(node) || isSeq(node)) node = node.get(key, true);
      else return undefined;
    }
    if (isAlias(node)) node = node.resolve(this.doc);
    return isScalar(node) ? node.source : undefined;
  }
}

function loadDocument(text: string): ManifestView {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true, strict: true });
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
      hint = 'murmur.yaml holds exactly one YAML document; remove the extra "---" sections';
    }
    throw new ManifestError('E-MAN-003', `murmur.yaml is not valid YAML: ${what} (line ${line}, column ${col})`, hint);
  }
  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (err) {
    throw new ManifestError(
      'E-MAN-003',
      `murmur.yaml could not be read: ${(err as Error).message}`,
      `keep YAML anchors and aliases few and shallow (at most ${MAX_ALIAS_COUNT} alias expansions)`,
    );
  }
  if (!isRecord(data)) {
    throw new ManifestError(
      'E-MAN-003',
      `murmur.yaml must be a mapping at the top level (got ${data == null ? 'an empty document' : describe(data)})`,
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
    throw malformed(field, `is required in the ${block.join('.')} block and ${RELATIVE_PATH}`, null,
      rootHint('name the subtree to export, relative to the workdir'));
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
  const hint =
    'write a whole number of bytes, optionally suffixed Ki, Mi or Gi (powers of 1024), e.g. 10Mi; ' +
    'omit the key for the 10Mi default';
  const text = view.text([...block, 'max_bytes'], field, BYTE_COUNT_RULE, hint);
  if (text === undefined) return DEFAULT_MAX_BYTES;
  const parsed = parseScaled(text, BYTE_COUNT, BYTE_MULTIPLIER);
  if (parsed.ok) return parsed.value;
  throw malformed(field, `${BYTE_COUNT_RULE}${qualifier(parsed.why, '')}`, `'${text}'`, hint);
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
      // Same code and message as a bare parse; the hint adds which list the entry sits in.
      const e = err as ManifestError;
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
 * Parses and validates `murmur.yaml`. Pure: no filesystem access. Throws the first ManifestError
 * met, checking fields in document order (identity, exports, capabilities, lifecycle) and the
 * cross-field E-CAP-008 rule last, once every field it depends on is known to be well-formed.
 */
export function parseManifest(text: string): Manifest {
  const view = loadDocument(text);

  const name = requiredString(view, 'name',
    'give the capsule a top-level name, e.g. `name: reporter`; it names the capsule in its agent card and audience');
  const version = requiredString(view, 'version',
    'give the capsule a top-level version string, e.g. `version: "0.1.0"`');

  const sectionHint = (key: string) => `${key} holds named blocks; write it as a mapping or leave it out`;
  view.mapping(['exports'], 'exports', sectionHint('exports'));
  view.mapping(['capabilities'], 'capabilities', sectionHint('capabilities'));
  view.mapping(['lifecycle'], 'lifecycle', sectionHint('lifecycle'));

  let files: FilesExport | null = null;
  const filesBlock = view.mapping(['exports', 'files'], 'exports.files',
    'declare root and mode under exports.files, or leave the block out');
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
  const peerBlock = view.mapping(['exports', 'peer_files'], 'exports.peer_files',
    'declare root under exports.peer_files, or leave the block out');
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

  const fetchBlock = view.mapping(['capabilities', 'peer_fetch'], 'capabilities.peer_fetch',
    'declare `allow:` with the peers this capsule may fetch from, or leave the block out');
  const peerFetchAllow = fetchBlock === undefined
    ? null
    : destinationList(view, ['capabilities', 'peer_fetch', 'allow'], 'capabilities.peer_fetch.allow', true);

  view.mapping(['capabilities', 'network'], 'capabilities.network',
    'declare `allow:` with outbound destinations, or leave the block out');
  const networkAllow = destinationList(view, ['capabilities', 'network', 'allow'], 'capabilities.network.allow', false);

  const afterHint = 'use `exit` (the default: the capsule ends after its task) or `sleep` (it stays alive between tasks)';
  const afterText = view.text(['lifecycle', 'after_task'], 'lifecycle.after_task', 'must be exit or sleep', afterHint);
  if (afterText !== undefined && afterText !== 'exit' && afterText !== 'sleep') {
    throw malformed('lifecycle.after_task', 'must be exit or sleep', `'${afterText}'`, afterHint);
  }
  const afterTask = afterText ?? 'exit';

  // A sleeping capsule keeps its key across tasks, so only a short declared lifetime bounds how long
  // a leaked handle stays good; the one-hour default is too long to apply silently.
  if (peerFiles !== null && afterTask === 'sleep' &&
      (peerFiles.maxTtlSecs === null || peerFiles.maxTtlSecs > SLEEP_MAX_TTL_CEILING_SECS)) {
    const declared = declaredTtlText === null
      ? 'is not declared'
      : `is '${declaredTtlText}' (${peerFiles.maxTtlSecs}s)`;
    throw new ManifestError(
      'E-CAP-008',
      `exports.peer_files.max_ttl ${declared}, but with lifecycle.after_task: sleep ` +
        `it is required and at most ${SLEEP_MAX_TTL_CEILING_SECS}s`,
      'declare `max_ttl: 15m` or less under exports.peer_files; a consumer that needs the bytes later ' +
        'should have the operator relaunch the runtime against the workdir and request again',
    );
  }

  return deepFreeze({ name, version, files, peerFiles, peerFetchAllow, networkAllow, afterTask });
}

// ── The one filesystem check ─────────────────────────────────────────────────────────────────────

/**
 * Whether realpath failed because the root does not resolve to anything yet: missing, under a
 * non-directory, or caught in a symlink loop. None of these can leak a byte (every request resolves
 * the root beneath the workdir descriptor and fails the same way), so none blocks a launch.
 */
function isUnresolvable(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP';
}

/**
 * E-CAP-007: refuses a launch whose export root already exists and resolves outside the workdir,
 * typically a symlink pointing out. A root that does not exist yet passes: it may be created later,
 * and every request resolves it beneath the workdir descriptor anyway, so this check is an early,
 * legible refusal rather than the enforcement. The workdir in the message is its real path, the
 * same form the resolved root is shown in, so the two can be compared by eye. Other filesystem
 * errors (a workdir that does not exist, EACCES, ENAMETOOLONG) propagate unchanged: they are host
 * problems the launcher reports as such, not manifest diagnostics.
 */
export function checkRootsInsideWorkdir(manifest: Manifest, workdirAbs: string): void {
  const workdir = fs.realpathSync(workdirAbs);
  const roots: Array<[string, string]> = [];
  if (manifest.files) roots.push(['exports.files.root', manifest.files.root]);
  if (manifest.peerFiles) roots.push(['exports.peer_files.root', manifest.peerFiles.root]);
  for (const [field, declared] of roots) {
    let resolved: string;
    try {
      resolved = fs.realpathSync(path.join(workdir, declared));
    } catch (err) {
      if (isUnresolvable(err)) continue;
      throw err;
    }
    const inside = resolved === workdir || resolved.startsWith(workdir.endsWith('/') ? workdir : `${workdir}/`);
    if (!inside) {
      throw new ManifestError(
        'E-CAP-007',
        `${field} '${declared}' resolves to '${resolved}', which is outside the capsule workdir '${workdir}'`,
        `point ${field} at a directory inside the workdir; if it is a symlink, replace it with ` +
          'the directory itself or a link that stays inside',
      );
    }
  }
}
