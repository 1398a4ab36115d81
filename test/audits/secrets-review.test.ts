// Security review of the peer plane's secrets: the handle token, the instance key, the redeem's
// refusals, fetch-peer-file's distrust of the peer and share-file's outbound discipline.
//
// Every test is a property that holds. Comments marked "Was a VIOLATION" record what the review
// found in an earlier version and how it was fixed, so a regression reads as the leak it re-opens.
// Tokens are never printed by a failing assertion here: checks are `includes(...) === false` with
// a redacted description, so a red run does not itself leak a (test) token into CI output.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createNetServer, connect } from 'node:net';
import { lstatSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Fastify from 'fastify';
import { pino } from 'pino';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { fetchPeerFile } from '../../src/tools/fetch-peer-file.js';
import { KEY_BUFFER_BYTES } from '../../src/handle/key.js';
import { mintToken, randomNonceHex } from '../../src/handle/token.js';
import { handleId, redactHandles } from '../../src/redact.js';
import { shareFile } from '../../src/tools/share-file.js';
import { callTool } from '../../src/tools/index.js';
import { resourcePlanes } from '../../src/http/plugin.js';
import { routeRawTargets } from '../../src/http/targets.js';
import { capsule as servedCapsule, openCapsule, type Capsule as Served } from '../helpers/capsule.js';
import { rawGet, rawRequest, readTrace, type RawResponse } from '../helpers/http.js';
import { listenLoopback } from '../helpers/loopback.js';
import { refusal } from '../helpers/refusal.js';
import { scratch } from '../helpers/tree.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(ROOT, 'dist/cli/main.js');
const sodium = createRequire(join(ROOT, 'src/handle/key.ts'))('sodium-native') as Record<string, (...args: any[]) => any>;

// ── Fixtures ─────────────────────────────────────────────────────────────────

interface Capsule extends Served {
  logs: () => string;
}

/**
 * An in-process capsule on 127.0.0.1 whose pino logs (at `trace`, the most verbose) go to memory.
 * Closed when the test finishes; with `shared` (in a beforeAll) the caller closes it.
 */
async function capsule(name: string, yaml: string, tree: string[] = [], shared = false): Promise<Capsule> {
  let logText = '';
  const logger = pino({ level: 'trace' }, { write: (s: string) => void (logText += s) });
  const c = await (shared ? openCapsule : servedCapsule)({ yaml: `name: ${name}\nversion: "1"\n${yaml}`, tree, containment: 'sealed', logger });
  return { ...c, logs: () => logText };
}

/** Closes capsules a beforeAll shared with its block: the teardown that beforeAll returns. */
function closing(...capsules: Capsule[]): () => Promise<void> {
  return async () => {
    for (const c of capsules.reverse()) await c.close();
  };
}

const SHARES = 'exports:\n  peer_files:\n    root: out/\n    max_ttl: 60s\n    max_bytes: 1Mi\ncapabilities:\n  network:\n    allow: ["127.0.0.1"]\n';
const FETCHES = 'capabilities:\n  peer_fetch:\n    allow: ["127.0.0.1"]\n';

/** A raw TCP listener that counts connections and answers nothing: "did the peer see anything?" */
function witness() {
  return listenLoopback(createNetServer((socket) => socket.destroy()));
}

/** A tiny HTTP server on 127.0.0.1 with a custom handler. */
async function httpServer(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  opts: { issuer?: string } = {},
): Promise<{ port: number; hits: string[]; server: HttpServer }> {
  const hits: string[] = [];
  const server = createHttpServer((req, res) => {
    // With `issuer`, the peer's card names that session, as fetch-peer-file checks before it sends a token.
    if (opts.issuer !== undefined && req.url === '/.well-known/agent-card.json') {
      const port = (server.address() as { port: number }).port;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          ...JSON.parse(card('peer', `http://127.0.0.1:${port}`)),
          capabilities: { extensions: [{ uri: 'urn:murmur:capsule:v1', params: { sessionId: opts.issuer } }] },
        }),
      );
      return;
    }
    hits.push(`${req.method} ${req.url}`);
    handler(req, res);
  });
  return { port: (await listenLoopback(server)).port, hits, server };
}

function card(name: string, url: string): string {
  return JSON.stringify({ name, version: '1', supportedInterfaces: [{ url, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }] });
}

/** The token's segments: a text that holds both of them holds the token. */
function segmentsOf(token: string): { payload: string; mac: string } {
  const [, payload, mac] = token.split('.') as [string, string, string];
  return { payload, mac };
}

/** Every way a token could sit in a text: verbatim, as its two segments, or as a JSON byte array. */
function leaks(text: string, token: string): string[] {
  const found: string[] = [];
  const { payload, mac } = segmentsOf(token);
  if (text.includes(token)) found.push('verbatim token');
  if (text.includes(payload) && text.includes(mac)) found.push('payload and MAC segments');
  const bytes = [...Buffer.from(token)].join(',');
  if (text.includes(bytes)) found.push('token bytes as a decimal array (a logged Buffer)');
  return found;
}

// ── 1. The token never reaches a log, a trace, an error body or a foreign tool result ──────────

