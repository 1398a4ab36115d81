// The operator client (`ls`, `get`) against a hostile server on a real listening socket, answering
// with raw bytes: a server that writes terminal escapes into its refusals and listing fields, sends
// strings where the listing has numbers, or sends more than it announced (or than the client will
// take). Nothing it sends may drive the operator's terminal, and nothing partial is ever saved.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runCliAsync as runCli } from '../helpers/cli.js';
import { etagFor } from '../helpers/http.js';
import { onRequestHead } from '../helpers/loopback.js';
import { scratch } from '../helpers/tree.js';

type Answer = (socket: Socket) => void;

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A server that reads one request head and answers with whatever `answer` writes. */
async function hostile(answer: Answer): Promise<string> {
  const server = createServer((socket) => onRequestHead(socket, () => answer(socket)));
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

/** A whole response with a content-length, then the connection closed. */
function respond(status: string, headers: Record<string, string>, body: Buffer | string): Answer {
  return (socket) => {
    const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body);
    const lines = Object.entries({ 'content-length': String(bytes.length), ...headers }).map(([k, v]) => `${k}: ${v}\r\n`);
    socket.end(Buffer.concat([Buffer.from(`HTTP/1.1 ${status}\r\n${lines.join('')}connection: close\r\n\r\n`, 'latin1'), bytes]));
  };
}

/** Bytes a terminal acts on: C0 controls but newline, DEL, C1 controls, and bidi/format characters. */
const TERMINAL_CONTROL = /[\x00-\x09\x0b-\x1f\x7f\u0080-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/u;

// A refusal that overwrites itself with a fake success: title change (OSC), erase line, carriage
// return, green text.
const FORGED = '\u001b]0;pwned\u0007\u001b[2K\r\u001b[32msaved 6 bytes to ./report.md (sha256 ok, etag verified)\u001b[0m';

function listingOf(overrides: Record<string, unknown> = {}, entry: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    root: 'out/',
    mode: 'read-only',
    max_bytes: 1024,
    generation: 0,
    containment_achieved: 'sealed',
    entries: [{ path: 'report.md', size_bytes: 6, mtime_ms: 1787577327015, sha256: 'a'.repeat(64), ...entry }],
    ...overrides,
  };
}
const json = (value: unknown) => respond('200 OK', { 'content-type': 'application/json' }, JSON.stringify(value));

describe('server text reaches the terminal only through the printable filter', () => {
  it.each(['ls', 'get'])('a refusal of %s with escapes in its code and message is shown escaped', async (verb) => {
    const url = await hostile(
      respond('404 Not Found', { 'content-type': 'application/json' }, JSON.stringify({ error: 'not_found\u001b[1A', message: FORGED })),
    );
    const dir = scratch();
    const r = await runCli(verb === 'ls' ? ['ls', url] : ['get', url, 'report.md', '-o', join(dir, 'report.md')]);
    expect(r.status).toBe(4);
    expect(r.stderr).not.toMatch(TERMINAL_CONTROL);
    expect(r.stderr).toBe(
      `error: 404 not_found\\x1b[1A: \\x1b]0;pwned\\x07\\x1b[2K\\x0d\\x1b[32msaved 6 bytes to ./report.md (sha256 ok, etag verified)\\x1b[0m\n`,
    );
    expect(readdirSync(dir)).toEqual([]);
  });

  it('a refusal whose code is not a string is reported by its status alone', async () => {
    const url = await hostile(respond('403 Forbidden', { 'content-type': 'application/json' }, JSON.stringify({ error: { x: FORGED }, message: FORGED })));
    const r = await runCli(['ls', url]);
    expect([r.status, r.stderr]).toEqual([4, 'error: the server answered 403\n']);
  });

  it.each([
    ['max_bytes', { max_bytes: `1024${FORGED}` }, {}],
    ['generation', { generation: '0\u001b[2J' }, {}],
    ['size_bytes', {}, { size_bytes: '6\u001b]0;pwned\u0007' }],
    ['mtime_ms', {}, { mtime_ms: '\u001b[31m1787577327015' }],
    ['size_bytes', {}, { size_bytes: -1 }],
    ['size_bytes', {}, { size_bytes: 1.5 }],
    ['max_bytes', { max_bytes: null }, {}],
    ['mtime_ms', {}, { mtime_ms: 17.25 }],
    ['path', {}, { path: 7 }],
    ['sha256', {}, { sha256: ['a'] }],
    ['root', { root: { evil: FORGED } }, {}],
    ['entries', { entries: FORGED }, {}],
  ])('a listing whose %s is not what the listing says is refused as malformed, with or without --json', async (field, top, entry) => {
    const url = await hostile(json(listingOf(top, entry)));
    for (const args of [
      ['ls', url],
      ['ls', url, '--json'],
    ]) {
      const r = await runCli(args);
      expect(r.status, args.join(' ')).toBe(5);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(new RegExp(`^error: the server sent a malformed listing: (entries\\[0\\]\\.)?${field} is not `));
      expect(r.stderr).not.toMatch(TERMINAL_CONTROL);
    }
  });

  it('a negative mtime is still an integer, and is listed', async () => {
    const url = await hostile(json(listingOf({}, { mtime_ms: -5 })));
    const r = await runCli(['ls', url]);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('report.md');
  });

  it('every text field of a listing is shown escaped in the table, and escaped (same value) in --json', async () => {
    const listing = listingOf(
      { root: 'out/\u009b2J', mode: `read-only${FORGED}`, containment_achieved: 'sealed\u001b[8m' },
      { path: 'invoice_\u202efdp.exe\u0085\u{e0001}', sha256: `\u001b[2K${'a'.repeat(62)}` },
    );
    const url = await hostile(json(listing));
    const table = await runCli(['ls', url]);
    expect(table.status).toBe(0);
    expect(table.stdout).not.toMatch(TERMINAL_CONTROL);
    expect(table.stdout).toContain('root out/\\x9b2J (read-only\\x1b]0;pwned');
    expect(table.stdout).toContain('invoice_\\u{202e}fdp.exe\\x85\\u{e0001}');
    const line = await runCli(['ls', url, '--json']);
    expect(line.status).toBe(0);
    // C1 controls and format characters are not escaped by JSON.stringify; here they are.
    expect(line.stdout).not.toMatch(TERMINAL_CONTROL);
    expect(line.stdout).not.toMatch(/[\u{e0000}-\u{e007f}]/u);
    expect(line.stdout.endsWith('\n') && line.stdout.split('\n').length).toBe(2);
    expect(JSON.parse(line.stdout)).toEqual(listing);
  });
});

