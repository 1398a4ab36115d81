// CONNECT, which Node hands to the server's 'connect' event instead of its request handler.
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { ServerResponse } from './node-http.js';

/**
 * A listener for the server's 'connect' event. Node hands a CONNECT to that event with the bare
 * socket, and destroys the connection when nothing listens, so a CONNECT would get no answer and
 * no trace. This gives it a response and passes it to the app's `handler` like any request, so
 * admission and the planes answer it: 405 under the planes (traced), 400 for an authority-form
 * target. The parser has let go of the socket, so nothing after the request is read: the answer
 * closes the connection.
 */
export function answerConnect(handler: (req: IncomingMessage, res: ServerResponse) => void): (req: IncomingMessage, socket: Socket) => void {
  return (req, socket) => {
    // Node's server has let go of the socket before this event and removed its own listeners, so
    // three of its duties come back here: a socket error (a client's reset) with no listener is
    // an uncaught exception, which ended the process; 'drain' is no longer passed on to the
    // response writing on the socket, so a streamed body pipelined before this request waited for
    // ever; and nothing cut the connection when it idled, so that body held its memory for as
    // long as the client kept the connection open.
    socket.on('error', () => socket.destroy());
    socket.on('timeout', () => socket.destroy());
    socket.on('drain', () => {
      const writing = responseOn(socket);
      if (writing && !writing.writableFinished) writing.emit('drain');
    });
    const res = new ServerResponse(req);
    res.shouldKeepAlive = false;
    const run = () => {
      if (socket.destroyed) return;
      res.assignSocket(socket);
      // What Node's server does at a response's finish, for a socket it no longer owns.
      res.once('finish', () => {
        res.detachSocket(socket);
        socket.destroySoon();
      });
      handler(req, res);
    };
    // Responses pipelined before this request may still hold the socket, one after another: at
    // each one's finish Node hands the socket to the next, so this waits until none is left.
    const whenFree = () => {
      const before = responseOn(socket);
      if (before) before.once('finish', () => setImmediate(whenFree));
      else run();
    };
    whenFree();
  };
}

/** The response Node's server has writing on this socket now, if any (its private `_httpMessage`). */
function responseOn(socket: Socket): ServerResponse | null {
  return (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage ?? null;
}
