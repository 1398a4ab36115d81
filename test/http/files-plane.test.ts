// The operator plane over a real socket (SPEC sections 3, 4, 5). Requests are written byte-for-byte
// by a raw HTTP/1.1 client (test/helpers/http.ts), never through `inject` or `fetch`, which would
// normalise `..`, `%2e` and `//` before the server could see them. Every expectation here is taken
// from SPEC.md (messages, statuses, header order, key order), not from the implementation's tables.
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, renameSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { METHODS } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Containment } from '../../src/manifest/model.js';
import { buildEscapeTree, ESCAPE_CASES, LISTED_FOLLOW, LISTED_SCOPED, MAX_BYTES, SECRET, SECRET_SHA } from '../helpers/escape-cases.js';
import { filesManifest, openCapsule, type Capsule } from '../helpers/capsule.js';
import { pool, rawGet, rawExchange, rawRequest, readTrace, sha256Hex, type RawResponse } from '../helpers/http.js';
import { RESOLVERS } from '../helpers/resolvers.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

// ── What SPEC section 4 says, restated here so that a drifting catalogue fails ──────────────────

const MESSAGE = {
  no_resource_plane: 'this capsule declares no exports.files block, so it has no resource plane',
  not_found: 'no such file under the export root',
  outside_root: 'the requested path resolves outside the export root',
  symlink_refused: 'a symlink was encountered and the achieved containment class is scoped',
  not_a_regular_file: 'the requested path is not a regular file',
  too_large: `file exceeds the declared exports.files.max_bytes of ${MAX_BYTES} bytes`,
  method_not_allowed: 'the resource plane serves GET only; it has no write path',
} as const;
type Code = keyof typeof MESSAGE;
const STATUS: Record<Code, number> = {
  no_resource_plane: 404,
  not_found: 404,
  outside_root: 403,
  symlink_refused: 403,
  not_a_regular_file: 403,
  too_large: 413,
  method_not_allowed: 405,
};
const PEER_METHOD_MESSAGE = 'the peer plane serves GET only; it has no write path and no list verb';

/** The order of SPEC section 4 for a 200 read. */
const READ_HEADERS = ['content-type', 'etag', 'x-murmur-mtime-ms', 'x-murmur-generation', 'x-murmur-containment', 'x-murmur-export-root', 'content-length'];
/** The same order, for the listing (its etag names its body; it has no mtime). */
const LIST_HEADERS = READ_HEADERS.filter((h) => h !== 'x-murmur-mtime-ms');
const LIST_KEYS = ['root', 'mode', 'max_bytes', 'generation', 'containment_achieved', 'entries'];
const ENTRY_KEYS = ['path', 'size_bytes', 'mtime_ms', 'sha256'];

const CLASSES: Containment[] = ['advisory', 'scoped', 'sealed'];

// ── Assertions shared by every test ─────────────────────────────────────────────────────────────

/** Whatever the answer, it never carries the planted secret or its hash. */
function expectNoSecret(res: RawResponse): void {
  const text = res.raw.toString('latin1');
  expect(text).not.toContain(SECRET);
  expect(text).not.toContain(SECRET_SHA);
}

/** `content-length` is present once and equals the body; nothing follows the body. */
function expectFramed(res: RawResponse, bodiless = false, expectedLength?: number): void {
  const cl = res.header('content-length');
  expect(cl, 'content-length').toMatch(/^\d+$/);
  expect(res.header('transfer-encoding')).toBeUndefined();
  if (bodiless) expect(Number(cl)).toBe(expectedLength);
  else expect(Number(cl)).toBe(res.body.length);
  expect(res.trailing.length).toBe(0);
}

/** The names of `names` that the response carries, in wire order. */
function orderOf(res: RawResponse, names: readonly string[]): string[] {
  return res.headerNames.filter((n) => names.includes(n));
}

function errorBody(code: string, message: string): string {
  return JSON.stringify({ error: code, message });
}

function expectError(
  res: RawResponse,
  code: Code,
  opts: { message?: string; generation?: number | null; containment?: Containment; head?: boolean } = {},
): void {
  const message = opts.message ?? MESSAGE[code];
  const body = errorBody(code, message);
  expect({ status: res.status, body: res.body.toString('utf8') }).toEqual({ status: STATUS[code], body: opts.head ? '' : body });
  expect(res.header('content-type')).toBe('application/json');
  expectFramed(res, opts.head, Buffer.byteLength(body));
  expect(res.header('etag')).toBeUndefined();
  if (code === 'method_not_allowed') expect(res.header('allow')).toBe('GET');
  else expect(res.header('allow')).toBeUndefined();
  if (opts.generation !== undefined && opts.generation !== null) expect(res.header('x-murmur-generation')).toBe(String(opts.generation));
  if (opts.containment) expect(res.header('x-murmur-containment')).toBe(opts.containment);
}

