// How a failed listen is told: the flag that gave the address, the address, and what to do,
// instead of Node's bare `listen EADDRINUSE: address already in use 127.0.0.1:80`, which leaves the
// reader to guess which of up to three listeners failed. A leaf: both ways of binding use it, the
// launch's own descriptors (src/launch/sockets.ts) and Node's listen (src/http/listener.ts).

/** Which listener an address is for: the peer plane and card, the operator plane, or /metrics. */
export type ListenerRole = 'peer' | 'operator' | 'metrics';

/** A TCP address or a unix socket path, as the listen flags give them. */
export type ListenTarget = { host: string; port: number } | { path: string };

const LISTEN_FLAG: Record<ListenerRole, string> = { peer: '--listen', operator: '--operator-listen', metrics: '--metrics-listen' };

/** How an address is written in a message: `127.0.0.1:80`, `[::1]:80`, `unix:/run/x.sock`. */
export function shownAddress(address: ListenTarget): string {
  if ('path' in address) return `unix:${address.path}`;
  return `${address.host.includes(':') ? `[${address.host}]` : address.host}:${address.port}`;
}

/**
 * `--listen 127.0.0.1:41234: the address is already in use (EADDRINUSE): …`. `code` keeps the
 * errno name (EADDRINUSE, EACCES, …) for callers that branch on it.
 */
export function listenFailure(role: ListenerRole, address: ListenTarget, code: string, detail: string): Error & { code: string } {
  const flag = LISTEN_FLAG[role];
  const why =
    code === 'EADDRINUSE'
      ? `the address is already in use (${code}): another process listens there; give ${flag} another address${role === 'peer' ? ', or a port of 0 for any free one' : ''}`
      : `cannot listen there (${code}: ${detail})`;
  return Object.assign(new Error(`${flag} ${shownAddress(address)}: ${why}`), { code });
}
