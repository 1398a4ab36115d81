// The request target as the client sent it. Fastify's router refuses a path it cannot
// percent-decode (`x%ZZ`, a lone `%`, overlong UTF-8) before any hook; the rewrite here lets such a
// target under the planes reach its route and every hook like any other, while the planes still
// read the raw target. Also the form of a target a log line may show.
import type { IncomingMessage } from 'node:http';
import { percentDecodeOnce, requestPath } from '../paths.js';
import { redactHandles } from '../redact.js';
import { planeOf, type PlaneTarget } from '../wire.js';

const RAW_TARGET = Symbol('capsule-resource-plane.rawTarget');
const PLANE_TARGET = Symbol('capsule-resource-plane.planeTarget');
type Tagged = IncomingMessage & { [RAW_TARGET]?: string; [PLANE_TARGET]?: { prefix: string; target: PlaneTarget | null } };

/**
 * A `rewriteUrl` for Fastify's constructor, for the planes registered under `prefix`. The router
 * refuses a path it cannot percent-decode (`x%ZZ`, a lone `%`, overlong UTF-8) before any hook
 * runs; such a target under the planes is handed to the router with every `%` escaped, so it is
 * routed to the planes through every hook like any other, and the planes read the raw target.
 * Every other target is left exactly as it is.
 */
export function routeRawTargets(prefix = ''): (req: IncomingMessage) => string {
  return (req) => {
    const url = req.url ?? '/';
    if (!url.includes('%')) return url;
    const target = planeOf(url, prefix);
    if (target === null) return url;
    (req as Tagged)[PLANE_TARGET] = { prefix, target };
    const path = requestPath(url);
    try {
      decodeURI(path);
      if (!/%(?![0-9A-Fa-f]{2})/.test(path)) return url;
    } catch {
      // undecodable: rewritten below
    }
    (req as Tagged)[RAW_TARGET] = url;
    return path.replaceAll('%', '%25');
  };
}

/** The request target exactly as the client sent it (before any rewrite for the router). */
export function rawTarget(req: IncomingMessage): string {
  return (req as Tagged)[RAW_TARGET] ?? req.url ?? '/';
}

/** planeOf for this request's raw target, decided at most once per request (routeRawTargets may have). */
export function planeTargetOf(req: IncomingMessage, prefix: string): PlaneTarget | null {
  const known = (req as Tagged)[PLANE_TARGET];
  if (known !== undefined && known.prefix === prefix) return known.target;
  return planeOf(rawTarget(req), prefix);
}

const NOT_PLAIN = /[^\x20-\x24\x26-\x7e]/;

/**
 * A target as a log line may show it: percent-decoded once (as the planes read it), then with every
 * token redacted, so `mh1.%65yJ…` cannot carry a live token into the log under its encoding.
 */
export function logTarget(raw: string): string {
  // Printable ASCII without '%' decodes to itself (the common case: no Buffer per line).
  if (!NOT_PLAIN.test(raw)) return redactHandles(raw);
  return redactHandles(percentDecodeOnce(Buffer.from(raw, 'latin1')).toString('utf8'));
}