describe('1. a handle token stays out of every record', () => {
  let reporter: Capsule;
  let reader: Capsule;
  let token: string;

  beforeAll(async () => {
    reporter = await capsule('reporter', SHARES, ['out/report.md: the report', 'out/dir/', 'secret.txt: outside'], true);
    reader = await capsule('reader', FETCHES, [], true);
    const minted = await callTool(reporter.session, 'share-file', { path: 'report.md', peer: reader.address });
    token = minted.handle as string;
    return closing(reporter, reader);
  });

  it("a full handoff plus every refusal kind leaves the token only in share-file's handle field", async () => {
    // Minted through the tool: the handle field is the one sanctioned place.
    const minted = await callTool(reporter.session, 'share-file', { path: 'report.md', peer: reader.address, ttl: '30s' });
    const t = minted.handle as string;
    const { handle: _h, ...restOfMint } = minted;
    expect(leaks(JSON.stringify(restOfMint), t)).toEqual([]);

    const fetched = await callTool(reader.session, 'fetch-peer-file', { peer: reporter.address, handle: t });
    expect(leaks(JSON.stringify(fetched), t)).toEqual([]);

    // Redeems that are refused in every way the redeem route knows, and their wire bytes.
    const wire: RawResponse[] = [];
    const base = reporter.url;
    const tampered = `${t.slice(0, -2)}${t.at(-2) === 'A' ? 'B' : 'A'}${t.at(-1)}`;
    wire.push(await rawGet(base, `/resources/peer/${t}`, [['x-murmur-audience', reader.audience]]));
    wire.push(await rawGet(base, `/resources/peer/${t}`, [['x-murmur-audience', 'someone@else:1']]));
    wire.push(await rawGet(base, `/resources/peer/${t}`));
    wire.push(await rawGet(base, `/resources/peer/${tampered}`, [['x-murmur-audience', reader.audience]]));
    wire.push(await rawGet(base, `/resources/peer/${t}x=`, [['x-murmur-audience', reader.audience]]));
    wire.push(await rawGet(base, `/resources/peer/${t}?q=${t}`, [['x-murmur-audience', t]]));
    wire.push(await rawGet(base, `/resources/peer/${t}%zz`, [['x-murmur-audience', reader.audience]]));
    wire.push(await rawGet(base, `/resources/files/${t}`));
    wire.push(await rawGet(base, `/elsewhere/${t}`));
    wire.push(await rawGet(base, `http://127.0.0.1/resources/peer/${t}`, [['x-murmur-audience', reader.audience]]));
    wire.push(await rawRequest(base, { method: 'DELETE', target: `/resources/peer/${t}` }));
    expect(wire.map((r) => r.status)).toEqual([200, 403, 400, 403, 400, 403, 400, 404, 404, 200, 405]);
    for (const res of wire) {
      // The one place a token may travel is the 200's body, which is the file, not the token.
      expect(leaks(res.raw.toString('latin1'), t), `response to a redeem with status ${res.status}`).toEqual([]);
    }

    // Fetch refusals from the reader's side, with the token in every argument it can be in.
    const refusals = await Promise.all([
      refusal(callTool(reader.session, 'fetch-peer-file', { peer: `127.0.0.1:${new URL(base).port}`, handle: tampered })),
      refusal(callTool(reader.session, 'fetch-peer-file', { peer: 'localhost:1', handle: t })),
      refusal(callTool(reader.session, 'fetch-peer-file', { peer: t, handle: t })),
      refusal(callTool(reader.session, 'fetch-peer-file', { peer: reporter.address, handle: `${t}/x` })),
    ]);
    for (const r of refusals) expect(leaks(`${r.code} ${r.message}`, t), `fetch refusal ${r.code}`).toEqual([]);

    for (const c of [reporter, reader]) {
      expect(leaks(readFileSync(c.tracePath, 'utf8'), t), 'trace').toEqual([]);
      expect(leaks(c.logs(), t), 'pino log at trace level').toEqual([]);
    }
  });

  it('a redeem after the session closed under a live listener is answered as stopping, without the token', async () => {
    const c = await capsule('closing', SHARES, ['out/a.txt: a']);
    const t = mintToken(c.session.key!, { v: 1, iss: c.session.sessionId, p: 'a.txt', exp: Date.now() + 60_000, n: randomNonceHex() }, 'x@y:1');
    await c.session.close();
    // The key is gone with the session: the redeem is answered as a stopping server answers.
    const res = await rawGet(c.url, `/resources/peer/${t}`, [['x-murmur-audience', 'x@y:1']]);
    expect(res.status).toBe(503);
    expect(res.json()).toEqual({ error: 'shutting_down', message: 'the capsule is shutting down' });
    expect(leaks(c.logs(), t)).toEqual([]);
    expect(leaks(res.raw.toString('latin1'), t)).toEqual([]);
    await c.close();
  });

  it('an error thrown inside a plane route, its text holding the token, is logged and answered without it', async () => {
    const c = await capsule('erring', SHARES, ['out/a.txt: a']);
    const t = mintToken(c.session.key!, { v: 1, iss: c.session.sessionId, p: 'a.txt', exp: Date.now() + 60_000, n: randomNonceHex() }, 'x@y:1');
    let logText = '';
    // A host configured as the README says (Fastify's own request lines carry the URL), whose own
    // hook fails on the planes' routes with the request's URL in its message.
    const host = Fastify({
      loggerInstance: pino({ level: 'trace' }, { write: (s: string) => void (logText += s) }),
      disableRequestLogging: true,
      rewriteUrl: routeRawTargets(),
    });
    host.addHook('preHandler', async (request) => {
      throw new Error(`the host's hook failed on ${request.url}`);
    });
    await host.register(resourcePlanes, { session: c.session });
    await host.listen({ host: '127.0.0.1', port: 0 });
    try {
      const res = await rawGet(`http://127.0.0.1:${(host.server.address() as { port: number }).port}`, `/resources/peer/${t}`, [
        ['x-murmur-audience', 'x@y:1'],
      ]);
      expect(res.status).toBe(500);
      expect(res.json()).toEqual({ error: 'io_error', message: 'read failed: internal error' });
      expect(logText).toContain('unhandled error');
      expect(logText).toContain('<handle:');
      expect(leaks(logText, t)).toEqual([]);
      expect(leaks(res.raw.toString('latin1'), t)).toEqual([]);
    } finally {
      await host.close();
      await c.close();
    }
  });

  // Was a VIOLATION, now fixed (src/tools/share-file.ts:136, :151, :163; refuse() at :96): share-file builds three refusal
  // messages from the raw `input.peer` (`invalid peer '${peer}'` from targetFromPeer in
  // src/manifest/destinations.ts, "capabilities.network.allow does not include the peer '${input.peer}'",
  // "the agent card of '${input.peer}' could not be fetched") and throws them without
  // redactHandles, unlike fetch-peer-file's refuse() (src/tools/fetch-peer-file.ts:138). An agent that puts a
  // handle it holds into `peer` (or a runtime that forwards one) gets the token back in the MCP
  // error result (src/tools/control.ts:36 copies refusal.message verbatim), which is exactly the message
  // log the audience binding is meant to make tokens harmless in, and which must not hold tokens.
  // The trace line is redacted (src/trace/trace.ts), so the two records disagree.
  // Fix: in mint.ts refuse(), `new Refusal(error.code, redactHandles(error.message))` as fetch.ts
  // does; better, redact once at the tool boundary (callTool's catch in src/tools/index.ts and the error
  // branch of src/tools/control.ts) so no future message can carry one.
  it.each([
    ['a bare token as the peer', (t: string) => t],
    ["a token in the peer's path", (t: string) => `localhost:1/${t}`],
    ["a token as the peer's port", (t: string) => `localhost:${t}`],
  ])('share-file refusals never echo a token: %s', async (_label, peerOf) => {
    const r = await refusal(callTool(reporter.session, 'share-file', { path: 'report.md', peer: peerOf(token) }));
    expect(r.code).toBe('peer_unreachable');
    expect(leaks(r.message, token), `message: ${redactHandles(r.message)}`).toEqual([]);
  });

  // The same violation on the wire: the MCP error result a runtime receives (and typically logs in
  // the agent's transcript) carries the token. Same cause and fix as above.
  it('over MCP, a share-file error result never carries a token', async () => {
    const dir = scratch();
    mkdirSync(join(dir, 'w', 'out'), { recursive: true });
    writeFileSync(join(dir, 'w', 'out', 'a.txt'), 'a');
    writeFileSync(
      join(dir, 'w', 'murmur.yaml'),
      'name: cap\nversion: "1"\nexports:\n  peer_files:\n    root: out/\ncapabilities:\n  network:\n    allow: [localhost]\n',
    );
    const stdout = await new Promise<string>((resolve) => {
      const child = spawn(process.execPath, [CLI, 'serve', '--workdir', join(dir, 'w'), '--trace', join(dir, 't.jsonl'), '--control', 'stdio']);
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d;
        if (out.includes('"id":2')) child.stdin.end();
      });
      child.stderr.on('data', () => undefined);
      const send = (m: unknown) => child.stdin.write(`${JSON.stringify(m)}\n`);
      send({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'rt', version: '1' } },
      });
      send({ jsonrpc: '2.0', method: 'notifications/initialized' });
      send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'share-file', arguments: { path: 'a.txt', peer: `localhost:1/${token}` } } });
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      child.on('close', () => {
        clearTimeout(timer);
        resolve(out);
      });
    });
    const reply = stdout.split('\n').find((l) => l.includes('"id":2'));
    expect(reply, 'no tools/call reply').toBeDefined();
    expect(reply).toContain('"isError":true');
    expect(leaks(reply!, token), `reply: ${redactHandles(reply!)}`).toEqual([]);
    expect(leaks(readFileSync(join(dir, 't.jsonl'), 'utf8'), token), 'the trace (redacted)').toEqual([]);
  });

  // Was a VIOLATION, now fixed (src/tools/index.ts): callTool echoes caller text unredacted into its refusals:
  // `unknown argument '${key}'` and `no tool named '${name}' exists here`. Over MCP these become
  // the error result's text (src/tools/control.ts:36). Fix: redactHandles the message at the boundary
  // (one place: the catch in callTool / the error branch in control.ts), or do not echo the text.
  it('tool-level refusals never echo a token (unknown tool name, unknown argument name)', async () => {
    const unknownTool = await refusal(callTool(reporter.session, token, {}));
    expect(unknownTool.code).toBe('unknown_tool');
    expect.soft(leaks(unknownTool.message, token), `message: ${redactHandles(unknownTool.message)}`).toEqual([]);
    const unknownArg = await refusal(callTool(reporter.session, 'share-file', { path: 'report.md', peer: reader.address, [token]: 'x' }));
    expect(unknownArg.code).toBe('invalid_argument');
    expect(leaks(unknownArg.message, token), `message: ${redactHandles(unknownArg.message)}`).toEqual([]);
  });

  // Was a VIOLATION, now fixed (src/http/listener.ts:56, the Fastify({...}) options in buildApp): no clientErrorHandler is given to Fastify, so its
  // defaultClientErrorHandler (node_modules/fastify/fastify.js:1026) logs `{ err }` for any request
  // Node's parser rejects (a bad header line, a header block over 16 KiB). Node's parser error
  // carries `rawPacket`, the request bytes, and pino's err serializer writes that Buffer out as a
  // decimal byte array: a redeem URL's token is on stderr, just not as a string redactHandles can
  // see. Only at RESOURCE_PLANE_LOG_LEVEL=trace, so low severity, but the README promises no
  // level ever carries one. Fix: pass `clientErrorHandler` to Fastify that logs only `err.code`
  // (and answers in the spec's shape with x-murmur-containment), or give the pino logger an `err`
  // serializer that drops `rawPacket` and redacts `message`.
  it('a request the HTTP parser rejects does not put its token into the log', async () => {
    const c = await capsule('parser', SHARES);
    const t = token;
    const ask = (bytes: string) =>
      new Promise<void>((resolve) => {
        const socket = connect(Number(new URL(c.url).port), '127.0.0.1', () => socket.write(bytes));
        socket.on('data', () => undefined);
        socket.on('error', () => resolve());
        socket.on('close', () => resolve());
      });
    await ask(`GET /resources/peer/${t} HTTP/1.1\r\nHost: x\r\nx-murmur-audience: a@b:1\r\nNot A Header\r\n\r\n`);
    await ask(`GET /resources/peer/${t} HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(20_000)}\r\n\r\n`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(c.logs()).toContain('client error');
    expect(leaks(c.logs(), t)).toEqual([]);
    await c.close();
  });

  // Was a VIOLATION, now fixed (src/handle/token.ts:232/237, TOKEN_PATTERN with String.replace): matches cannot overlap,
  // so a token preceded by `mh1.<seg>.` is partly swallowed by the bogus three-segment match that
  // starts at the first `mh1.` and ends at the token's own `mh1`; the rest of the line, the token's
  // payload segment and its MAC, is written in the clear (`<handle:…>.<payload>.<mac>`), and the
  // token is `mh1.` + that. This reaches the trace (fetch-peer-file's `peer`, share-file's `path`,
  // a redeem's `audience_asserted`, an operator read's `path`) and fetch-peer-file's refusal
  // message, which are redacted with the same function. Fix: find every `mh1.` start, not just
  // non-overlapping ones: e.g. redact with a zero-width lookahead,
  // `/mh1\.(?=[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)/g` to locate starts and replace each maximal
  // `mh1.<seg>.<seg>` from right to left, or repeat the replace over the result until no
  // `[A-Za-z0-9_-]{43}` MAC-shaped segment follows a redaction marker.
  it('redaction removes a token that follows an `mh1.<seg>.` prefix (trace and refusal)', async () => {
    const disguised = `mh1.x.${token}`;
    const r = await refusal(fetchPeerFile(reader.session, { peer: disguised, handle: token }));
    expect(r.code).toBe('peer_not_allowed');
    expect.soft(leaks(redactHandles(disguised), token), 'redactHandles itself').toEqual([]);
    expect.soft(leaks(r.message, token), 'fetch-peer-file refusal message').toEqual([]);
    expect.soft(leaks(readFileSync(reader.tracePath, 'utf8'), token), 'peer_file_fetch.peer in the trace').toEqual([]);
  });
});

