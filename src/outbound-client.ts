// The one maker of undici Clients: every outbound HTTP request this package makes (the peer
// plane's card fetch and redeem, src/tools/peer-http.ts; `resource-plane ls` and `get`,
// src/cli/client.ts) rides a socket that went through the guard here. A leaf beside
// response-body.ts: it imports only node and undici.
//
// The guard is for nodejs/undici#5360, in undici 7's HTTP/1 client. Its parser pauses when a
// response body is not read as fast as it arrives (the body stream holds 64 KiB), and when the
// server's FIN or RST reaches the socket while it is paused, undici's socket handlers call
// `parser.finish()`, which begins with `assert(!this.paused)`. The AssertionError is thrown inside
// the socket's 'end' handler (a `connection: close` answer, or a body cut short by a FIN) or its
// 'error' handler (an ECONNRESET on a `connection: close` answer), from process.nextTick, where no
// caller can catch it: the process ends. Any server can do that to its client: a peer to the
// capsule that fetches from it (`serve` ended mid-fetch, no `session_end`, the trace cut off), a
// hostile server to `get`. Nothing about the request can prevent the pause: fetch-peer-file opens
// its landing, and `get` its temporary file, between the headers and the first read.
//
// So a listener of ours runs before undici's on the socket's 'end', 'error' and 'close' (the three
// that call finish()), and leaves the parser unpaused for them:
// - on 'end' the socket is whole and every byte the server sent has been handed to the parser
//   ('end' comes only with the read buffer empty). The parser is resumed, as a read of the body
//   would resume it; that completes a message whose bytes all arrived, or leaves it waiting for
//   bytes that will never come, which finish() then reports as the error it is. A body delimited
//   by the close re-pauses on every resume; its llhttp is resumed alone, so that finish()
//   completes it. Resuming pushes nothing new into the body stream: there are no bytes left.
// - on 'error' and 'close' the socket is already destroyed and nothing more will be parsed. The
//   flag alone is cleared: llhttp itself still holds its paused state, so finish() completes
//   nothing and the request fails with the socket's error or `closed`, never as a whole body
//   (even one whose last byte came just before the reset: a reset is not an end).
// undici 8 drains a paused parser in finish() itself; there the guard finds it unpaused or
// resumes it the same way, and changes nothing.
//
// The guard reads undici's private fields, so an undici whose fields moved (the dependency range
// lets an install move past the tested version) would leave it doing nothing, silently. So whether
// it can attach is checked once per process, before the first fetch (outboundGuardProblem: undici
// is handed an unconnected socket, on which it builds its parser exactly as on a real one, and the
// guard looks for it there), and fetch-peer-file refuses to run when it cannot. Moving to undici 8
// instead would need Node 22.19 or later, above this package's engines (STACK.md).
import { createRequire } from 'node:module';
import { Socket } from 'node:net';
import { buildConnector, Client } from 'undici';

/** What the guard reads of undici's parser: its pause flag, its own resume, and its llhttp instance. */
interface PausableParser {
  paused: boolean;
  resume(): void;
  ptr?: unknown;
  llhttp?: { llhttp_resume?: (ptr: unknown) => void };
}

/**
 * The symbol undici keeps a socket's HTTP/1 parser under. Read from undici's own symbols module;
 * should that move in another 7.x, the socket's own symbol of the same description is used.
 */
const PARSER_SYMBOL: symbol | null = (() => {
  try {
    const symbols = createRequire(import.meta.url)('undici/lib/core/symbols.js') as { kParser?: unknown };
    return typeof symbols.kParser === 'symbol' ? symbols.kParser : null;
  } catch {
    return null;
  }
})();

function parserOf(socket: Socket): PausableParser | null {
  const key = PARSER_SYMBOL ?? Object.getOwnPropertySymbols(socket).find((s) => s.description === 'parser');
  const parser = key === undefined ? undefined : (socket as unknown as Record<symbol, unknown>)[key];
  if (parser === null || typeof parser !== 'object') return null;
  const p = parser as Partial<PausableParser>;
  return typeof p.paused === 'boolean' && typeof p.resume === 'function' ? (p as PausableParser) : null;
}

