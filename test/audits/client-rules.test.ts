// The rules the two HTTP clients share, each checked on both through real sockets so that neither
// can drift from the other or from what the planes write: `get` (src/cli/client.ts) and
// fetch-peer-file (src/tools/fetch-peer-file.ts) accept exactly the etags the planes write and
// refuse every other spelling alike, take a body only when the etag names exactly the bytes that
// arrived (one reader, src/response-body.ts), and read a refusal body up to the same cap.
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { list } from '../../src/cli/client.js';
import { get } from '../../src/cli/download.js';
import { ClientError } from '../../src/cli/exit.js';
import { Refusal } from '../../src/codes.js';
import { BodyFailure, ERROR_BODY_MAX_BYTES, readVerifiedBody } from '../../src/response-body.js';
import { fetchPeerFile } from '../../src/tools/fetch-peer-file.js';
import { formatEtag, parseEtag } from '../../src/wire.js';
import { capsule, offlineCapsule } from '../helpers/capsule.js';
import { listenLoopback } from '../helpers/loopback.js';
import { scratch } from '../helpers/tree.js';
import { agentCardAnswer } from '../helpers/card.js';
import { sha256Hex } from '../helpers/http.js';

const ISSUER = 'ses_rules';
const FETCHER = `name: gamma
version: "1"
capabilities:
  peer_fetch:
    allow: ["127.0.0.1"]
`;

/** A handle naming ISSUER, whose MAC is noise: the server here never verifies it. */
function handle(): string {
  const payload = Buffer.from(JSON.stringify({ v: 1, iss: ISSUER, p: 'report.md', exp: Date.now() + 60_000, n: '0'.repeat(32) }));
  return `mh1.${payload.toString('base64url')}.${randomBytes(32).toString('base64url')}`;
}

/**
 * One server both clients talk to: the agent card (naming ISSUER, so fetch-peer-file sends its
 * handle) for the card path, and `answer` written raw to the socket for any other request.
 */
async function server(answer: string | Buffer): Promise<{ url: string; address: string }> {
  const srv = createServer((socket: Socket) => {
    let head = '';
    socket.on('error', () => undefined);
    socket.on('data', (chunk) => {
      if (head.includes('\r\n\r\n')) return;
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      if (head.startsWith('GET /.well-known/agent-card.json ')) {
        socket.end(agentCardAnswer((srv.address() as { port: number }).port, ISSUER));
        return;
      }
      socket.end(answer);
    });
  });
  const lb = await listenLoopback(srv);
  return { url: `http://${lb.address}`, address: lb.address };
}