// ── 2. The instance key ──────────────────────────────────────────────────────

describe('2. the instance key lives in secure memory only, and only while it must', () => {
  afterEach(() => vi.restoreAllMocks());

  it('is never allocated for a capsule without exports.peer_files, and is for one with it', async () => {
    const malloc = vi.spyOn(sodium, 'sodium_malloc');
    const without = await capsule('nokey', `${FETCHES}exports:\n  files:\n    root: out/\n    mode: read-only\n`);
    expect(without.session.key).toBeNull();
    expect(malloc.mock.calls.filter(([n]) => n === KEY_BUFFER_BYTES)).toHaveLength(0);
    // share-file is refused without any MAC being computed.
    const r = await refusal(callTool(without.session, 'share-file', { path: 'x', peer: '127.0.0.1:1' }));
    expect(r.code).toBe('no_peer_plane');
    const withKey = await capsule('haskey', SHARES);
    expect(withKey.session.key).not.toBeNull();
    expect(malloc.mock.calls.filter(([n]) => n === KEY_BUFFER_BYTES)).toHaveLength(1);
    await without.close();
    await withKey.close();
  });

  it('exists in exactly one place in process memory while alive, and nowhere once closed', async () => {
    // A child process scans its own /proc/self/mem for the key (and for the HMAC's ipad/opad
    // blocks, key ^ 0x36 / key ^ 0x5c) after minting and redeeming over HTTP. The needle is held
    // only XOR-masked, so the scan itself never puts a plaintext copy in memory.
    const script = `
      import { readFileSync, openSync, readSync, closeSync } from 'node:fs';
      import { createRequire } from 'node:module';
      const root = process.argv[1];
      const { launch } = await import(root + '/dist/launch/launch.js');
      const { parseManifest } = await import(root + '/dist/manifest/model.js');
      const { mintToken, verifyTokenForTests } = await import(root + '/dist/handle/token.js');
      const sodium = createRequire(root + '/dist/handle/key.js')('sodium-native');
      function scan(needleX, mask) {
        const fd = openSync('/proc/self/mem', 'r');
        const chunk = Buffer.alloc(1 << 20);
        const first = needleX[0] ^ mask[0];
        let hits = 0;
        for (const line of readFileSync('/proc/self/maps', 'utf8').trim().split('\\n')) {
          const [range, perms, , , , path = ''] = line.split(/\\s+/);
          if (path.startsWith('[vvar') || path.startsWith('[vsyscall')) continue;
          const [start, end] = range.split('-').map((h) => BigInt('0x' + h));
          // Big inaccessible reservations (V8's cage) hold nothing; libsodium's guarded pages are small.
          if (perms.startsWith('---') && end - start > 1048576n) continue;
          // Under npm run test:asan: the sanitizer's shadow (terabytes of shadow bytes, never data).
          if (process.env.RESOURCE_PLANE_ASAN && start >= 0x7fff8000n && end <= 0x10007fff8000n) continue;
          for (let a = start; a < end; a += BigInt(chunk.length)) {
            const len = Number(end - a < BigInt(chunk.length) ? end - a : BigInt(chunk.length));
            let n;
            try { n = readSync(fd, chunk, 0, len, a); } catch { break; }
            for (let i = chunk.indexOf(first); i >= 0 && i + needleX.length <= n; i = chunk.indexOf(first, i + 1)) {
              let ok = true;
              for (let j = 1; ok && j < needleX.length; j++) if ((chunk[i + j] ^ mask[j]) !== needleX[j]) ok = false;
              if (ok) hits++;
            }
          }
        }
        closeSync(fd);
        return hits;
      }
      const { session, server } = await launch({ workdir: process.argv[2], tracePath: process.argv[3],
        manifest: parseManifest('name: a\\nversion: "1"\\nexports:\\n  peer_files:\\n    root: out/\\n') });
      const key = session.key._unsafeBufferForTest();
      const mask = Buffer.alloc(32); sodium.randombytes_buf(mask);
      const kx = Buffer.alloc(32), ix = Buffer.alloc(32), ox = Buffer.alloc(32);
      sodium.sodium_mprotect_readonly(key);
      for (let i = 0; i < 32; i++) { kx[i] = key[i] ^ mask[i]; ix[i] = key[i] ^ 0x36 ^ mask[i]; ox[i] = key[i] ^ 0x5c ^ mask[i]; }
      sodium.sodium_mprotect_noaccess(key);
      for (let k = 0; k < 500; k++) {
        const t = mintToken(session.key, { v: 1, iss: session.sessionId, p: 'a.txt', exp: Date.now() + 1e6, n: 'a'.repeat(32) }, 'b@c:1');
        verifyTokenForTests(session.key, t, 'b@c:1', session.sessionId, Date.now());
        if (k % 100 === 0) await fetch(server.url + '/resources/peer/' + t, { headers: { 'x-murmur-audience': 'b@c:1' } }).then((r) => r.arrayBuffer());
      }
      globalThis.gc();
      const alive = [scan(kx, mask), scan(ix, mask), scan(ox, mask)];
      // The scanner's own proof that it finds a copy: plant a random stand-in in ordinary memory
      // and count it. Never the key itself: copying it would leave V8's transient copies behind
      // (TypedArray#set), which the closed scan below would then find.
      const probeMask = Buffer.alloc(32); sodium.randombytes_buf(probeMask);
      const probeX = Buffer.alloc(32); sodium.randombytes_buf(probeX);
      const planted = Buffer.alloc(32);
      for (let i = 0; i < 32; i++) planted[i] = probeX[i] ^ probeMask[i];
      const withPlanted = scan(probeX, probeMask);
      planted.fill(0);
      await server.close();
      await session.close();
      globalThis.gc();
      const closed = [scan(kx, mask), scan(ix, mask), scan(ox, mask)];
      process.stdout.write(JSON.stringify({ alive, withPlanted, closed }));
    `;
    const workdir = scratch(['out/a.txt: a']);
    const records = scratch();
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, ['--expose-gc', '--input-type=module', '-e', script, ROOT, workdir, join(records, 't.jsonl')]);
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d));
      child.stderr.on('data', (d: Buffer) => (stderr += d));
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.on('close', (code) => {
        clearTimeout(timer);
        if (code === 0) resolve(stdout);
        else reject(new Error(`scanner exited ${code}: ${stderr}`));
      });
    });
    const { alive, withPlanted, closed } = JSON.parse(out) as { alive: number[]; withPlanted: number; closed: number[] };
    // The scanner finds a planted value in ordinary memory (the calibration).
    expect(withPlanted).toBeGreaterThanOrEqual(1);
    // One copy: the sodium_malloc'd key itself. No ipad/opad residue from 500+ MACs.
    expect(alive).toEqual([1, 0, 0]);
    expect(closed).toEqual([0, 0, 0]);
  });

  it("is zeroed and freed on SIGTERM, SIGINT and the control channel's stdin closing", async () => {
    // A preload wraps the shared sodium-native module object of the served process and reports,
    // synchronously on stderr, each call that touches the key's secure buffer (by its size).
    const dir = scratch();
    const preload = join(dir, 'preload.mjs');
    writeFileSync(
      preload,
      `
      import { createRequire } from 'node:module';
      import { writeSync } from 'node:fs';
      const sodium = createRequire(${JSON.stringify(join(ROOT, 'dist/handle/key.js'))})('sodium-native');
      for (const name of ['sodium_malloc', 'sodium_free', 'sodium_memzero', 'sodium_mprotect_readwrite']) {
        const orig = sodium[name];
        sodium[name] = function (arg, ...rest) {
          if (name !== 'sodium_malloc' && arg && arg.secure && arg.length === ${KEY_BUFFER_BYTES}) writeSync(2, 'KEY ' + name + '\\n');
          const r = orig.call(this, arg, ...rest);
          if (name === 'sodium_malloc' && r.length === ${KEY_BUFFER_BYTES}) writeSync(2, 'KEY ' + name + '\\n');
          return r;
        };
      }
    `,
    );
    const workdir = join(dir, 'w');
    mkdirSync(join(workdir, 'out'), { recursive: true });
    writeFileSync(join(workdir, 'murmur.yaml'), 'name: cap\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n');
    const run = (how: 'SIGTERM' | 'SIGINT' | 'stdin') =>
      new Promise<{ code: number | null; keyLines: string[] }>((resolve) => {
        const args = ['--import', preload, CLI, 'serve', '--workdir', workdir, '--trace', join(dir, `${how}.jsonl`)];
        if (how === 'stdin') args.push('--control', 'stdio');
        const child = spawn(process.execPath, args);
        let stderr = '';
        child.stderr.on('data', (d: Buffer) => {
          stderr += d;
          if (stderr.includes('"msg":"serving"')) {
            if (how === 'stdin') child.stdin.end();
            else child.kill(how);
          }
        });
        child.stdout.on('data', () => undefined);
        const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
        child.on('close', (code) => {
          clearTimeout(timer);
          resolve({ code, keyLines: stderr.split('\n').filter((l) => l.startsWith('KEY ')) });
        });
      });
    const results = await Promise.all([run('SIGTERM'), run('SIGINT'), run('stdin')]);
    for (const r of results) {
      expect(r.code).toBe(0);
      // Allocated and zeroed (sodium_malloc's fill pattern) at start; unlocked, wiped, freed at the end.
      expect(r.keyLines).toEqual(['KEY sodium_malloc', 'KEY sodium_memzero', 'KEY sodium_mprotect_readwrite', 'KEY sodium_memzero', 'KEY sodium_free']);
    }
  });

  it('a mint racing shutdown hands out nothing, and nothing crashes', async () => {
    // A peer whose card takes 300 ms: the session closes while share-file waits for it.
    const slow = await httpServer((_req, res) => {
      setTimeout(() => {
        res.setHeader('content-type', 'application/json');
        res.end(card('slow', 'http://localhost:9'));
      }, 300);
    });
    const c = await capsule('racer', SHARES, ['out/a.txt: a']);
    const free = vi.spyOn(sodium, 'sodium_free');
    const pending = refusal(shareFile(c.session, { path: 'a.txt', peer: `127.0.0.1:${slow.port}` }));
    await new Promise((resolve) => setTimeout(resolve, 50));
    await c.close();
    expect(c.session.key!.destroyed).toBe(true);
    expect(free).toHaveBeenCalled();
    const r = await pending;
    expect(r.code).toBe('io_error');
    expect(r.message).not.toMatch(/mh1\./);
    expect(() => c.session.key!.hmacSha256([Buffer.from('x')])).toThrow(/destroyed/);
  });
});

