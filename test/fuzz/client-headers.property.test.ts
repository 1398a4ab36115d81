// The client's `-H` rules (docs/cli.md: `-H 'Name: value'` adds a request header; values are
// never printed; the client's own framing headers cannot be set; a malformed `-H` is status 2;
// issue 39). Generated `-H` lines: names that are tokens, reserved names (Host, Content-Length,
// Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE, Trailer, Expect, Proxy-Connection) in
// any case, names with a space, a non-ASCII letter, a slash or nothing before the colon; spaces and
// tabs around the name and the value; values that are plain, empty, hold a tab, an obs-fold
// (CRLF then a space), a bare LF or CR, a NUL, a C0 control, DEL, Latin-1 letters (obs-text), a
// character past U+00FF, an emoji; the same name twice in two cases. A raw `net` server captures
// every byte the client sends. The model, written from docs/cli.md and RFC 9110 section 5.5:
//  - the first line that is not `token ":" value` (the name trimmed of spaces and tabs), whose
//    value (trimmed) holds CR, LF or NUL, or anything but visible ASCII, space, tab and
//    U+0080-U+00FF, or whose name is a reserved one in any case, makes the command a usage error
//    (status 2): nothing is sent, no connection is even made;
//  - otherwise the request head carries each name once, lower-cased, with its values joined by
//    ", " in the order given, each character of a value as its one Latin-1 byte; besides them only
//    the client's own `host` and `connection`, once each; never a framing header;
//  - no value ever appears on stdout or stderr (a value may be a credential).
// Seven cases in eight call parseHeaders and list() in process; one in eight runs the real `ls`.
import { createServer, type Server, type Socket } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { list, parseHeaders } from '../../src/cli/client.js';
import { ClientError } from '../../src/cli/exit.js';
import { runCliAsync } from '../helpers/cli.js';
import { fuzzIt, guard } from './runner.js';

const RESERVED = ['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'expect', 'proxy-connection'];
const PLAIN_NAMES = ['X-Token', 'Authorization', 'accept', 'X_y.z', "x!#$%&'*+^`|~"];
const BAD_NAMES = ['X Token', 'X-É', 'X/Y', '', 'X\u0000Y'];
/** Marks every value, so that a value printed anywhere is seen. */
const MARK = 'v7q';
const VALUES = [
  `${MARK}plain`,
  '',
  `${MARK}a\tb`,
  `${MARK}a\r\n b`,
  `${MARK}a\nb`,
  `${MARK}a\rb`,
  `${MARK}a\u0000b`,
  `${MARK}\u0001`,
  `${MARK}\u007f`,
  `${MARK}é ü ÿ`,
  `${MARK}\u0085`,
  `${MARK}€`,
  `${MARK}\u{1f600}`,
  `${MARK}"q" ;=`,
  `${MARK} inner  spaces `,
];
const SPACES = ['', ' ', '\t', '  \t'];

interface HLine {
  name: { k: 'plain' | 'reserved' | 'bad'; i: number; caseMask: number };
  value: number;
  before: number;
  beforeColon: number;
  afterColon: number;
  after: number;
}
interface Case {
  lines: HLine[];
  /** Repeat the first line's name (another case) with another value. */
  repeat: boolean;
  cli: boolean;
}

function nameOf(n: HLine['name']): string {
  const base =
    n.k === 'plain' ? PLAIN_NAMES[n.i % PLAIN_NAMES.length]! : n.k === 'reserved' ? RESERVED[n.i % RESERVED.length]! : BAD_NAMES[n.i % BAD_NAMES.length]!;
  return [...base].map((ch, j) => ((n.caseMask >> (j % 16)) & 1 ? ch.toUpperCase() : ch.toLowerCase())).join('');
}

function text(l: HLine): string {
  return `${SPACES[l.before]}${nameOf(l.name)}${SPACES[l.beforeColon]}:${SPACES[l.afterColon]}${VALUES[l.value]}${SPACES[l.after]}`;
}

const lineArb: fc.Arbitrary<HLine> = fc.record({
  name: fc.record({ k: fc.constantFrom<'plain' | 'reserved' | 'bad'>('plain', 'plain', 'reserved', 'bad'), i: fc.nat(20), caseMask: fc.nat(0xffff) }),
  value: fc.nat(VALUES.length - 1),
  before: fc.nat(SPACES.length - 1),
  beforeColon: fc.nat(SPACES.length - 1),
  afterColon: fc.nat(SPACES.length - 1),
  after: fc.nat(SPACES.length - 1),
});
const caseArb: fc.Arbitrary<Case> = fc.record({
  lines: fc.array(lineArb, { minLength: 1, maxLength: 4 }),
  repeat: fc.boolean(),
  cli: fc.nat(7).map((n) => n === 0),
});

/** The `-H` lines of a case. */
function linesOf(c: Case): string[] {
  const lines = c.lines.map(text);
  if (c.repeat) {
    const first = c.lines[0]!;
    lines.push(text({ ...first, name: { ...first.name, caseMask: first.name.caseMask ^ 0xffff }, value: (first.value + 1) % VALUES.length }));
  }
  return lines;
}

const OWS = /^[ \t]+|[ \t]+$/g;
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** The model: refused (usage), or the headers sent, by lower-cased name in first-seen order. */
function model(lines: string[]): { refused: true } | { refused: false; sent: Array<[string, string]> } {
  const sent = new Map<string, string>();
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon <= 0) return { refused: true };
    const name = line.slice(0, colon).replace(OWS, '');
    if (!TOKEN.test(name)) return { refused: true };
    const value = line.slice(colon + 1).replace(OWS, '');
    if (/[^\t\x20-\x7e\x80-\xff]/.test(value)) return { refused: true };
    const key = name.toLowerCase();
    if (RESERVED.includes(key)) return { refused: true };
    sent.set(key, sent.has(key) ? `${sent.get(key)}, ${value}` : value);
  }
  return { refused: false, sent: [...sent] };
}