function expectRead(
  res: RawResponse,
  expected: { body: Buffer | string; containment: Containment; generation?: number; root?: string; mtimeMs?: number },
): void {
  const body = Buffer.isBuffer(expected.body) ? expected.body : Buffer.from(expected.body);
  expect(res.status).toBe(200);
  expect(res.body.equals(body), `body ${JSON.stringify(res.body.toString('latin1').slice(0, 120))}`).toBe(true);
  expectFramed(res);
  expect(res.header('content-type')).toBe('application/octet-stream');
  expect(res.header('etag')).toBe(`"sha256:${sha256Hex(res.body)}"`);
  expect(res.header('x-murmur-mtime-ms')).toMatch(/^\d+$/);
  if (expected.mtimeMs !== undefined) expect(Number(res.header('x-murmur-mtime-ms'))).toBe(expected.mtimeMs);
  expect(res.header('x-murmur-generation')).toBe(String(expected.generation ?? 0));
  expect(res.header('x-murmur-containment')).toBe(expected.containment);
  expect(res.header('x-murmur-export-root')).toBe(expected.root ?? 'out/');
  expect(res.header('allow')).toBeUndefined();
  expect(orderOf(res, READ_HEADERS)).toEqual(READ_HEADERS);
}

/** mtime in whole milliseconds, truncated, as the server reports it (following symlinks). */
function mtimeMsOf(path: string): number {
  return Number(statSync(path, { bigint: true }).mtimeNs / 1_000_000n);
}

let traceDir: string;
let escapeWorkdir: string;
let listWorkdir: string;

beforeAll(() => {
  traceDir = tempDir('rp-trace-');
  escapeWorkdir = tempDir();
  buildEscapeTree(escapeWorkdir, { sparse: true });
  listWorkdir = tempDir();
  buildEscapeTree(listWorkdir, { sparse: false });
});

afterAll(() => {
  removeTree(escapeWorkdir);
  removeTree(listWorkdir);
  removeTree(traceDir);
});

// ── The escape table, per resolver and class ────────────────────────────────────────────────────

describe.each(RESOLVERS)('resolver %s', (resolver) => {
  describe.each(CLASSES)('class %s', (containment) => {
    let esc: Capsule;
    let list: Capsule;

    beforeAll(async () => {
      const yaml = filesManifest('out/', MAX_BYTES);
      esc = await openCapsule({ workdir: escapeWorkdir, traceDir, yaml, containment, resolver });
      list = await openCapsule({ workdir: listWorkdir, traceDir, yaml, containment, resolver });
    });

    afterAll(async () => {
      await esc?.close();
      await list?.close();
    });

    it('the session reports the resolver it was given', () => {
      expect(esc.session.resolver).toBe(resolver);
      expect(readTrace(esc.tracePath)[0]).toMatchObject({ event_type: 'session_start', resolver });
    });

    it.each(ESCAPE_CASES)('GET /resources/files/$raw', async (c) => {
      const expected = containment === 'scoped' ? c.scoped : c.follow;
      const res = await rawGet(esc.url, `/resources/files/${c.raw}`);
      expectNoSecret(res);
      if (expected === 'ok') {
        const relpath = decodeURIComponent(c.raw).replace(/\/$/, '');
        expectRead(res, { body: c.body!, containment, mtimeMs: mtimeMsOf(join(escapeWorkdir, 'out', relpath)) });
      } else {
        expectError(res, expected, { generation: 0, containment });
      }
    });

    it('lists regular files beneath the root per the class, with the exact body and headers', async () => {
      const res = await rawGet(list.url, '/resources/files');
      expectNoSecret(res);
      expect(res.status).toBe(200);
      expectFramed(res);
      expect(res.header('content-type')).toBe('application/json');
      expect(res.header('x-murmur-generation')).toBe('0');
      expect(res.header('x-murmur-containment')).toBe(containment);
      expect(res.header('x-murmur-export-root')).toBe('out/');
      expect(res.header('etag')).toBe(`"sha256:${sha256Hex(res.body)}"`);
      expect(orderOf(res, LIST_HEADERS)).toEqual(LIST_HEADERS);

      const body = res.json();
      expect(Object.keys(body)).toEqual(LIST_KEYS);
      const paths = containment === 'scoped' ? LISTED_SCOPED : LISTED_FOLLOW;
      const expected = {
        root: 'out/',
        mode: 'read-only',
        max_bytes: MAX_BYTES,
        generation: 0,
        containment_achieved: containment,
        entries: paths.map((p) => {
          const file = join(listWorkdir, 'out', p);
          const bytes = readFileSync(file);
          return { path: p, size_bytes: bytes.length, mtime_ms: mtimeMsOf(file), sha256: sha256Hex(bytes) };
        }),
      };
      for (const entry of body.entries) expect(Object.keys(entry)).toEqual(ENTRY_KEYS);
      // Compact JSON with exactly these keys in this order: the body is byte-for-byte this.
      expect(res.body.toString('utf8')).toBe(JSON.stringify(expected));
      // An oversized file is listed with its real size (and refused on read).
      expect(body.entries.find((e: { path: string }) => e.path === 'big.bin')).toMatchObject({ size_bytes: 2048 });
    });

    it('/resources/files/ lists exactly as /resources/files', async () => {
      const a = await rawGet(list.url, '/resources/files');
      const b = await rawGet(list.url, '/resources/files/');
      expect(b.status).toBe(200);
      expect(b.body.equals(a.body)).toBe(true);
      expect(b.headerNames.filter((n) => n !== 'date')).toEqual(a.headerNames.filter((n) => n !== 'date'));
    });
  });
});

