// `resource-plane ls` and `get` against a raw server that ends its 200 at an awkward moment. In
// undici 7 a FIN or reset that reaches a paused HTTP/1 parser (a body not read as fast as it
// arrives: `get` opens its temporary file between the headers and the first read) trips an
// assertion inside a socket handler (nodejs/undici#5360): the command died with an AssertionError
// on stderr and exit status 1, not one of its own statuses. Every outbound client now goes through
// src/outbound-client.ts. Here, bodies around 64 KiB and of 1 MiB: whole with `connection: close`
// or on a kept-alive connection or delimited by the FIN alone are saved (listed) whole with status
// 0; cut short by a FIN or a
// reset they are refused with status 3 (the server broke off) and nothing is saved. `ls` reads
// its listing as it arrives and was not seen to die, but rides the same Client and is held to the same.
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCliAsync as runCli } from '../helpers/cli.js';
import { answerBody, listenLoopback, onRequestHead, type BodyEnding } from '../helpers/loopback.js';
import { scratch } from '../helpers/tree.js';

type Ending = BodyEnding;

const SIZES = [65_536, 65_537, 131_072, 1_048_576];
/** A reset must find the client's parser paused; one delay or another does on this machine. */
const RESET_AFTER_MS = [1, 5];

/** A listing of exactly `size` bytes (one entry, its path padded). */
function listingOf(size: number): Buffer {
  const listing = {
    root: 'out/',
    mode: 'read-only',
    max_bytes: 1024,
    generation: 0,
    containment_achieved: 'sealed',
    entries: [{ path: '', size_bytes: 6, mtime_ms: 1, sha256: 'a'.repeat(64) }],
  };
  listing.entries[0]!.path = 'p'.repeat(size - Buffer.byteLength(JSON.stringify(listing)));
  return Buffer.from(JSON.stringify(listing));
}

/** A raw server answering any request with a 200 of `body` (its etag true), ended as `ending` says. */
async function closingServer(body: Buffer, ending: Ending, resetAfterMs: number): Promise<string> {
  const server = createServer((socket: Socket) => onRequestHead(socket, () => answerBody(socket, body, ending, resetAfterMs, 'application/json')));
  return `http://${(await listenLoopback(server)).address}`;
}

const cases = (ending: Ending) => SIZES.flatMap((size) => (ending === 'reset' ? RESET_AFTER_MS : [0]).map((delay) => ({ size, delay })));

describe.each(['get', 'ls'] as const)('%s against a server that closes its answer while the client is not reading', (verb) => {
  const run = async (size: number, ending: Ending, delay: number) => {
    const body = verb === 'ls' ? listingOf(size) : randomBytes(size);
    const url = await closingServer(body, ending, delay);
    const dir = scratch();
    const r = await runCli(verb === 'ls' ? ['ls', url, '--json'] : ['get', url, 'blob.bin', '-o', join(dir, 'blob.bin')]);
    const where = `${verb}, ${size} bytes, ${ending}${ending === 'reset' ? ` after ${delay} ms` : ''}: ${r.stderr}`;
    expect(r.stderr, where).not.toMatch(/AssertionError|ERR_ASSERTION/);
    return { body, dir, r, where };
  };

  it.each<Ending>(['close', 'keep-alive', 'unframed'])('a whole body (%s) is taken whole, status 0', async (ending) => {
    for (const { size, delay } of cases(ending)) {
      const { body, dir, r, where } = await run(size, ending, delay);
      expect(r.status, where).toBe(0);
      if (verb === 'get') expect(readFileSync(join(dir, 'blob.bin')).equals(body), where).toBe(true);
      else expect(JSON.parse(r.stdout), where).toEqual(JSON.parse(body.toString()));
    }
  });

  it.each<Ending>(['early-close', 'reset'])('a body cut short (%s) is refused with status 3 and nothing is saved', async (ending) => {
    for (const { size, delay } of cases(ending)) {
      const { dir, r, where } = await run(size, ending, delay);
      expect(r.status, where).toBe(3);
      expect(r.stdout, where).toBe('');
      expect(r.stderr, where).toMatch(
        verb === 'get'
          ? /^error: the download from http:\/\/127\.0\.0\.1:\d+ broke off: .*; nothing was saved\n$/
          : /^error: cannot reach http:\/\/127\.0\.0\.1:\d+: /,
      );
      expect(readdirSync(dir), where).toEqual([]);
    }
  });
});