// ── 3. Redeem refusals are indistinguishable ─────────────────────────────────

describe('3. tampered payload, tampered MAC, another instance and the wrong audience look the same', () => {
  let a: Capsule;
  let other: Capsule;
  const AUD = 'reader@localhost:41235';

  beforeAll(async () => {
    a = await capsule('reporter', SHARES, ['out/report.md: known bytes'], true);
    other = await capsule('reporter', SHARES, ['out/report.md: known bytes'], true);
    return closing(a, other);
  });
  afterEach(() => vi.restoreAllMocks());

  const payload = (c: Capsule) => ({ v: 1, iss: c.session.sessionId, p: 'report.md', exp: Date.now() + 60_000, n: randomNonceHex() });
  function flip(segment: string): string {
    // Change the first character, which carries no trailing bits, so the token stays canonical.
    return (segment[0] === 'A' ? 'B' : 'A') + segment.slice(1);
  }
  function variants(): Array<[string, string, string]> {
    const token = mintToken(a.session.key!, payload(a), AUD);
    const [tag, p, mac] = token.split('.') as [string, string, string];
    return [
      ['tampered payload', `${tag}.${flip(p)}.${mac}`, AUD],
      ['tampered MAC', `${tag}.${p}.${flip(mac)}`, AUD],
      ['another instance', mintToken(other.session.key!, payload(a), AUD), AUD],
      ['wrong audience', token, 'attacker@localhost:1'],
      ['foreign issuer', mintToken(a.session.key!, { ...payload(a), iss: 'ses_elsewhere' }, AUD), AUD],
    ];
  }

  it('gives the same status, headers (names, order, values) and body, apart from date and x-murmur-handle-id', async () => {
    const responses = await Promise.all(variants().map(([, t, aud]) => rawGet(a.url, `/resources/peer/${t}`, [['x-murmur-audience', aud]])));
    const shape = (r: RawResponse) => ({
      status: r.status,
      statusText: r.statusText,
      headers: r.rawHeaders.filter(([n]) => !['date', 'x-murmur-handle-id'].includes(n.toLowerCase())),
      names: r.headerNames,
      body: r.body.toString('latin1'),
    });
    const first = shape(responses[0]!);
    expect(first.status).toBe(403);
    expect(first.body).toBe('{"error":"handle_not_valid","message":"the handle is not valid for this capsule"}');
    for (const r of responses) expect(shape(r)).toEqual(first);
    // The handle id is the SHA-256 of the token sent: it tells the prober nothing it did not send.
    for (const r of responses) expect(r.header('x-murmur-handle-id')).toMatch(/^[0-9a-f]{16}$/);

    // The trace records them alike too: no path, one outcome, one reason.
    const redeems = readTrace(a.tracePath)
      .filter((e) => e.event_type === 'peer_handle_redeem')
      .slice(-responses.length);
    for (const e of redeems) {
      expect({ path: e.path, outcome: e.outcome, reason: e.reason, bytes: e.bytes, sha256: e.sha256 }).toEqual({
        path: null,
        outcome: 'handle_not_valid',
        reason: 'the handle is not valid for this capsule',
        bytes: null,
        sha256: null,
      });
    }
  });

  it('runs the same work for every one of them: one full HMAC, one constant-time compare, nothing branch-dependent before it', async () => {
    const { verifyTokenForTests } = await import('../../src/handle/token.js');
    const counts: Record<string, Record<string, number>> = {};
    for (const [label, t, aud] of variants()) {
      const tally: Record<string, number> = {};
      const spies = ['crypto_hash_sha256_init', 'crypto_hash_sha256_update', 'crypto_hash_sha256_final', 'sodium_memcmp', 'sodium_mprotect_readwrite'].map(
        (name) => {
          const orig = sodium[name]!;
          return vi.spyOn(sodium, name).mockImplementation((...args: unknown[]) => {
            tally[name] = (tally[name] ?? 0) + 1;
            return orig(...args);
          });
        },
      );
      const memcmp = vi.spyOn(Buffer.prototype, 'equals');
      const result = verifyTokenForTests(a.session.key!, t, aud, a.session.sessionId, Date.now());
      expect(result.ok).toBe(false);
      expect(memcmp).not.toHaveBeenCalled();
      for (const s of spies) s.mockRestore();
      memcmp.mockRestore();
      counts[label] = tally;
    }
    // The states are derived at generation: a MAC copies them (no init), hashes the input (one
    // buffer) and the inner digest, and unlocks the key's buffer once.
    const expected = { crypto_hash_sha256_update: 2, crypto_hash_sha256_final: 2, sodium_memcmp: 1, sodium_mprotect_readwrite: 1 };
    for (const [label, tally] of Object.entries(counts)) expect(tally, label).toEqual(expected);
  });

  it('computes no MAC for a refusal that precedes it (shape, missing audience), so the order is observable only by code', async () => {
    const t = mintToken(a.session.key!, payload(a), AUD);
    const readonly = vi.spyOn(sodium, 'sodium_mprotect_readwrite');
    const missing = await rawGet(a.url, `/resources/peer/${t}`, [['x-murmur-audience', '   ']]);
    const malformed = await rawGet(a.url, `/resources/peer/${t}=`, [['x-murmur-audience', AUD]]);
    expect(missing.json().error).toBe('missing_audience');
    expect(malformed.json().error).toBe('malformed_handle');
    expect(readonly).not.toHaveBeenCalled();
  });
});

