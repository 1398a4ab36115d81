// The wire's fixed names, shared by the planes that answer them and the tools that call them:
// routes, header names, the agent-card path and the containment classes. A leaf: it imports nothing.

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

/** What the capsule's sandbox achieved, as the runtime reports it (SPEC section 3). */
export type Containment = 'advisory' | 'scoped' | 'sealed';
export const CONTAINMENT_CLASSES: readonly Containment[] = Object.freeze(['advisory', 'scoped', 'sealed']);

export function isContainment(value: unknown): value is Containment {
  return typeof value === 'string' && (CONTAINMENT_CLASSES as readonly string[]).includes(value);
}

export function isFilesPath(path: string): boolean {
  return path === FILES_PREFIX || path.startsWith(`${FILES_PREFIX}/`);
}

export function isPeerPath(path: string): boolean {
  return path === PEER_PREFIX || path.startsWith(`${PEER_PREFIX}/`);
}