// ── Listing order, hidden files, roots that appear later ────────────────────────────────────────

describe('listing', () => {
  let workdir: string;
  let srv: Capsule;
  // Sorted by UTF-8 bytes of the whole path: `a-b` (0x2d) < `a.b` (0x2e) < `a/b` (0x2f) < `a0`
  // (0x30), so a walk that sorts per directory fails; U+FF5A (EF BD 9A) sorts before U+1F600
  // (F0 ...), which UTF-16 code-unit order (D83D < FF5A) would get wrong.
  const SORTED = ['.dot/inner', '.hidden', 'B', 'a-b', 'a.b', 'a/b', 'a0', 'z', 'é', '\uFF5A', '\u{1F600}'];

  beforeAll(async () => {
    workdir = tempDir();
    // Created in an order unrelated to the sorted one.
    makeTree(workdir, [
      'out/z: z',
      'out/\u{1F600}: grin',
      'out/a/b: a slash b',
      'out/é: e acute',
      'out/a0: a zero',
      'out/B: capital b',
      'out/a.b: a dot b',
      'out/\uFF5A: fullwidth z',
      'out/.hidden: hidden',
      'out/.dot/inner: inner',
      'out/a-b: a dash b',
    ]);
    srv = await openCapsule({ workdir, traceDir, yaml: filesManifest('out/'), containment: 'advisory' });
  });

  afterAll(async () => {
    await srv?.close();
    removeTree(workdir);
  });

  it('sorts entries by path in UTF-8 byte order and lists hidden files', async () => {
    const byBytes = [...SORTED].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
    expect(byBytes).toEqual(SORTED); // the fixture itself is right
    const res = await rawGet(srv.url, '/resources/files');
    expect(res.status).toBe(200);
    const body = res.json();
    expect(body.entries.map((e: { path: string }) => e.path)).toEqual(SORTED);
    // Default max_bytes is 10Mi when the manifest does not declare it.
    expect(body.max_bytes).toBe(10485760);
  });

  it.each(SORTED)('serves the listed entry %s by its percent-encoded path', async (p) => {
    const target = `/resources/files/${p.split('/').map(encodeURIComponent).join('/')}`;
    const res = await rawGet(srv.url, target);
    expectRead(res, { body: readFileSync(join(workdir, 'out', p)), containment: 'advisory' });
  });

  it('a%2Fb names a/b: %2F splits components', async () => {
    const res = await rawGet(srv.url, '/resources/files/a%2Fb');
    expectRead(res, { body: 'a slash b', containment: 'advisory' });
  });

  it('a root that does not exist lists no entries; created after launch, it is served', async () => {
    const wd = tempDir();
    const later = await openCapsule({ workdir: wd, traceDir, yaml: filesManifest('later/'), containment: 'sealed' });
    try {
      const empty = await rawGet(later.url, '/resources/files');
      expect(empty.status).toBe(200);
      expectFramed(empty);
      expect(empty.body.toString()).toBe(
        '{"root":"later/","mode":"read-only","max_bytes":10485760,"generation":0,"containment_achieved":"sealed","entries":[]}',
      );
      expect(empty.header('x-murmur-export-root')).toBe('later/');
      expectError(await rawGet(later.url, '/resources/files/report.md'), 'not_found', { generation: 0, containment: 'sealed' });

      makeTree(wd, ['later/report.md: arrived later', 'later/sub/x.txt: nested']);
      const listed = await rawGet(later.url, '/resources/files/');
      expect(listed.json().entries.map((e: { path: string }) => e.path)).toEqual(['report.md', 'sub/x.txt']);
      expectRead(await rawGet(later.url, '/resources/files/report.md'), { body: 'arrived later', containment: 'sealed', root: 'later/' });
      expectRead(await rawGet(later.url, '/resources/files/sub/x.txt'), { body: 'nested', containment: 'sealed', root: 'later/' });
    } finally {
      await later.close();
      removeTree(wd);
    }
  });

  it('an export root that is a symlink inside the workdir is resolved on every request', async () => {
    const wd = tempDir();
    makeTree(wd, ['v1/report.md: version one', 'v2/report.md: version two']);
    const linked = await openCapsule({ workdir: wd, traceDir, yaml: filesManifest('current'), containment: 'advisory' });
    try {
      expect((await rawGet(linked.url, '/resources/files')).json().entries).toEqual([]);
      symlinkSync('v1', join(wd, 'current'));
      expectRead(await rawGet(linked.url, '/resources/files/report.md'), { body: 'version one', containment: 'advisory', root: 'current' });
      symlinkSync('v2', join(wd, 'current.new'));
      renameSync(join(wd, 'current.new'), join(wd, 'current'));
      expectRead(await rawGet(linked.url, '/resources/files/report.md'), { body: 'version two', containment: 'advisory', root: 'current' });
    } finally {
      await linked.close();
      removeTree(wd);
    }
  });
});

