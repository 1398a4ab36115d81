// A peer that ends its redeem answer at an awkward moment must not end the capsule that fetches.
// undici 7's HTTP/1 parser pauses when a response body is not read as fast as it arrives (its
// body stream holds 64 KiB), and a FIN or a reset that reaches a paused parser trips its
// `assert(!this.paused)` inside a socket event handler (nodejs/undici#5360): an uncaught
// AssertionError that ended `resource-plane serve` mid-fetch, with no `session_end` and the trace
// cut off. fetch-peer-file pauses that parser every time a body of 64 KiB or more arrives while it
// opens its landing. Here a raw `net` peer (card and redeem) answers a real `serve --control
// stdio`, driven through the MCP SDK's client, with bodies around 64 KiB and of 1 MiB: whole with
// `connection: close`, whole on a kept-alive connection, delimited by the FIN alone (no
// content-length: found by the peer-lies property, the guard's first version failed those), cut
// short by a FIN, or cut by a reset. The
// session survives every one, lands exactly the whole bodies, refuses the cut ones with nothing
// landed, traces each fetch, and ends with `session_end`.
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { handleId } from '../../src/redact.js';
import { answerBody, listenLoopback, onRequestHead, type BodyEnding } from '../helpers/loopback.js';
import { startMcpServe } from '../helpers/mcp.js';
import { scratch } from '../helpers/tree.js';
import { sha256Hex } from '../helpers/http.js';

const ISSUER = 'ses_closing_peer';
const MANIFEST = 'name: reader\nversion: "1"\ncapabilities:\n  peer_fetch:\n    allow: ["127.0.0.1"]\n';

/** Sizes on both sides of undici's 64 KiB body buffer and of two socket reads, and one that streams. */
const SIZES = [65_535, 65_536, 65_537, 70_000, 131_072, 131_073, 1_048_576];
/**
 * When the reset follows the bytes: it must reach the fetcher while its parser is still paused
 * (before the landing is open), which on this machine is a window of a millisecond or two.
 */
const RESET_AFTER_MS = [0, 1, 2, 5];

/** How the peer ends its 200: the whole body then FIN; the whole body kept open; no content-length, the FIN ends it; cut short then FIN; cut short then RST. */
type Ending = BodyEnding;

function cardFor(port: number): string {
  return JSON.stringify({
    name: 'peer',
    supportedInterfaces: [{ url: `http://127.0.0.1:${port}`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }],
    capabilities: { extensions: [{ uri: 'urn:murmur:capsule:v1', params: { planes: ['peer_files'], sessionId: ISSUER } }] },
  });
}

/** A well-shaped handle naming ISSUER (its MAC is noise: the fetcher never verifies it). */
function handleFor(name: string): string {
  const payload = Buffer.from(JSON.stringify({ v: 1, iss: ISSUER, p: name, exp: Date.now() + 60_000, n: randomBytes(16).toString('hex') }));
  return `mh1.${payload.toString('base64url')}.${randomBytes(32).toString('base64url')}`;
}

/**
 * A raw peer: the card on its path, and to a redeem a 200 of `body` (its etag true) ended as
 * `ending` says. A cut body promises ten bytes more than it sends, and sends them all at once with
 * the head, so the parser pauses on the last byte it will ever get.
 */