let server: Server;
let port: number;
/** Every request head received (latin1), and how many connections were made. */
const seen = { heads: [] as string[], connections: 0 };

beforeAll(async () => {
  server = createServer((socket: Socket) => {
    seen.connections += 1;
    let buf = Buffer.alloc(0);
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      seen.heads.push(buf.subarray(0, end).toString('latin1'));
      socket.end(
        'HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 47\r\nconnection: close\r\n\r\n{"code":"not_found","message":"no such file!!"}',
      );
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as { port: number }).port;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

async function runCase(c: Case): Promise<void> {
  const lines = linesOf(c);
  const want = model(lines);
  seen.heads = [];
  seen.connections = 0;
  const url = `http://127.0.0.1:${port}`;
  const label = `${JSON.stringify(lines)} (${c.cli ? 'ls' : 'in process'})`;
  let refused: boolean;
  let printed = '';
  // A NUL cannot be passed in a command line: those lines go in process.
  if (c.cli && !lines.some((l) => l.includes('\u0000'))) {
    const r = await runCliAsync(['ls', url, ...lines.flatMap((l) => ['-H', l])]);
    printed = r.stdout + r.stderr;
    expect([2, 4], `${label}: status ${r.status}: ${r.stderr}`).toContain(r.status);
    refused = r.status === 2;
  } else {
    try {
      await list(url, { headers: parseHeaders(lines) });
      throw new Error('harness: the server answers 404');
    } catch (error) {
      if (!(error instanceof ClientError)) throw error;
      printed = error.message;
      expect(['usage', 'refused'], `${label}: ${error.kind}: ${error.message}`).toContain(error.kind);
      refused = error.kind === 'usage';
    }
  }
  expect(printed.includes(MARK), `${label}: a header value was printed: ${printed}`).toBe(false);
  expect(refused, `${label}: ${refused ? 'refused as a usage mistake' : 'sent'} (${printed.trim()})`).toBe(want.refused);
  if (want.refused) {
    expect(seen.connections, `${label}: a refused -H makes no connection`).toBe(0);
    return;
  }
  expect(seen.heads.length, label).toBe(1);
  const [, ...fields] = seen.heads[0]!.split('\r\n');
  const got = fields.map((f) => {
    const colon = f.indexOf(':');
    return [f.slice(0, colon), f.slice(colon + 1).replace(/^ /, '')] as [string, string];
  });
  const expected = [...want.sent.map(([k, v]) => [k, Buffer.from(v, 'latin1').toString('latin1')] as [string, string])];
  const own = got.filter(([k]) => k === 'host' || k === 'connection');
  expect(own.map(([k]) => k).sort(), `${label}: the client's own host and connection, once each`).toEqual(['connection', 'host']);
  expect(
    got.filter(([k]) => k !== 'host' && k !== 'connection'),
    `${label}: exactly the -H headers, lower-cased, joined, in order, on the wire`,
  ).toEqual(expected);
}

describe("the client's -H rules", () => {
  fuzzIt({
    name: 'client-headers',
    file: import.meta.filename,
    runs: 40,
    timeoutMs: 90_000,
    // Fixed: each reserved name in an odd case, with spaces before the colon; an obs-fold; a value past Latin-1; Latin-1 sent as bytes; a repeated name.
    examples: () => [
      ...RESERVED.map(
        (_, i) =>
          [
            {
              lines: [{ name: { k: 'reserved' as const, i, caseMask: 0x5555 }, value: 0, before: 1, beforeColon: 2, afterColon: 1, after: 0 }],
              repeat: false,
              cli: i === 6,
            },
          ] as [Case],
      ),
      [{ lines: [{ name: { k: 'plain', i: 0, caseMask: 1 }, value: 3, before: 0, beforeColon: 0, afterColon: 1, after: 0 }], repeat: false, cli: false }],
      [{ lines: [{ name: { k: 'plain', i: 1, caseMask: 1 }, value: 11, before: 0, beforeColon: 0, afterColon: 1, after: 0 }], repeat: false, cli: true }],
      [{ lines: [{ name: { k: 'plain', i: 0, caseMask: 3 }, value: 9, before: 0, beforeColon: 0, afterColon: 1, after: 2 }], repeat: true, cli: false }],
    ],
    // Invariant: a malformed, unsendable or reserved -H (any case, any spacing) is a usage error with no connection made; otherwise each name goes once, lower-cased, values joined in order, as Latin-1 bytes, beside only host and connection; no value is ever printed.
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
