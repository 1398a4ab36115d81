// Writing replies the way every plane must: headers in the spec's order, a content-length equal to
// the body on every response, JSON error bodies from the catalogue.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { Rendered } from '../codes.js';
import type { ReadResult } from '../native.js';
import { HEADER } from '../wire.js';

export type HeaderList = Array<[string, string]>;

/**
 * Where a plane writes its answer: a Fastify reply (the plugin's routes, so a host app's hooks
 * apply), or the bare Node response (the CLI's server answers /resources there, before Fastify:
 * the hot path pays for no framework work). Either way the same headers in the same order.
 */
export interface PlaneReply {
  /** The Node response: its `close` event and state. */
  readonly raw: ServerResponse;
  /** The client address refusals are counted against (`unix` on a unix socket). */
  readonly client: string;
  send(status: number, headers: HeaderList, body: Buffer): void;
  logError(fields: object, message: string): void;
}

/** A plane answering through Fastify: the reply's hooks (the class header among them) apply. */
export function fastifyPlaneReply(reply: FastifyReply): PlaneReply {
  return {
    raw: reply.raw,
    client: reply.request.socket.remoteAddress ?? 'unix',
    send: (status, headers, body) => {
      reply.code(status);
      // Removed first: a header set earlier (frameworkErrors sets the class header) would otherwise
      // keep its old position and break the spec's order.
      for (const [name, value] of headers) reply.removeHeader(name).header(name, value);
      reply.removeHeader('content-length').header('content-length', String(body.length));
      reply.send(body);
    },
    logError: (fields, message) => reply.log.error(fields, message),
  };
}

/**
 * A plane answering on the bare response. The class header, which Fastify's onSend hook adds on the
 * plugin's routes, is added here when the plane did not set it, in the same position: last, after
 * content-length.
 */
export function rawPlaneReply(req: IncomingMessage, res: ServerResponse, containment: string, log?: (fields: object, message: string) => void): PlaneReply {
  return {
    raw: res,
    client: req.socket.remoteAddress ?? 'unix',
    send: (status, headers, body) => {
      const flat: string[] = [];
      let classed = false;
      for (const [name, value] of headers) {
        flat.push(name, value);
        if (name === HEADER.containment) classed = true;
      }
      flat.push('content-length', String(body.length));
      if (!classed) flat.push(HEADER.containment, containment);
      res.writeHead(status, flat);
      res.end(body);
    },
    logError: (fields, message) => log?.(fields, message),
  };
}

/** An error reply: content-type, then the extra headers (generation, handle id, allow). */
export function sendError(reply: PlaneReply, error: Rendered, extra: HeaderList = []): void {
  const headers: HeaderList = [['content-type', 'application/json'], ...extra];
  if (error.code === 'method_not_allowed') headers.push(['allow', 'GET']);
  if (error.status === 503) headers.push(['retry-after', '1']);
  reply.send(error.status, headers, error.body);
}

/** The validator headers of a served file, shared by both planes, in the spec's order. */
export function readHeaders(result: ReadResult, generation: number, containment: string): HeaderList {
  return [
    ['content-type', 'application/octet-stream'],
    ['etag', `"sha256:${result.sha256}"`],
    [HEADER.mtimeMs, String(result.mtimeMs)],
    [HEADER.generation, String(generation)],
    [HEADER.containment, containment],
  ];
}

/**
 * A header value for an operator-declared string (the export root): verbatim when it is printable
 * ASCII, otherwise every byte outside that range (and `%`) percent-encoded as UTF-8, since HTTP
 * cannot carry it raw and Node would refuse the reply after the trace already said it was sent.
 */
export function headerSafe(value: string): string {
  if (/^[\x20-\x7e]*$/.test(value)) return value;
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}
