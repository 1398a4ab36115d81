// The wire's fixed names, shared by the planes that answer them and the tools that call them:
// routes, header names, the agent-card path, the etag format, the containment classes, and the one
// decision of which plane a raw request target names (planeOf). A leaf beside paths.ts, the only
// module it imports.
import { requestPath } from './paths.js';

/** The operator plane: the listing and `/resources/files/<relpath>`. */
export const FILES_PREFIX = '/resources/files';
/** The peer plane's one verb: `/resources/peer/<handle>`. */
export const PEER_PREFIX = '/resources/peer';
/** Everything under here belongs to a plane (and never falls through to a generic 404 shape). */
export const RESOURCES_PREFIX = '/resources';
export const CARD_PATH = '/.well-known/agent-card.json';
export const CAPSULE_EXTENSION_URI = 'urn:murmur:capsule:v1';

export const HEADER = Object.freeze({
  audience: 'x-murmur-audience',
  containment: 'x-murmur-containment',
  exportRoot: 'x-murmur-export-root',
  generation: 'x-murmur-generation',
  handleId: 'x-murmur-handle-id',
  mtimeMs: 'x-murmur-mtime-ms',
});

// A served body's strong etag is its SHA-256, `"sha256:<64 lowercase hex>"`. The planes write it
// and both clients (cli get, fetch-peer-file) check bytes against it, so it is spelled only here:
// a client that read it more loosely than the planes write it would accept bytes nothing vouched for.
const ETAG = /^"sha256:([0-9a-f]{64})"$/;

/** The etag of a body whose SHA-256 is `sha256` (64 lowercase hex). */
export function formatEtag(sha256: string): string {
  return `"sha256:${sha256}"`;
}

/** The SHA-256 an etag names; null for anything but a string of exactly the form `formatEtag` writes. */
export function parseEtag(value: unknown): string | null {
  return typeof value === 'string' ? (ETAG.exec(value)?.[1] ?? null) : null;
}

/** What the capsule's sandbox achieved, as the runtime reports it (SPEC section 3). */
export type Containment = 'advisory' | 'scoped' | 'sealed';
export const CONTAINMENT_CLASSES: readonly Containment[] = Object.freeze(['advisory', 'scoped', 'sealed']);

export function isContainment(value: unknown): value is Containment {
  return typeof value === 'string' && (CONTAINMENT_CLASSES as readonly string[]).includes(value);
}

/** The part of the namespace a target is under: a plane, or `/resources` outside both planes. */
export type PlaneName = 'files' | 'peer' | 'resources';

export interface PlaneTarget {
  plane: PlaneName;
  /**
   * The raw path after the plane's prefix and its `/` (a relpath, a token), or null when the path is
   * the prefix itself. For `resources`, everything after `/resources`.
   */
  rest: string | null;
}

const under = (path: string, base: string): string | null | undefined =>
  path === base ? null : path.startsWith(base) && path.charCodeAt(base.length) === 0x2f ? path.slice(base.length + 1) : undefined;

/**
 * Which plane a raw request target names, on segment boundaries and byte for byte (no decoding,
 * no normalising): `<prefix>/resources/files[/…]`, `<prefix>/resources/peer[/…]`, or some other
 * `<prefix>/resources[/…]`; null for anything else (`/resourcesX`, `/cap2/…` under `/cap`). The one
 * place this is decided.
 */
export function planeOf(rawTarget: string, prefix = ''): PlaneTarget | null {
  const full = requestPath(rawTarget);
  const path = prefix === '' ? full : under(full, prefix) === undefined ? undefined : full.slice(prefix.length);
  if (path === undefined) return null;
  const files = under(path, FILES_PREFIX);
  if (files !== undefined) return { plane: 'files', rest: files };
  const peer = under(path, PEER_PREFIX);
  if (peer !== undefined) return { plane: 'peer', rest: peer };
  const other = under(path, RESOURCES_PREFIX);
  if (other !== undefined) return { plane: 'resources', rest: other };
  return null;
}
