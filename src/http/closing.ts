// When a response is over: the first of its own `close` and its socket's. Admission counts a request
// in flight until then, and the planes give a read's memory back then.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

const watched = new WeakMap<Socket, Set<() => void>>();

/**
 * Runs `fn` once, at the first of the response's or the socket's `close`: on Node 20 a pipelined
 * response still queued when its socket dies never emits its own. Not the request's `close`: a
 * client that half-closes after sending destroys the request while its response is still being
 * written, and a read's buffer must outlive every write of it. The planes give a read's memory back
 * the same way.
 */
export function onceClosed(req: IncomingMessage, res: ServerResponse, fn: () => void): void {
  const socket = req.socket;
  if (res.closed || socket.destroyed) {
    fn();
    return;
  }
  let pending = watched.get(socket);
  if (!pending) {
    const set = new Set<() => void>();
    watched.set(socket, set);
    socket.once('close', () => {
      for (const f of [...set]) f();
    });
    pending = set;
  }
  const set = pending;
  const once = () => {
    if (!set.delete(once)) return;
    res.off('close', once);
    fn();
  };
  set.add(once);
  res.once('close', once);
}