// ── 4. fetch-peer-file trusts nothing the peer says or is ─────────────────────

describe('4. fetch-peer-file', () => {
  let reader: Capsule;
  const TOKEN_LIKE = `mh1.${Buffer.from('{"v":1,"iss":"x","p":"../../etc/passwd","exp":1,"n":"0"}').toString('base64url')}.${Buffer.alloc(32, 7).toString('base64url')}`;

  beforeAll(async () => {
    reader = await capsule('reader', 'capabilities:\n  peer_fetch:\n    allow: ["127.0.0.1", "http://localhost:1"]\n', [], true);
    return closing(reader);
  });

  it('connects to no peer outside peer_fetch.allow, however it is spelled', async () => {
    const w = await witness();
    const p = w.port;
    const spellings = [
      `localhost:${p}`,
      `http://localhost:${p}`,
      `https://localhost:${p}`,
      `[::ffff:127.0.0.1]:${p}`,
      `127.0.0.1.:${p}`,
      `http://user@127.0.0.1:${p}`,
      `http://127.0.0.1:${p}/path`,
      `0x7f000001:${p}`,
      `127.1:${p}`,
      ` 127.0.0.1:${p}`,
      `http://localhost:${p}#127.0.0.1`,
      `127.0.0.1%2e:${p}`,
    ];
    for (const peer of spellings) {
      const r = await refusal(fetchPeerFile(reader.session, { peer, handle: TOKEN_LIKE }));
      expect(r.code, peer).toBe('peer_not_allowed');
    }
    expect(w.connections()).toBe(0);
  });

  it('bounds a peer that trickles its body forever by the total timeout, and stores nothing', async () => {
    const peer = await httpServer(
      (_req, res) => {
        res.writeHead(200, { etag: `"sha256:${'0'.repeat(64)}"`, 'content-length': '100000' });
        const timer = setInterval(() => res.write('x'), 50);
        res.on('close', () => clearInterval(timer));
      },
      { issuer: 'x' },
    );
    const started = Date.now();
    const r = await refusal(fetchPeerFile(reader.session, { peer: `127.0.0.1:${peer.port}`, handle: TOKEN_LIKE }, { totalTimeoutMs: 1_000 }));
    expect(r.code).toBe('peer_unreachable');
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(readdirSync(join(reader.workdir, 'peer-in'))).toEqual([]);
  });

  it("follows no redirect, keeps the peer's words out of its refusal, and lands only under peer-in/", async () => {
    const w = await witness();
    const peer = await httpServer(
      (_req, res) => {
        res.writeHead(307, {
          location: `http://127.0.0.1:${w.port}/resources/peer/${TOKEN_LIKE}`,
          'content-type': 'application/json',
          'x-murmur-generation': '-1',
        });
        res.end(JSON.stringify({ error: 'ok', message: `see ${reader.workdir} and ${TOKEN_LIKE}` }));
      },
      { issuer: 'x' },
    );
    const r = await refusal(fetchPeerFile(reader.session, { peer: `127.0.0.1:${peer.port}`, handle: TOKEN_LIKE }));
    expect(r.code).toBe('http_307');
    expect(r.message).not.toContain(reader.workdir);
    expect(leaks(r.message, TOKEN_LIKE)).toEqual([]);
    expect(w.connections()).toBe(0);

    // A good answer for a payload hint of `../../etc/passwd` lands as a plain name under peer-in/.
    const body = Buffer.from('landed');
    const { createHash } = await import('node:crypto');
    const good = await httpServer(
      (_req, res) => {
        res.writeHead(200, { etag: `"sha256:${createHash('sha256').update(body).digest('hex')}"`, 'content-length': String(body.length) });
        res.end(body);
      },
      { issuer: 'x' },
    );
    const ok = await callTool(reader.session, 'fetch-peer-file', { peer: `127.0.0.1:${good.port}`, handle: TOKEN_LIKE });
    expect(ok.path).toBe(`peer-in/${handleId(TOKEN_LIKE)}-passwd`);
    expect(lstatSync(join(reader.workdir, ok.path as string)).isFile()).toBe(true);
    expect(readdirSync(reader.workdir).sort()).toEqual(['peer-in']);
  });

  it('refuses to land through a peer-in that became a symlink, writing nothing outside', async () => {
    const outside = scratch();
    const c = await capsule('reader2', FETCHES);
    symlinkSync(outside, join(c.workdir, 'peer-in'));
    const body = Buffer.from('x');
    const { createHash } = await import('node:crypto');
    const good = await httpServer(
      (_req, res) => {
        res.writeHead(200, { etag: `"sha256:${createHash('sha256').update(body).digest('hex')}"`, 'content-length': '1' });
        res.end(body);
      },
      { issuer: 'x' },
    );
    const r = await refusal(fetchPeerFile(c.session, { peer: `127.0.0.1:${good.port}`, handle: TOKEN_LIKE }));
    expect(r.code).toBe('io_error');
    expect(r.message).not.toContain(outside);
    expect(readdirSync(outside)).toEqual([]);
  });
});