async function closingPeer(body: Buffer, ending: Ending, resetAfterMs = 0): Promise<string> {
  const server = createServer((socket: Socket) =>
    onRequestHead(socket, (head) => {
      if (head.startsWith('GET /.well-known/agent-card.json ')) {
        const card = cardFor((server.address() as { port: number }).port);
        socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(card)}\r\nconnection: close\r\n\r\n${card}`);
        return;
      }
      answerBody(socket, body, ending, resetAfterMs, 'application/octet-stream', ['x-murmur-generation: 3']);
    }),
  );
  return (await listenLoopback(server)).address;
}

interface ToolAnswer {
  isError?: boolean;
  structuredContent?: Record<string, unknown>;
  content: Array<{ text: string }>;
}

/**
 * One session fetching a body of each size ended as `ending` (a reset after each delay); then the
 * control channel closes. Returns each answer and the trace, once the session has ended.
 */
async function fetchEach(ending: Ending) {
  const workdir = scratch();
  writeFileSync(join(workdir, 'murmur.yaml'), MANIFEST);
  const trace = join(scratch(), 'trace.jsonl');
  const serve = await startMcpServe(['--workdir', workdir, '--trace', trace]);
  const results: Array<{ size: number; body: Buffer; handle: string; answer: ToolAnswer }> = [];
  for (const size of SIZES) {
    for (const delay of ending === 'reset' ? RESET_AFTER_MS : [0]) {
      const body = randomBytes(size);
      const peer = await closingPeer(body, ending, delay);
      const handle = handleFor(`blob-${size}.bin`);
      const answer = await serve.client.callTool({ name: 'fetch-peer-file', arguments: { peer, handle } }).catch((error: unknown) => {
        // The session is gone: say how it ended.
        throw new Error(`fetch-peer-file of ${size} bytes (${ending}) ended the session: ${String(error)}\n${serve.stderr()}`);
      });
      results.push({ size, body, handle, answer: answer as ToolAnswer });
    }
  }
  // Closing the control channel ends the session; close() waits for the process to exit.
  await serve.client.close();
  const events = readFileSync(trace, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { workdir, results, events, stderr: serve.stderr() };
}

/** What every ending must leave: one traced fetch each, no crash, `session_end` last. */
function assertSessionSurvived(run: Awaited<ReturnType<typeof fetchEach>>): void {
  expect(run.stderr).not.toMatch(/AssertionError|ERR_ASSERTION|uncaught/i);
  expect(run.events.at(-1)!.event_type).toBe('session_end');
  const fetches = run.events.filter((e) => e.event_type === 'peer_file_fetch');
  expect(fetches.map((e) => e.handle_id)).toEqual(run.results.map((r) => handleId(r.handle)));
}

describe('a peer that closes its redeem answer while the fetcher is not reading', () => {
  it.each<Ending>(['close', 'keep-alive', 'unframed'])(
    'a whole body around 64 KiB (%s) lands whole, and the session lives on to session_end',
    async (ending) => {
      const run = await fetchEach(ending);
      assertSessionSurvived(run);
      for (const r of run.results) {
        expect(r.answer.isError, `${r.size} bytes: ${r.answer.content[0]?.text}`).toBeFalsy();
        const landed = r.answer.structuredContent as { path: string; bytes: number; sha256: string; generation: number };
        expect(landed).toMatchObject({ path: `peer-in/${handleId(r.handle)}-blob-${r.size}.bin`, bytes: r.size, sha256: sha256Hex(r.body), generation: 3 });
        expect(readFileSync(join(run.workdir, landed.path)).equals(r.body)).toBe(true);
      }
      const fetches = run.events.filter((e) => e.event_type === 'peer_file_fetch');
      expect(fetches.map((e) => [e.outcome, e.bytes])).toEqual(run.results.map((r) => ['ok', r.size]));
    },
  );

  it.each<Ending>(['early-close', 'reset'])('a body cut short around 64 KiB (%s) is refused, nothing lands, and the session lives on', async (ending) => {
    const run = await fetchEach(ending);
    assertSessionSurvived(run);
    for (const r of run.results) {
      expect(r.answer.isError, `${r.size} bytes`).toBe(true);
      expect(JSON.parse(r.answer.content[0]!.text).error, `${r.size} bytes`).toBe('peer_unreachable');
    }
    expect(readdirSync(join(run.workdir, 'peer-in'))).toEqual([]);
    const fetches = run.events.filter((e) => e.event_type === 'peer_file_fetch');
    expect(fetches.map((e) => [e.outcome, e.stored_path])).toEqual(run.results.map(() => ['peer_unreachable', null]));
  });
});
