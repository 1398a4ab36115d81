// Network destinations (SPEC section 2): the entry grammar both allow lists share, and the one
// matcher that decides whether a concrete outbound target is admitted. Pure.
import { ManifestError } from './diagnostics.js';

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

/** A target one concrete outbound connection would reach. */
export interface Target {
  scheme: 'http' | 'https';
  host: string;
  port: number;
}

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
  'write an http(s) URL with no path, query or fragment (http://localhost:8080), a bare host ' + '(localhost) or host:port (localhost:8080)';

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

const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '[::1]', '::1']);
/** How many allow entries a refusal lists before it cuts the list short. */
const ALLOW_SHOWN_MAX = 8;

/**
 * Why `target` is not in `list`, in one clause a person can act on: what the list allows, what was
 * asked, and, when the two differ only by a loopback alias (`localhost` against `127.0.0.1`), that
 * hosts are compared as written. `asked` is the peer as the caller wrote it.
 * `(allowed: localhost:41234; asked: 127.0.0.1:41234; hosts are compared as written: localhost is not 127.0.0.1)`
 */
export function notAllowedDetail(list: readonly Destination[], target: Target, asked: string): string {
  const shown = list.slice(0, ALLOW_SHOWN_MAX).map((d) => d.raw);
  const allowed = list.length === 0 ? 'nothing' : `${shown.join(', ')}${list.length > ALLOW_SHOWN_MAX ? `, … (${list.length} entries)` : ''}`;
  const host = target.host.toLowerCase();
  const alias = LOOPBACK_NAMES.has(host) && list.find((d) => d.host !== host && LOOPBACK_NAMES.has(d.host));
  const why = alias ? `; hosts are compared as written: ${alias.host} is not ${host}` : '';
  return `(allowed: ${allowed}; asked: ${asked}${why})`;
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