/** A 200 with `headers` (raw lines) and `body`, framed by content-length. */
function ok(headers: string[], body: Buffer | string): Buffer {
  const bytes = Buffer.from(body);
  return Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\n${[...headers, `content-length: ${bytes.length}`].join('\r\n')}\r\nconnection: close\r\n\r\n`), bytes]);
}

type Outcome = { saved: Buffer } | { error: string; code?: string };

/** What each client makes of one answer: the bytes it saved, or its refusal's words (nothing saved). */
async function bothClients(answer: Buffer, maxBytes?: number): Promise<{ get: Outcome; fetch: Outcome }> {
  const { url, address } = await server(answer);
  const dir = scratch();
  const got = await get(url, 'report.md', { output: join(dir, 'report.md'), maxBytes }).then(
    (r): Outcome => ({ saved: readFileSync(r.savedTo!) }),
    (error: unknown): Outcome => {
      if (!(error instanceof ClientError)) throw error;
      expect(readdirSync(dir)).toEqual([]);
      return { error: error.message };
    },
  );
  const gamma = await offlineCapsule({ yaml: FETCHER, advertise: 'http://localhost:4242' });
  const fetched = await fetchPeerFile(gamma.session, { peer: address, handle: handle() }, { maxBytes }).then(
    (r): Outcome => ({ saved: readFileSync(join(gamma.workdir, r.path)) }),
    (error: unknown): Outcome => {
      if (!(error instanceof Refusal)) throw error;
      expect(readdirSync(gamma.workdir).filter((n) => n !== 'peer-in')).toEqual([]);
      if (readdirSync(gamma.workdir).includes('peer-in')) expect(readdirSync(join(gamma.workdir, 'peer-in'))).toEqual([]);
      return { error: error.message, code: error.code };
    },
  );
  return { get: got, fetch: fetched };
}

describe('one etag format', () => {
  const BODY = 'the report';

  it('is what the planes write: a served file parses back to the SHA-256 of its bytes', async () => {
    const c = await capsule({ yaml: 'name: a\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n', tree: [`out/report.md: ${BODY}`] });
    const res = await fetch(`${c.url}/resources/files/report.md`);
    expect(Buffer.from(await res.arrayBuffer()).toString()).toBe(BODY);
    expect(res.headers.get('etag')).toBe(formatEtag(sha256Hex(BODY)));
    expect(parseEtag(res.headers.get('etag'))).toBe(sha256Hex(BODY));
  });

  it.each([
    ['absent', null],
    ['unquoted', `sha256:${sha256Hex(BODY)}`],
    ['uppercase hex', `"sha256:${sha256Hex(BODY).toUpperCase()}"`],
    ['weak', `W/"sha256:${sha256Hex(BODY)}"`],
    ['another algorithm', `"sha512:${sha256Hex(BODY)}"`],
    ['truncated', `"sha256:${sha256Hex(BODY).slice(0, 63)}"`],
    ['one hex too many', `"sha256:${sha256Hex(BODY)}0"`],
    ['a list', `"sha256:${sha256Hex(BODY)}", "sha256:${sha256Hex(BODY)}"`],
  ])('an etag that is %s is refused by both clients before a byte is saved', async (_label, etag) => {
    expect(parseEtag(etag)).toBeNull();
    const r = await bothClients(ok(etag === null ? [] : [`etag: ${etag}`], BODY));
    expect(r.get).toEqual({ error: expect.stringMatching(/^etag mismatch: the server said .*, which names no sha256 digest; nothing was saved$/) });
    expect(r.fetch).toEqual({ code: 'etag_mismatch', error: `the peer's etag is not "sha256:<hex>", so the bytes cannot be checked; nothing was stored` });
  });

  it('an etag repeated across two headers is refused by both clients', async () => {
    const etag = formatEtag(sha256Hex(BODY));
    const r = await bothClients(ok([`etag: ${etag}`, `etag: ${etag}`], BODY));
    expect(r.get).toEqual({ error: expect.stringMatching(/^etag mismatch: .*which names no sha256 digest; nothing was saved$/) });
    expect(r.fetch).toMatchObject({ code: 'etag_mismatch' });
  });

  it("the planes' own etag is accepted by both clients, and the bytes saved", async () => {
    const r = await bothClients(ok([`etag: ${formatEtag(sha256Hex(BODY))}`], BODY));
    expect(r.get).toEqual({ saved: Buffer.from(BODY) });
    expect(r.fetch).toEqual({ saved: Buffer.from(BODY) });
  });
});