describe('the client caps what it reads', () => {
  const entries = Array.from({ length: 40 }, (_, i) => ({ path: `f${i}.txt`, size_bytes: 1, mtime_ms: 0, sha256: 'b'.repeat(64) }));
  const big = listingOf({ entries });

  it('ls refuses a listing larger than --max-bytes, and reads it with the cap raised', async () => {
    const size = Buffer.byteLength(JSON.stringify(big));
    const url = await hostile(json(big));
    const capped = await runCli(['ls', url, '--max-bytes', '1Ki']);
    expect([capped.status, capped.stdout]).toEqual([6, '']);
    expect(capped.stderr).toBe('error: the listing is larger than 1024 bytes, the most ls reads; pass --max-bytes to raise it\n');
    const raised = await runCli(['ls', url, '--max-bytes', String(size)]);
    expect(raised.status).toBe(0);
    expect(raised.stdout).toContain('40 file(s), 40 bytes');
  });

  it('ls refuses a chunked listing that runs past the cap, without reading on', async () => {
    let written = 0;
    const url = await hostile((socket) => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n');
      const chunk = `${(16384).toString(16)}\r\n${' '.repeat(16384)}\r\n`;
      // Bounded: 64 MiB at most, though the client should stop after about 64 KiB.
      const pump = () => {
        while (written < 4096 && !socket.destroyed) {
          written += 1;
          if (!socket.write(chunk)) return void socket.once('drain', pump);
        }
        socket.end('0\r\n\r\n');
      };
      pump();
    });
    const r = await runCli(['ls', url, '--max-bytes', '64Ki']);
    expect([r.status, r.stderr]).toEqual([6, 'error: the listing is larger than 65536 bytes, the most ls reads; pass --max-bytes to raise it\n']);
    expect(written).toBeLessThan(4096);
  });

  it('ls refuses, by its content-length, a listing above the default cap of 64 MiB before reading it', async () => {
    const url = await hostile((socket) => socket.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 209715200\r\n\r\n{"root":'));
    const r = await runCli(['ls', url]);
    expect([r.status, r.stderr]).toEqual([6, 'error: the listing is larger than 67108864 bytes, the most ls reads; pass --max-bytes to raise it\n']);
  });

  it('a --max-bytes that is not a byte count is a usage error that lists the accepted forms', async () => {
    const r = await runCli(['ls', 'http://127.0.0.1:9', '--max-bytes', '10 MB']);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      "error: --max-bytes must be a whole number of bytes, optionally suffixed Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T (powers of 1000), each with an optional B: 65536, 64Mi, 64MiB, 10GB, 1k (got '10 MB') (see resource-plane ls --help)\n",
    );
  });

  it.each([
    ['1k', 1000],
    ['1kB', 1000],
    ['1Ki', 1024],
    ['1KiB', 1024],
    ['2M', 2_000_000],
    ['1GB', 1_000_000_000],
  ])('--max-bytes %s is %i bytes (SI powers of 1000, IEC powers of 1024)', async (given, bytes) => {
    const url = await hostile((socket) => socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${bytes + 1}\r\n\r\n{"root":`));
    const r = await runCli(['ls', url, '--max-bytes', given]);
    expect([r.status, r.stderr]).toEqual([6, `error: the listing is larger than ${bytes} bytes, the most ls reads; pass --max-bytes to raise it\n`]);
  });

  it('get refuses a content-length above --max-bytes before downloading, leaving nothing', async () => {
    const body = Buffer.alloc(4096, 7);
    const url = await hostile(respond('200 OK', { etag: etagFor(body) }, body));
    const dir = scratch();
    const r = await runCli(['get', url, 'big.bin', '-o', `${dir}/`, '--max-bytes', '1Ki']);
    expect([r.status, r.stderr]).toEqual([6, 'error: the file is 4096 bytes, more than the 1024 get saves; pass --max-bytes to raise it; nothing was saved\n']);
    expect(readdirSync(dir)).toEqual([]);
    const raised = await runCli(['get', url, 'big.bin', '-o', `${dir}/`, '--max-bytes', '4Ki']);
    expect(raised.status).toBe(0);
    expect(readFileSync(join(dir, 'big.bin')).equals(body)).toBe(true);
  });

  it('get refuses, by its content-length, a file above the default cap of 1 GiB', async () => {
    const url = await hostile((socket) => socket.end(`HTTP/1.1 200 OK\r\netag: ${etagFor('x')}\r\ncontent-length: 2147483648\r\n\r\nxxxx`));
    const dir = scratch();
    const r = await runCli(['get', url, 'huge.bin', '-o', `${dir}/`]);
    expect([r.status, r.stderr]).toEqual([
      6,
      'error: the file is 2147483648 bytes, more than the 1073741824 get saves; pass --max-bytes to raise it; nothing was saved\n',
    ]);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('get refuses a body with no content-length that runs past --max-bytes, leaving no partial file', async () => {
    const body = Buffer.alloc(256 * 1024, 9);
    // Framed by the connection's close, with an etag that truthfully names all of it.
    const url = await hostile((socket) =>
      socket.end(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\netag: ${etagFor(body)}\r\nconnection: close\r\n\r\n`), body])),
    );
    const dir = scratch();
    const r = await runCli(['get', url, 'stream.bin', '-o', join(dir, 'stream.bin'), '--max-bytes', '64Ki']);
    expect([r.status, r.stderr]).toEqual([6, 'error: the file is larger than the 65536 bytes get saves; pass --max-bytes to raise it; nothing was saved\n']);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('get never saves a byte past the content-length: the file is what it framed, or nothing', async () => {
    const framed = Buffer.from('hello!');
    const whole = Buffer.concat([framed, Buffer.alloc(1 << 20, 0x41)]);
    const dir = scratch();
    // The etag names everything sent: only the framed bytes are read, so it does not match them.
    const lying = await hostile((socket) =>
      socket.end(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\netag: ${etagFor(whole)}\r\ncontent-length: 6\r\n\r\n`), whole])),
    );
    const r = await runCli(['get', lying, 'a.txt', '-o', join(dir, 'a.txt')]);
    expect(r.status).toBe(5);
    expect(r.stderr).toMatch(/^error: etag mismatch: .*; nothing was saved\n$/);
    expect(readdirSync(dir)).toEqual([]);
    const framedEtag = await hostile((socket) =>
      socket.end(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\netag: ${etagFor(framed)}\r\ncontent-length: 6\r\n\r\n`), whole])),
    );
    const ok = await runCli(['get', framedEtag, 'a.txt', '-o', join(dir, 'a.txt')]);
    expect(ok.status).toBe(0);
    expect(readFileSync(join(dir, 'a.txt'))).toEqual(framed);
    expect(existsSync(join(dir, 'a.txt'))).toBe(true);
  });
});
