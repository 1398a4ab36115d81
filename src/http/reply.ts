// Writing replies the way every plane must: headers in the spec's order, a content-length equal to
// the body on every response, JSON error bodies from the catalogue.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import type { Rendered } from '../codes.js';
import { formatEtag, HEADER } from '../wire.js';

export type HeaderList = Array<[string, string]>;

/** A body sent from a stream: its length is known (and promised in content-length) before it starts. */
export interface StreamPayload {
  stream: Readable;
  length: number;
}

/** Where a plane writes its answer: a Fastify reply, so the app's hooks apply to it. */
export interface PlaneReply {
  /** The Node request and response: their `close` events and state. */
  readonly req: IncomingMessage;
  readonly raw: ServerResponse;
  /** The client address refusals are counted against (`unix` on a unix socket). */
  readonly client: string;
  send(status: number, headers: HeaderList, body: Buffer | StreamPayload): void;
  logError(fields: object, message: string): void;
}

export function fastifyPlaneReply(reply: FastifyReply): PlaneReply {
  return {
    req: reply.request.raw,
    raw: reply.raw,
    client: reply.request.socket.remoteAddress ?? 'unix',
    send: (status, headers, body) => {
      reply.code(status);
      // Removed first: a header set earlier would otherwise keep its old position and break the
      // spec's order.
      for (const [name, value] of headers) reply.removeHeader(name).header(name, value);
      // A 304 carries no body, and no length that would differ from the 200's: none at all. Fastify
      // sets content-length for any Buffer it is handed (0 for an empty one), never for no payload.
      reply.removeHeader('content-length');
      if (status === 304) {
        reply.send();
        return;
      }
      reply.header('content-length', String(body.length));
      reply.send(Buffer.isBuffer(body) ? body : body.stream);
    },
    logError: (fields, message) => reply.log.error(fields, message),
  };
}

/** An error reply: content-type, then the extra headers (generation, handle id, allow). */
export function sendError(reply: PlaneReply, error: Rendered, extra: HeaderList = []): void {
  const headers: HeaderList = [['content-type', 'application/json'], ...extra];
  if (error.code === 'method_not_allowed') headers.push(['allow', 'GET']);
  if (error.status === 503) headers.push(['retry-after', '1']);
  reply.send(error.status, headers, error.body);
}

/** A served file's strong etag (its format is the wire's: src/wire.ts). */
export function etagOf(result: { sha256: string }): string {
  return formatEtag(result.sha256);
}

/** The validator headers of a served file, shared by both planes, in the spec's order. */
export function readHeaders(result: { sha256: string; mtimeMs: number }, generation: number, containment: string): HeaderList {
  return [
    ['content-type', 'application/octet-stream'],
    ['etag', etagOf(result)],
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