describe('one cap on a refusal body', () => {
  /** A refusal body of exactly `size` bytes: a plane's code and a padded message. */
  function refusalBody(size: number): string {
    const bare = JSON.stringify({ error: 'handle_not_valid', message: '' });
    const body = JSON.stringify({ error: 'handle_not_valid', message: 'm'.repeat(size - bare.length) });
    expect(Buffer.byteLength(body)).toBe(size);
    return body;
  }
  const framed = (body: string) =>
    `HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
  const closeFramed = (body: string) => `HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n${body}`;

  it.each([
    ['framed by its content-length', framed],
    ['framed by the connection closing', closeFramed],
  ])('both clients read one of exactly the cap, and only the status of one a byte longer (%s)', async (_label, frame) => {
    const atCap = await bothClients(Buffer.from(frame(refusalBody(ERROR_BODY_MAX_BYTES))));
    expect(atCap.get).toEqual({ error: expect.stringMatching(/^403 handle_not_valid: m+$/) });
    expect(atCap.fetch).toMatchObject({ code: 'handle_not_valid' });
    const over = await bothClients(Buffer.from(frame(refusalBody(ERROR_BODY_MAX_BYTES + 1))));
    expect(over.get).toEqual({ error: 'the server answered 403' });
    expect(over.fetch).toMatchObject({ code: 'http_403' });
    // ls reads its refusals the same way.
    const { url: atUrl } = await server(frame(refusalBody(ERROR_BODY_MAX_BYTES)));
    await expect(list(atUrl)).rejects.toThrow(/^403 handle_not_valid: m+$/);
    const { url: overUrl } = await server(frame(refusalBody(ERROR_BODY_MAX_BYTES + 1)));
    await expect(list(overUrl)).rejects.toThrow(/^the server answered 403$/);
  });
});

describe('one verified-body reader', () => {
  const BODY = Buffer.from('the report, all of it');

  it('both clients save a body whose etag names exactly its bytes, up to exactly the cap', async () => {
    const r = await bothClients(ok([`etag: ${formatEtag(sha256Hex(BODY))}`], BODY), BODY.length);
    expect(r).toEqual({ get: { saved: BODY }, fetch: { saved: BODY } });
  });

  it('both clients refuse a body whose etag names other bytes, after reading it, and save nothing', async () => {
    const r = await bothClients(ok([`etag: ${formatEtag(sha256Hex('other bytes'))}`], BODY));
    expect(r.get).toEqual({
      error: `etag mismatch: the server said ${formatEtag(sha256Hex('other bytes'))} but the bytes hash to sha256:${sha256Hex(BODY)}; nothing was saved`,
    });
    expect(r.fetch).toEqual({ code: 'etag_mismatch', error: "the body's sha256 does not match the peer's etag; nothing was stored" });
  });

  it('both clients refuse a body one byte past the cap, framed by the connection closing, and save nothing', async () => {
    const answer = Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\netag: ${formatEtag(sha256Hex(BODY))}\r\nconnection: close\r\n\r\n`), BODY]);
    const r = await bothClients(answer, BODY.length - 1);
    expect(r.get).toEqual({ error: `the file is larger than the ${BODY.length - 1} bytes get saves; pass --max-bytes to raise it; nothing was saved` });
    expect(r.fetch).toEqual({ code: 'too_large', error: `the peer's file exceeds the fetch limit of ${BODY.length - 1} bytes; nothing was stored` });
  });

  it('both clients refuse a body cut off before its content-length, and save nothing', async () => {
    const answer = `HTTP/1.1 200 OK\r\netag: ${formatEtag(sha256Hex(BODY))}\r\ncontent-length: ${BODY.length + 10}\r\n\r\n${BODY.toString()}`;
    const r = await bothClients(Buffer.from(answer));
    expect(r.get).toEqual({ error: expect.stringMatching(/^the download from http:\/\/127\.0\.0\.1:\d+ broke off: .*; nothing was saved$/) });
    expect(r.fetch).toMatchObject({ code: 'peer_unreachable' });
  });

  // The reader itself, on the rules both clients rely on.
  const chunks = async function* (...parts: string[]) {
    for (const p of parts) yield Buffer.from(p);
  };
  const collect = () => {
    const written: Buffer[] = [];
    return { written, sink: async (c: Buffer) => void written.push(c) };
  };
  const failure = (p: Promise<unknown>) =>
    p.then(
      () => {
        throw new Error('expected a BodyFailure');
      },
      (e: unknown) => {
        expect(e).toBeInstanceOf(BodyFailure);
        return e as BodyFailure;
      },
    );

  it('resolves with the bytes and their SHA-256 only when the etag names them', async () => {
    const { written, sink } = collect();
    expect(await readVerifiedBody(chunks('ab', 'cd'), { sha256: sha256Hex('abcd'), maxBytes: 4, length: 4, sink })).toEqual({
      bytes: 4,
      sha256: sha256Hex('abcd'),
    });
    expect(Buffer.concat(written).toString()).toBe('abcd');
    const m = await failure(readVerifiedBody(chunks('ab', 'cd'), { sha256: sha256Hex('abce'), maxBytes: 4, sink: collect().sink }));
    expect([m.kind, m.bytes, m.sha256]).toEqual(['mismatch', 4, sha256Hex('abcd')]);
  });

  it('never hashes or writes the chunk that would pass the cap or the content-length', async () => {
    for (const [opts, kind] of [
      [{ maxBytes: 3 }, 'too_large'],
      [{ maxBytes: 10, length: 3 }, 'over_length'],
    ] as const) {
      const { written, sink } = collect();
      const f = await failure(readVerifiedBody(chunks('ab', 'cd'), { sha256: sha256Hex('abcd'), ...opts, sink }));
      expect([f.kind, f.bytes, Buffer.concat(written).toString()]).toEqual([kind, 2, 'ab']);
    }
    const short = await failure(readVerifiedBody(chunks('ab'), { sha256: sha256Hex('ab'), maxBytes: 10, length: 3, sink: collect().sink }));
    expect([short.kind, short.bytes]).toEqual(['short', 2]);
  });

  it('reports a failing sink or stream with what it threw', async () => {
    const disk = new Error('ENOSPC');
    const s = await failure(
      readVerifiedBody(chunks('ab'), {
        sha256: sha256Hex('ab'),
        maxBytes: 10,
        sink: async () => {
          throw disk;
        },
      }),
    );
    expect([s.kind, s.cause]).toEqual(['sink', disk]);
    const cut = new Error('other side closed');
    const broken = async function* () {
      yield Buffer.from('ab');
      throw cut;
    };
    const b = await failure(readVerifiedBody(broken(), { sha256: sha256Hex('ab'), maxBytes: 10, sink: collect().sink }));
    expect([b.kind, b.bytes, b.cause]).toEqual(['stream', 2, cut]);
  });
});