// ── Routing: methods, other paths, query strings, encodings the router rejects ──────────────────

describe('routing', () => {
  let workdir: string;
  let srv: Capsule;
  let hostPort: string;

  beforeAll(async () => {
    workdir = tempDir();
    makeTree(workdir, [
      `secret.txt: ${SECRET}`,
      'out/report.md: hello report',
      'out/x: ex',
      // Names with a literal `%` that is not followed by two hex digits: it stays literal.
      'out/%ZZ: literal percent ZZ',
      'out/100%: one hundred percent',
      'out/%: lone percent',
    ]);
    srv = await openCapsule({ workdir, traceDir, yaml: filesManifest('out/', MAX_BYTES), containment: 'sealed' });
    hostPort = new URL(srv.url).host;
  });

  afterAll(async () => {
    await srv?.close();
    removeTree(workdir);
  });

  const ROUTES: Array<[string, 'files' | 'peer' | 'other']> = [
    ['/resources/files', 'files'],
    ['/resources/files/', 'files'],
    ['/resources/files/x', 'files'],
    ['/resources/files/missing', 'files'],
    ['/resources/files/%ZZ', 'files'],
    ['/resources/peer/x', 'peer'],
    ['/resources/peer', 'peer'],
    ['/resources/other', 'other'],
    ['/resources', 'other'],
    ['/resources/filesx/a', 'other'],
  ];
  const CORE_METHODS = ['POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'TRACE'];
  // Every other method Node's parser accepts (CONNECT, handed to another event by Node, is tested below).
  const EXTRA_METHODS = METHODS.filter((m) => m !== 'GET' && m !== 'CONNECT' && !CORE_METHODS.includes(m));

  function expect405(res: RawResponse, plane: 'files' | 'peer' | 'other', head: boolean): void {
    const message = plane === 'peer' ? PEER_METHOD_MESSAGE : MESSAGE.method_not_allowed;
    expectError(res, 'method_not_allowed', { message, head, containment: 'sealed', generation: plane === 'files' ? 0 : null });
  }

  const cases = ROUTES.flatMap(([path, plane]) => CORE_METHODS.map((method) => ({ path, plane, method })));
  it.each(cases)('$method $path is 405 with allow: GET', async ({ path, plane, method }) => {
    const res = await rawRequest(srv.url, { method, target: path });
    expect405(res, plane, method === 'HEAD');
  });

  it.each(ROUTES)('every other method Node accepts on %s is 405 with allow: GET', async (path, plane) => {
    const wrong: string[] = [];
    for (const method of EXTRA_METHODS) {
      const res = await rawRequest(srv.url, { method, target: path });
      if (res.status !== 405 || res.header('allow') !== 'GET') wrong.push(`${method} → ${res.status} ${res.body.toString()}`);
      else expect405(res, plane, false);
    }
    expect(wrong).toEqual([]);
  });

  // Node hands a CONNECT to the server's 'connect' event, never to 'request': with nothing
  // listening there, the connection used to close with no answer and no trace.
  it.each(ROUTES)('CONNECT %s is 405 with allow: GET, like every other method', async (path, plane) => {
    const res = await rawRequest(srv.url, { method: 'CONNECT', target: path });
    expect405(res, plane, false);
    expect(res.header('connection')).toBe('close');
  });

  it('CONNECT on the operator plane is traced like any other refused method', async () => {
    expect405(await rawRequest(srv.url, { method: 'CONNECT', target: '/resources/files/connect-probe.txt' }), 'files', false);
    const line = readTrace(srv.tracePath).find((l) => l.path === 'connect-probe.txt');
    expect(line).toMatchObject({ event_type: 'resource_read', outcome: 'method_not_allowed', reason: MESSAGE.method_not_allowed });
  });

  it('a CONNECT pipelined after a GET is answered after it, on the same connection', async () => {
    const responses = await rawExchange(
      srv.url,
      `GET /resources/files/x HTTP/1.1\r\nHost: ${hostPort}\r\n\r\nCONNECT /resources/files/x HTTP/1.1\r\nHost: ${hostPort}\r\n\r\n`,
    );
    expect(responses.map((r) => r.status)).toEqual([200, 405]);
    expectRead(responses[0]!, { body: 'ex', containment: 'sealed' });
    expect405(responses[1]!, 'files', false);
  });

  it.each(['example.com:443', '127.0.0.1:22', '[::1]:80', 'x', '*'])(
    'CONNECT %s (authority form: a tunnel) is 400 bad_request in the catalogue shape',
    async (target) => {
      const res = await rawRequest(srv.url, { method: 'CONNECT', target });
      expect(res.status).toBe(400);
      expect(res.body.toString()).toBe(errorBody('bad_request', 'the request could not be parsed'));
      expect(res.header('content-type')).toBe('application/json');
      expect(res.header('x-murmur-containment')).toBe('sealed');
      expect(res.header('connection')).toBe('close');
      expectFramed(res);
    },
  );

  const BODIES: Array<{ name: string; headers: Array<[string, string]>; body: Buffer; contentLength?: boolean }> = [
    { name: 'an odd content-type', headers: [['Content-Type', 'application/x-murmur-odd; charset=ebcdic']], body: Buffer.from('\x00\xff odd') },
    { name: 'malformed JSON', headers: [['Content-Type', 'application/json']], body: Buffer.from('{"path": ') },
    { name: 'a form', headers: [['Content-Type', 'application/x-www-form-urlencoded']], body: Buffer.from('path=../secret.txt') },
    { name: 'multipart without a boundary', headers: [['Content-Type', 'multipart/form-data']], body: Buffer.from('--x\r\n') },
    { name: 'no content-type', headers: [], body: Buffer.from('raw') },
    { name: 'a body over the framework limit', headers: [['Content-Type', 'application/octet-stream']], body: Buffer.alloc(1536 * 1024, 0x41) },
    {
      name: 'a chunked body',
      headers: [
        ['Content-Type', 'text/plain'],
        ['Transfer-Encoding', 'chunked'],
      ],
      body: Buffer.from('5\r\nhello\r\n0\r\n\r\n'),
      contentLength: false,
    },
  ];
  it.each(BODIES)('a POST/PUT with $name is still 405', async ({ headers, body, contentLength }) => {
    for (const [method, target, plane] of [
      ['POST', '/resources/files/report.md', 'files'],
      ['PUT', '/resources/files/new.txt', 'files'],
      ['POST', '/resources/files', 'files'],
      ['PUT', '/resources/peer/x', 'peer'],
      ['POST', '/resources/other', 'other'],
    ] as const) {
      const res = await rawRequest(srv.url, { method, target, headers, body, contentLength });
      expect405(res, plane, false);
    }
    // Nothing was written.
    expectError(await rawGet(srv.url, '/resources/files/new.txt'), 'not_found', { generation: 0 });
  });

  it.each([
    '/resources/other',
    '/resources/other/x',
    '/resources/filesx/a',
    '/resources/filesx',
    '/resources/files%2Freport.md',
    '/resources',
    '/resources/',
    '/resources?x=/resources/files',
  ])('GET %s is 404 not_found', async (target) => {
    const res = await rawGet(srv.url, target);
    expectError(res, 'not_found', { containment: 'sealed' });
  });

  it.each([
    ['/resources/files/report.md?a=b', 'hello report'],
    ['/resources/files/report.md?../../secret.txt', 'hello report'],
    ['/resources/files/report.md?', 'hello report'],
    ['/resources/files/report.md?%2e%2e/%2e%2e/secret.txt#frag', 'hello report'],
    ['/resources/files/x?/resources/files/../secret.txt', 'ex'],
  ])('the query string is ignored: %s', async (target, body) => {
    const res = await rawGet(srv.url, target);
    expectNoSecret(res);
    expectRead(res, { body, containment: 'sealed' });
  });

  it.each(['/resources/files?a=b', '/resources/files/?../../x', '/resources/files?', '/resources/files/?/etc/passwd'])(
    'the query string is ignored on the listing: %s',
    async (target) => {
      const res = await rawGet(srv.url, target);
      expect(res.status).toBe(200);
      expect(res.json().entries.map((e: { path: string }) => e.path)).toEqual(['%', '%ZZ', '100%', 'report.md', 'x']);
    },
  );

  it('the query string does not make a refused path servable', async () => {
    expectError(await rawGet(srv.url, '/resources/files/..?/report.md'), 'outside_root', { generation: 0 });
    expectError(await rawGet(srv.url, '/resources/files/../secret.txt?a=b'), 'outside_root', { generation: 0 });
  });

  describe('encodings the framework rejects on its own are answered by the plane', () => {
    it.each([
      ['/resources/files/%ZZ', 'literal percent ZZ'],
      ['/resources/files/100%', 'one hundred percent'],
      ['/resources/files/%', 'lone percent'],
      ['/resources/files/%25ZZ', 'literal percent ZZ'],
    ])('GET %s serves the file whose name keeps the `%` literally', async (target, body) => {
      const res = await rawGet(srv.url, target);
      expectRead(res, { body, containment: 'sealed' });
    });

    it.each([
      ['/resources/files/%ZY', 'not_found'],
      ['/resources/files/a%', 'not_found'],
      ['/resources/files/%C0%AE', 'outside_root'],
      ['/resources/files/%C0%AE%C0%AE/secret.txt', 'outside_root'],
      ['/resources/files/%ff', 'outside_root'],
      ['/resources/files/%ZZ/../../secret.txt', 'outside_root'],
    ] as const)('GET %s is %s in the JSON error shape', async (target, code) => {
      const res = await rawGet(srv.url, target);
      expectNoSecret(res);
      expectError(res, code, { generation: 0, containment: 'sealed' });
    });

    it.each(['/resources/%ZZ', '/resources/other%', '/resources/filesx/%C0%AE'])('GET %s is 404 not_found in the JSON shape', async (target) => {
      expectError(await rawGet(srv.url, target), 'not_found', { containment: 'sealed' });
    });

    it.each(['/resources/files/%ZZ', '/resources/files/%C0%AE', '/resources/files%', '/resources/%'])('POST %s is 405 in the JSON shape', async (target) => {
      const res = await rawRequest(srv.url, { method: 'POST', target, body: 'x' });
      expectError(res, 'method_not_allowed', { containment: 'sealed' });
    });

    it('a listing whose query string is malformed still lists', async () => {
      const res = await rawGet(srv.url, '/resources/files?%ZZ');
      expect(res.status).toBe(200);
      expect(Object.keys(res.json())).toEqual(LIST_KEYS);
    });
  });

  it('an unread request body is drained, never parsed as a request of its own (keep-alive)', async () => {
    const smuggled = 'GET /resources/files/../secret.txt HTTP/1.1\r\nHost: x\r\n\r\n';
    const bytes =
      `POST /resources/files/x HTTP/1.1\r\nHost: ${hostPort}\r\nContent-Type: text/plain\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}` +
      `PUT /resources/other HTTP/1.1\r\nHost: ${hostPort}\r\nTransfer-Encoding: chunked\r\n\r\n${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n` +
      `GET /resources/files/report.md HTTP/1.1\r\nHost: ${hostPort}\r\nConnection: close\r\n\r\n`;
    const responses = await rawExchange(srv.url, bytes);
    expect(responses.map((r) => r.status)).toEqual([405, 405, 200]);
    expectError(responses[0]!, 'method_not_allowed', { generation: 0 });
    expectError(responses[1]!, 'method_not_allowed');
    expectRead(responses[2]!, { body: 'hello report', containment: 'sealed' });
    for (const r of responses) expectNoSecret(r);
  });

  it.each([
    ['/elsewhere', 404],
    ['//resources/files/report.md', 404],
    ['/%ZZ', 400],
    ['/.well-known/agent-card.json', 200],
  ])('GET %s (outside the planes) still carries the class and a content-length', async (target, status) => {
    const res = await rawGet(srv.url, target);
    expect(res.status).toBe(status);
    expect(res.header('x-murmur-containment')).toBe('sealed');
    expectFramed(res);
    expect(res.header('content-type')).toBe('application/json');
    expect(Object.keys(res.json()).length).toBeGreaterThan(0);
  });

  describe('absolute-form request targets are routed on their path', () => {
    it('GET http://host/resources/files/report.md', async () => {
      expectRead(await rawGet(srv.url, `http://${hostPort}/resources/files/report.md`), { body: 'hello report', containment: 'sealed' });
    });

    it('an authority that differs from the Host header changes nothing', async () => {
      expectRead(await rawGet(srv.url, 'http://other.example:9/resources/files/x'), { body: 'ex', containment: 'sealed' });
    });

    it('GET http://host/resources/files lists', async () => {
      const res = await rawGet(srv.url, `http://${hostPort}/resources/files`);
      expect(res.status).toBe(200);
      expect(Object.keys(res.json())).toEqual(LIST_KEYS);
    });

    it('an escape in absolute form is refused', async () => {
      const res = await rawGet(srv.url, `http://${hostPort}/resources/files/..%2Fsecret.txt`);
      expectNoSecret(res);
      expectError(res, 'outside_root', { generation: 0 });
    });

    it('a non-GET in absolute form is 405', async () => {
      expectError(await rawRequest(srv.url, { method: 'DELETE', target: `http://${hostPort}/resources/files/x` }), 'method_not_allowed', { generation: 0 });
    });

    it('GET http://host/resources/other is 404 not_found', async () => {
      expectError(await rawGet(srv.url, `http://${hostPort}/resources/other`), 'not_found');
    });
  });
});

// ── An undeclared plane ─────────────────────────────────────────────────────────────────────────

describe('no exports.files block', () => {
  let workdir: string;
  let srv: Capsule;

  beforeAll(async () => {
    workdir = tempDir();
    makeTree(workdir, ['out/report.md: hello report', 'report.md: top']);
    srv = await openCapsule({ workdir, traceDir, yaml: filesManifest(null), containment: 'scoped' });
  });

  afterAll(async () => {
    await srv?.close();
    removeTree(workdir);
  });

  it.each([
    '/resources/files',
    '/resources/files/',
    '/resources/files?x',
    '/resources/files/report.md',
    '/resources/files/out/report.md',
    '/resources/files/../x',
  ])('GET %s is 404 no_resource_plane', async (target) => {
    const res = await rawGet(srv.url, target);
    expectError(res, 'no_resource_plane', { generation: 0, containment: 'scoped' });
  });

  it.each(['POST', 'HEAD', 'DELETE'])('%s is still 405 (the method is checked first)', async (method) => {
    for (const target of ['/resources/files', '/resources/files/report.md']) {
      const res = await rawRequest(srv.url, { method, target });
      expectError(res, 'method_not_allowed', { generation: 0, containment: 'scoped', head: method === 'HEAD' });
    }
  });

  it('other paths under /resources/ are still 404 not_found', async () => {
    expectError(await rawGet(srv.url, '/resources/other'), 'not_found');
  });
});

// ── Generation ──────────────────────────────────────────────────────────────────────────────────

describe('generation', () => {
  it('follows advanceGeneration on reads, listings and refusals; the etag of an unchanged file does not move', async () => {
    const workdir = tempDir();
    makeTree(workdir, ['out/report.md: hello report']);
    const srv = await openCapsule({ workdir, traceDir, yaml: filesManifest('out/'), containment: 'advisory' });
    try {
      const etags = new Set<string>();
      const mtimes = new Set<string>();
      for (let gen = 0; gen <= 3; gen++) {
        expect(srv.session.generation).toBe(gen);
        const read = await rawGet(srv.url, '/resources/files/report.md');
        expectRead(read, { body: 'hello report', containment: 'advisory', generation: gen });
        etags.add(read.header('etag')!);
        mtimes.add(read.header('x-murmur-mtime-ms')!);

        const list = await rawGet(srv.url, '/resources/files');
        expect(list.header('x-murmur-generation')).toBe(String(gen));
        expect(list.json().generation).toBe(gen);
        expect(list.json().entries[0].sha256).toBe(sha256Hex('hello report'));

        expectError(await rawGet(srv.url, '/resources/files/missing'), 'not_found', { generation: gen });
        expectError(await rawRequest(srv.url, { method: 'PUT', target: '/resources/files/report.md', body: 'x' }), 'method_not_allowed', { generation: gen });

        expect(srv.session.advanceGeneration()).toBe(gen + 1);
      }
      expect([...etags]).toEqual([`"sha256:${sha256Hex('hello report')}"`]);
      expect(mtimes.size).toBe(1);
      // And the trace records the generation each request saw.
      const gens = readTrace(srv.tracePath)
        .filter((e) => e.event_type !== 'session_start')
        .map((e) => e.generation);
      expect(gens).toEqual([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]);
    } finally {
      await srv.close();
      removeTree(workdir);
    }
  });
});

// ── Reads during rename churn ───────────────────────────────────────────────────────────────────

/** Version n of the churned file: a header naming n and its length, then a filler byte of n. */
function churnVersion(n: number): Buffer {
  const size = 1024 + ((n * 7919) % 30000);
  const buf = Buffer.alloc(size, 97 + (n % 26));
  Buffer.from(`v=${n} len=${size}\n`).copy(buf);
  return buf;
}

// The child writes each version beside the root and renames it into place until told to stop.
const CHURN_CHILD = `
const fs = require('fs');
const { STAGE, TARGET, STOP } = process.env;
${churnVersion.toString()}
let n = 0;
process.stdout.write('go\\n');
while (!fs.existsSync(STOP)) {
  n++;
  const tmp = STAGE + '/v' + n;
  fs.writeFileSync(tmp, churnVersion(n));
  fs.renameSync(tmp, TARGET);
}
process.stdout.write('renames=' + n + '\\n');
`;

describe('concurrent reads during rename churn', () => {
  it('every etag is the SHA-256 of its body and every body is one whole version', async () => {
    const workdir = tempDir();
    mkdirSync(join(workdir, 'out'));
    mkdirSync(join(workdir, 'stage'));
    writeFileSync(join(workdir, 'out', 'churn.bin'), churnVersion(0));
    const srv = await openCapsule({ workdir, traceDir, yaml: filesManifest('out/'), containment: 'sealed' });
    const stop = join(workdir, 'stop');
    const child = spawn(process.execPath, ['-e', CHURN_CHILD], {
      env: { ...process.env, STAGE: join(workdir, 'stage'), TARGET: join(workdir, 'out', 'churn.bin'), STOP: stop },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('go\n')) resolve();
        });
        child.on('error', reject);
        child.on('exit', () => reject(new Error(`churn child exited early: ${out}`)));
      });

      const READS = 600;
      const results = await pool(
        Array.from({ length: READS }, (_, i) => i),
        16,
        async () => {
          const res = await rawGet(srv.url, '/resources/files/churn.bin');
          expect(res.status).toBe(200);
          expectFramed(res);
          const etag = res.header('etag');
          expect(etag).toBe(`"sha256:${sha256Hex(res.body)}"`);
          const m = /^v=(\d+) len=(\d+)\n/.exec(res.body.subarray(0, 40).toString('latin1'));
          expect(m, 'a version header').not.toBeNull();
          const n = Number(m![1]);
          expect(res.body.length).toBe(Number(m![2]));
          expect(res.body.equals(churnVersion(n)), `body is exactly version ${n}`).toBe(true);
          return { n, sha: sha256Hex(res.body), bytes: res.body.length };
        },
      );

      writeFileSync(stop, '');
      expect(await exited).toBe(0);
      const renames = Number(/renames=(\d+)/.exec(out)?.[1]);
      expect(renames).toBeGreaterThan(50);
      const versions = new Set(results.map((r) => r.n));
      expect(versions.size, 'reads saw the file change').toBeGreaterThan(5);

      // Every 200 has its trace line with the same bytes and hash.
      const reads = readTrace(srv.tracePath).filter((e) => e.event_type === 'resource_read');
      expect(reads).toHaveLength(READS);
      const traced = reads.map((e) => `${e.sha256}:${e.bytes}:${e.outcome}`).sort();
      expect(traced).toEqual(results.map((r) => `${r.sha}:${r.bytes}:ok`).sort());
    } finally {
      if (child.exitCode === null) {
        writeFileSync(stop, '');
        await exited;
      }
      await srv.close();
      removeTree(workdir);
    }
  });
});