// ── 5. share-file's only outbound request is the allowed card fetch ───────────

describe('5. share-file', () => {
  let reporter: Capsule;

  beforeAll(async () => {
    reporter = await capsule('reporter', SHARES, ['out/report.md: r', 'out/dir/', 'out/esc -> ../secret.txt', 'secret.txt: s', 'out/fifo |'], true);
    return closing(reporter);
  });

  it('contacts nothing but the allowed peer: not a card URL pointing elsewhere, not a redirect, not a disallowed host', async () => {
    const w = await witness();
    const elsewhere = await httpServer((_req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(card('reader', `http://127.0.0.1:${w.port}/`));
    });
    const minted = await shareFile(reporter.session, { path: 'report.md', peer: `127.0.0.1:${elsewhere.port}` });
    expect(minted.audience).toBe(`reader@127.0.0.1:${w.port}`);
    expect(elsewhere.hits).toEqual(['GET /.well-known/agent-card.json']);

    const redirecting = await httpServer((_req, res) => {
      res.writeHead(302, { location: `http://127.0.0.1:${w.port}/.well-known/agent-card.json` });
      res.end();
    });
    expect((await refusal(shareFile(reporter.session, { path: 'report.md', peer: `127.0.0.1:${redirecting.port}` }))).code).toBe('peer_unreachable');

    // localhost is not 127.0.0.1: the allow list names hosts exactly.
    for (const peer of [`localhost:${w.port}`, `http://[::1]:${w.port}`, `http://127.0.0.1.:${w.port}`]) {
      expect((await refusal(shareFile(reporter.session, { path: 'report.md', peer }))).code, peer).toBe('peer_not_allowed');
    }
    expect(w.connections()).toBe(0);
  });

  it('refuses every bad path without naming a host path or the secret', async () => {
    const w = await witness();
    const peer = `127.0.0.1:${w.port}`;
    for (const path of ['../secret.txt', '/etc/passwd', 'esc', 'dir', 'fifo', 'missing', 'dir/../report.md', '%2e%2e/secret.txt', '']) {
      const r = await refusal(shareFile(reporter.session, { path, peer }));
      expect(r.message, path).not.toContain(reporter.workdir);
      expect(r.message, path).not.toContain('/tmp');
      expect(r.message, path).toContain('exports.peer_files.root');
    }
    expect(w.connections()).toBe(0);
  });
});
