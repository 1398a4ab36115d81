// The outbound guard (src/outbound-client.ts) reads undici 7's private parser fields to keep a peer's
// FIN from ending the process mid-fetch (nodejs/undici#5360). An undici whose fields moved would
// leave the guard doing nothing, silently; so whether it can attach is checked, and fetch-peer-file
// refuses, saying why, when it cannot. Here the changed shape is real: a copy of the installed
// undici whose parser calls its pause flag `halted` (sed over client-h1.js), which a real `serve`
// loads in place of its own through a resolve hook (NODE_OPTIONS --import). Without the check, the
// 128 KiB answer ended by a FIN below ends that serve with an AssertionError.
import { randomBytes } from 'node:crypto';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import * as nodeModule from 'node:module';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { answerBody, listenLoopback, onRequestHead } from '../helpers/loopback.js';
import { startMcpServe } from '../helpers/mcp.js';
import { scratch } from '../helpers/tree.js';
import { agentCardAnswer } from '../helpers/card.js';

const ISSUER = 'ses_guard_peer';
const UNDICI = dirname(createRequire(import.meta.url).resolve('undici/package.json'));
const UNDICI_VERSION = (JSON.parse(readFileSync(join(UNDICI, 'package.json'), 'utf8')) as { version: string }).version;

/** A copy of undici in `base/node_modules/undici` whose HTTP/1 parser names its pause flag `halted`. */
function changedUndici(base: string): void {
  const copy = join(base, 'node_modules', 'undici');
  cpSync(UNDICI, copy, { recursive: true });
  const h1 = join(copy, 'lib', 'dispatcher', 'client-h1.js');
  const source = readFileSync(h1, 'utf8');
  const changed = source.replace(/\bpaused\b/g, 'halted');
  expect(changed).not.toBe(source);
  writeFileSync(h1, changed);
}

/** A preload that resolves `undici` (and its files) from `base` instead of this package. */
function redirectHook(base: string): string {
  const hook = join(base, 'redirect-undici.mjs');
  writeFileSync(
    hook,
    `import { registerHooks } from 'node:module';
const parentURL = ${JSON.stringify(pathToFileURL(join(base, 'x.js')).href)};
registerHooks({ resolve(specifier, context, next) {
  return specifier === 'undici' || specifier.startsWith('undici/') ? next(specifier, { ...context, parentURL }) : next(specifier, context);
} });
`,
  );
  return hook;
}

/** A raw peer: its card names ISSUER; a redeem is answered 200 with 128 KiB, then a FIN. */
async function closingPeer(seen: string[]): Promise<string> {
  const body = randomBytes(131_072);
  const server = createServer((socket: Socket) =>
    onRequestHead(socket, (head) => {
      seen.push(head.split('\r\n')[0]!);
      if (head.startsWith('GET /.well-known/agent-card.json ')) {
        socket.end(agentCardAnswer((server.address() as { port: number }).port, ISSUER));
        return;
      }
      answerBody(socket, body, 'close', 0, 'application/octet-stream');
    }),
  );
  return (await listenLoopback(server)).address;
}

describe('an undici whose private parser fields moved', () => {
  // module.registerHooks (Node 22.15+) is how the copy replaces the real undici.
  it.skipIf(typeof (nodeModule as { registerHooks?: unknown }).registerHooks !== 'function')(
    'serve says at start-up that fetch-peer-file is disabled, refuses every fetch with that reason, and lives on',
    async () => {
      const base = scratch();
      changedUndici(base);
      const hook = redirectHook(base);
      const workdir = scratch();
      writeFileSync(join(workdir, 'murmur.yaml'), 'name: reader\nversion: "1"\ncapabilities:\n  peer_fetch:\n    allow: ["127.0.0.1"]\n');
      const trace = join(scratch(), 'trace.jsonl');
      // Unconfined: the copy lies in this test's scratch, which a confined server could not read.
      const serve = await startMcpServe(['--workdir', workdir, '--trace', trace, '--no-landlock'], { env: { NODE_OPTIONS: `--import ${hook}` } });
      const seen: string[] = [];
      const peer = await closingPeer(seen);
      const payload = Buffer.from(JSON.stringify({ v: 1, iss: ISSUER, p: 'blob.bin', exp: Date.now() + 60_000, n: '0'.repeat(32) }));
      const handle = `mh1.${payload.toString('base64url')}.${randomBytes(32).toString('base64url')}`;
      const answer = (await serve.client.callTool({ name: 'fetch-peer-file', arguments: { peer, handle } }).catch((error: unknown) => {
        throw new Error(`the fetch ended the session: ${String(error)}\n${serve.stderr()}`);
      })) as { isError?: boolean; content: Array<{ text: string }> };
      const why = `undici ${UNDICI_VERSION} keeps its HTTP/1 parser where the outbound guard cannot find it`;
      expect(answer.isError).toBe(true);
      const refusal = JSON.parse(answer.content[0]!.text) as { error: string; message: string };
      expect(refusal.error).toBe('io_error');
      expect(refusal.message).toContain(`fetch-peer-file is disabled: ${why}`);
      expect(refusal.message).not.toContain('mh1.');
      // Refused before any socket: the peer saw nothing, not even a card request.
      expect(seen).toEqual([]);
      // Said at start-up too, before any fetch.
      expect(serve.stderr()).toContain('fetch-peer-file is disabled: the outbound guard cannot attach to this undici');
      await serve.client.close();
      const events = readFileSync(trace, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(events.find((e) => e.event_type === 'peer_file_fetch')).toMatchObject({ outcome: 'io_error', stored_path: null });
      expect(events.at(-1)!.event_type).toBe('session_end');
      expect(serve.stderr()).not.toMatch(/AssertionError|ERR_ASSERTION/);
    },
  );
});