/** The most resumes one 'end' tries: each consumes what the last pause left, and 'end' left none. */
const MAX_RESUMES = 4;

/** Leaves the socket's parser unpaused for undici's own handler of the event now being emitted. */
function unpause(socket: Socket): void {
  const parser = parserOf(socket);
  if (parser === null || !parser.paused) return;
  try {
    for (let i = 0; i < MAX_RESUMES && parser.paused && !socket.destroyed; i++) parser.resume();
    // A body delimited by the close: each resume ends in an empty on_body that the full body
    // stream refuses again, so it re-pauses. llhttp is resumed alone, and finish() then delivers
    // the EOF's completion (as undici 8 does).
    if (parser.paused && !socket.destroyed && parser.ptr != null) parser.llhttp?.llhttp_resume?.(parser.ptr);
  } catch {
    // undici's own asserts in resume(): this runs in an event handler too, so nothing may escape.
  }
  // Destroyed (before or by the resume: a completed `connection: close` answer destroys its
  // socket and pauses again) or still paused: only the flag, so finish() cannot assert.
  if (parser.paused) parser.paused = false;
}

/** A connector whose sockets have the guard in front of undici's handlers. */
function guardedConnector(options: buildConnector.BuildOptions): buildConnector.connector {
  const connect = buildConnector(options);
  return (opts, callback) => {
    connect(opts, (...args: [Error, null] | [null, Socket]) => {
      // A failed connect calls back with the error alone.
      const socket = args[0] === null ? args[1] : null;
      if (socket) {
        // Prepended now, before undici attaches its handlers to the socket it is handed.
        for (const event of ['end', 'error', 'close'] as const) socket.prependListener(event, () => unpause(socket));
      }
      (callback as (...a: typeof args) => void)(...args);
    });
  };
}

export interface OutboundClientOptions extends Omit<Client.Options, 'connect' | 'connectTimeout' | 'socketPath' | 'allowH2'> {
  /** How the socket is made: the connect timeout, a CA for https, a unix socket path. */
  connect?: {
    timeout?: number;
    ca?: string | Buffer | Array<string | Buffer>;
    socketPath?: string;
  };
}

/**
 * An undici Client to `origin` whose every socket is guarded (above). HTTP/1.1 only: the guard
 * is for the HTTP/1 parser, and nothing here speaks h2.
 */
export function outboundClient(origin: string, options: OutboundClientOptions = {}): Client {
  const { connect = {}, ...rest } = options;
  return new Client(origin, { ...rest, allowH2: false, connect: guardedConnector({ ...connect, allowH2: false }) });
}

let guardChecked: Promise<string | null> | null = null;

/**
 * Null when the guard attaches to this undici's sockets; else why it cannot (an undici whose
 * private parser fields moved). Checked once per process and remembered: no socket, no network.
 */
export function outboundGuardProblem(): Promise<string | null> {
  return (guardChecked ??= checkGuard());
}

async function checkGuard(): Promise<string | null> {
  let version = 'of unknown version';
  try {
    version = (createRequire(import.meta.url)('undici/package.json') as { version: string }).version;
  } catch {
    // the name is enough
  }
  let verdict = `undici ${version} never handed the guard's check a socket`;
  let calls = 0;
  const stop = new AbortController();
  const client = new Client('http://outbound-guard.check', {
    allowH2: false,
    connect: (_opts, callback) => {
      const reply = callback as (error: Error | null, socket: Socket | null) => void;
      // Once: a retry after the check's socket is gone is refused, and the request aborted.
      if (calls++ > 0) return reply(new Error('the outbound guard check is over'), null);
      // Never connected: undici builds its HTTP/1 parser on whatever socket it is given, at once.
      const socket = new Socket();
      reply(null, socket);
      verdict = parserOf(socket) === null ? `undici ${version} keeps its HTTP/1 parser where the outbound guard cannot find it (nodejs/undici#5360)` : '';
      stop.abort();
      socket.destroy();
    },
  });
  try {
    await client.request({ path: '/', method: 'GET', signal: stop.signal }).then(
      (r) => r.body.dump(),
      () => undefined,
    );
  } finally {
    await client.destroy().catch(() => undefined);
  }
  return verdict === '' ? null : verdict;
}
