// The trace over a real socket (SPEC section 8, operator-plane events): every operator-plane request
// leaves exactly one line, written before the reply; other paths leave none; lines parse with the
// common fields then the event's fields in the spec's order; refusals carry null bytes and sha256;
// paths are recorded percent-decoded as requested, with `mh1.` tokens redacted; no secret ever;
// and a trace that cannot be written makes the plane fail closed.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, constants, existsSync, openSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseManifest } from '../../src/manifest/model.js';
import { launch as launchSession } from '../../src/launch/launch.js';
import { openSession } from '../../src/session/open-session.js';
import { buildEscapeTree, ESCAPE_CASES, MAX_BYTES, SECRET, SECRET_SHA } from '../helpers/escape-cases.js';
import { filesManifest, openCapsule, type Capsule } from '../helpers/capsule.js';
import { pool, rawGet, rawRequest, readTrace, sha256Hex, type RawRequest, type RawResponse } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

const COMMON = ['event_type', 'event_id', 'parent_id', 'session_id', 'timestamp'];
const FIELDS: Record<string, string[]> = {
  session_start: ['containment_achieved', 'resolver', 'tools_declared', 'capsule', 'confinement', 'effective_grants'],
  resource_list: ['root', 'entry_count', 'total_bytes', 'generation', 'containment_achieved', 'outcome', 'reason'],
  resource_read: ['path', 'outcome', 'bytes', 'sha256', 'generation', 'containment_achieved', 'reason'],
  session_end: ['reason', 'counts'],
};
const GRANT_KEYS = ['exports_files', 'peer_files', 'peer_fetch_allow', 'network_allow', 'achieved_containment', 'runtime_writes'];
// `evt_` + a UUIDv7 as 32 lowercase hex: version nibble 7, variant 10xx.
const EVENT_ID = /^evt_[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$/;

const MESSAGE: Record<string, string> = {
  no_resource_plane: 'this capsule declares no exports.files block, so it has no resource plane',
  not_found: 'no such file under the export root',
  outside_root: 'the requested path resolves outside the export root',
  symlink_refused: 'a symlink was encountered and the achieved containment class is scoped',
  not_a_regular_file: 'the requested path is not a regular file',
  too_large: `file exceeds the declared exports.files.max_bytes of ${MAX_BYTES} bytes`,
  method_not_allowed: 'the resource plane serves GET only; it has no write path',
};

/** Percent-decodes once on bytes (a `%` without two hex digits stays), then decodes UTF-8 lossily. */
function decodedAsRequested(raw: string): string {
  const bytes = Buffer.from(
    raw.replace(/%([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))),
    'latin1',
  );
  return new TextDecoder('utf-8').decode(bytes);
}

/** Checks one parsed line against the common fields and its event's field order. */
function expectWellFormed(line: Record<string, unknown>, session: Session, startId: string, since: number): void {
  const type = line.event_type as string;
  expect(Object.keys(FIELDS), `known event ${type}`).toContain(type);
  expect(Object.keys(line)).toEqual([...COMMON, ...FIELDS[type]!]);
  expect(line.event_id).toMatch(EVENT_ID);
  expect(line.parent_id).toBe(type === 'session_start' ? null : startId);
  expect(line.session_id).toBe(session.sessionId);
  expect(Number.isInteger(line.timestamp)).toBe(true);
  expect(line.timestamp as number).toBeGreaterThanOrEqual(since);
  expect(line.timestamp as number).toBeLessThanOrEqual(Date.now());
  if (type !== 'session_end') expect(line.containment_achieved).toBe(session.containment);
}

/** Sends one request and returns the answer with the lines it added to the trace. */
async function tracedRequest(srv: Capsule, req: RawRequest): Promise<{ res: RawResponse; lines: Array<Record<string, unknown>> }> {
  const before = readTrace(srv.tracePath).length;
  const res = await rawRequest(srv.url, req);
  // The line is written before the reply leaves, so it is already there.
  const lines = readTrace(srv.tracePath).slice(before);
  return { res, lines };
}

let traceDir: string;
beforeAll(() => {
  traceDir = tempDir('rp-trace-');
});
afterAll(() => removeTree(traceDir));

describe.each(['sealed', 'scoped'] as const)('one line per operator-plane request (%s)', (containment) => {
  let workdir: string;
  let srv: Capsule;
  let startId: string;
  let since: number;

  beforeAll(async () => {
    workdir = tempDir();
    // A small sparse file stands in for the 8 GiB one, so that the listing stays fast.
    buildEscapeTree(workdir, { sparse: false });
    makeTree(workdir, ['out/sparse.bin @ 4k', 'out/%ZZ: literal']);
    since = Date.now();
    srv = await openCapsule({ workdir, traceDir, yaml: filesManifest('out/', MAX_BYTES), containment });
    const start = readTrace(srv.tracePath);
    expect(start).toHaveLength(1);
    startId = start[0]!.event_id as string;
  });

  afterAll(async () => {
    await srv?.close();
    // Everything the session wrote, whole: every line parses and is well-formed; no secret, no token.
    const text = readFileSync(srv.tracePath, 'utf8');
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain(SECRET_SHA);
    expect(text).not.toMatch(/mh1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/);
    const lines = readTrace(srv.tracePath);
    for (const line of lines) expectWellFormed(line, srv.session, startId, since);
    expect(new Set(lines.map((l) => l.event_id)).size).toBe(lines.length);
    removeTree(workdir);
  });

  it('session_start comes first, with the class, the resolver, the tools and the grants', () => {
    const [start] = readTrace(srv.tracePath);
    expectWellFormed(start!, srv.session, startId, since);
    expect(start).toMatchObject({
      event_type: 'session_start',
      parent_id: null,
      containment_achieved: containment,
      resolver: srv.session.resolver,
      tools_declared: [],
    });
    expect(Object.keys(start!.effective_grants as object)).toEqual(GRANT_KEYS);
    expect(start!.effective_grants).toMatchObject({
      exports_files: { root: 'out/', mode: 'read-only', max_bytes: MAX_BYTES },
      peer_files: null,
      achieved_containment: containment,
    });
  });

  it.each(ESCAPE_CASES)('GET /resources/files/$raw leaves one resource_read line', async (c) => {
    const expected = containment === 'scoped' ? c.scoped : c.follow;
    const { res, lines } = await tracedRequest(srv, { target: `/resources/files/${c.raw}` });
    expect(lines).toHaveLength(1);
    const line = lines[0]!;
    expectWellFormed(line, srv.session, startId, since);
    expect(line.event_type).toBe('resource_read');
    expect(line.path).toBe(decodedAsRequested(c.raw));
    expect(line.generation).toBe(0);
    if (expected === 'ok') {
      expect(res.status).toBe(200);
      expect(line).toMatchObject({ outcome: 'ok', bytes: res.body.length, sha256: sha256Hex(res.body), reason: null });
    } else {
      expect(line).toMatchObject({ outcome: expected, bytes: null, sha256: null, reason: MESSAGE[expected] });
      expect(res.json()).toEqual({ error: expected, message: MESSAGE[expected] });
    }
  });

  it.each(['/resources/files', '/resources/files/', '/resources/files?x=../y', `http://127.0.0.1/resources/files`])(
    'GET %s leaves one resource_list line matching the body',
    async (target) => {
      const { res, lines } = await tracedRequest(srv, { target });
      expect(res.status).toBe(200);
      expect(lines).toHaveLength(1);
      const body = res.json();
      expect(lines[0]).toMatchObject({
        event_type: 'resource_list',
        root: 'out/',
        entry_count: body.entries.length,
        total_bytes: body.entries.reduce((n: number, e: { size_bytes: number }) => n + e.size_bytes, 0),
        generation: 0,
        outcome: 'ok',
        reason: null,
      });
      expect(body.entries.length).toBeGreaterThan(0);
    },
  );

  it.each(['POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'TRACE'])('%s on the list and read routes leaves one line each', async (method) => {
    const list = await tracedRequest(srv, { method, target: '/resources/files' });
    expect(list.res.status).toBe(405);
    expect(list.lines).toHaveLength(1);
    expect(list.lines[0]).toMatchObject({
      event_type: 'resource_list',
      root: 'out/',
      entry_count: null,
      total_bytes: null,
      outcome: 'method_not_allowed',
      reason: MESSAGE.method_not_allowed,
    });
    const read = await tracedRequest(srv, { method, target: '/resources/files/sub%20dir/x.md?q', body: method === 'HEAD' ? undefined : 'body' });
    expect(read.res.status).toBe(405);
    expect(read.lines).toHaveLength(1);
    expect(read.lines[0]).toMatchObject({
      event_type: 'resource_read',
      path: 'sub dir/x.md',
      outcome: 'method_not_allowed',
      bytes: null,
      sha256: null,
      reason: MESSAGE.method_not_allowed,
    });
  });

  it.each([
    ['GET', '/resources/other'],
    ['GET', '/resources/filesx/a'],
    ['GET', '/resources'],
    ['GET', '/resources/'],
    ['GET', '/resources/%ZZ'],
    ['GET', '/resources/files%2Freport.md'],
    ['POST', '/resources/other'],
    ['DELETE', '/resources'],
    ['POST', '/resources/peer/x'],
    ['GET', '/resources/peer'],
    ['GET', '/resources/peer/'],
    ['GET', '/.well-known/agent-card.json'],
    ['GET', '/elsewhere'],
    ['GET', '//resources/files/report.md'],
  ])('%s %s leaves no line', async (method, target) => {
    const { res, lines } = await tracedRequest(srv, { method, target });
    expect(res.status).toBeGreaterThanOrEqual(200); // answered, and not traced
    expect(lines).toEqual([]);
  });

  it.each([
    ['%ZZ', '%ZZ', 'ok'],
    ['%', '%', 'not_found'],
    ['a%2', 'a%2', 'not_found'],
    ['%C0%AE', '\uFFFD\uFFFD', 'outside_root'],
    ['..%2F..%2Fsecret.txt', '../../secret.txt', 'outside_root'],
    ['%2e%2e/%2e%2e/secret.txt', '../../secret.txt', 'outside_root'],
    ['sub%252F..%252Fsecret', 'sub%2F..%2Fsecret', 'not_found'],
    ['report.md%00.txt', 'report.md\u0000.txt', 'outside_root'],
    ['caf%C3%A9', 'café', 'not_found'],
  ])('a read path %s is recorded percent-decoded once, as %j', async (raw, recorded, outcome) => {
    const { lines } = await tracedRequest(srv, { target: `/resources/files/${raw}` });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ event_type: 'resource_read', path: recorded, outcome });
  });

  it.each([
    ['mh1.eyJ2IjoxfQ.c2lnbmF0dXJl', (id: string) => `<handle:${id}>`, 'mh1.eyJ2IjoxfQ.c2lnbmF0dXJl'],
    ['dir/mh1.AAAA.BBBB.', (id: string) => `dir/<handle:${id}>.`, 'mh1.AAAA.BBBB'],
    ['mh1%2Eabc%2Edef', (id: string) => `<handle:${id}>`, 'mh1.abc.def'],
    ['a/mh1.x-y.z_w/b', (id: string) => `a/<handle:${id}>/b`, 'mh1.x-y.z_w'],
  ])('an mh1 token in a requested path (%s) is redacted to its handle id', async (raw, expected, token) => {
    const { res, lines } = await tracedRequest(srv, { target: `/resources/files/${raw}` });
    expect(res.status).toBe(404);
    expect(lines).toHaveLength(1);
    const id = createHash('sha256').update(token).digest('hex').slice(0, 16);
    expect(lines[0]!.path).toBe(expected(id));
    expect(readFileSync(srv.tracePath, 'utf8')).not.toContain(token);
  });

  it('concurrent requests leave exactly one whole line each', async () => {
    const before = readTrace(srv.tracePath).length;
    const targets = Array.from(
      { length: 240 },
      (_, i) =>
        [
          '/resources/files/report.md',
          '/resources/files/sub/a.txt',
          '/resources/files/../secret.txt',
          '/resources/files',
          '/resources/other',
          '/resources/files/missing',
        ][i % 6]!,
    );
    const responses = await pool(targets, 24, (target) => rawGet(srv.url, target));
    const lines = readTrace(srv.tracePath).slice(before);
    const untraced = targets.filter((t) => t === '/resources/other').length;
    expect(lines).toHaveLength(targets.length - untraced);
    expect(lines.filter((l) => l.event_type === 'resource_list')).toHaveLength(40);
    const reads = lines.filter((l) => l.event_type === 'resource_read');
    expect(reads.filter((l) => l.path === 'report.md' && l.outcome === 'ok')).toHaveLength(40);
    expect(reads.filter((l) => l.path === '../secret.txt' && l.outcome === 'outside_root')).toHaveLength(40);
    expect(responses.every((r) => r.status !== 500)).toBe(true);
  });

  it('generation in each line is the one the request saw', async () => {
    // Last in this block: the tests above expect generation 0.
    const g = srv.session.advanceGeneration();
    const { lines } = await tracedRequest(srv, { target: '/resources/files/report.md' });
    expect(lines[0]).toMatchObject({ generation: g, outcome: 'ok' });
    const list = await tracedRequest(srv, { target: '/resources/files' });
    expect(list.lines[0]).toMatchObject({ generation: g, outcome: 'ok' });
    expect(list.res.json().generation).toBe(g);
  });
});

describe('an undeclared plane is traced', () => {
  let workdir: string;
  let srv: Capsule;

  beforeAll(async () => {
    workdir = tempDir();
    makeTree(workdir, ['out/report.md: hello report']);
    srv = await openCapsule({ workdir, traceDir, yaml: filesManifest(null), containment: 'advisory' });
  });

  afterAll(async () => {
    await srv?.close();
    removeTree(workdir);
  });

  it('the listing: one resource_list line with root "" and no_resource_plane', async () => {
    const { res, lines } = await tracedRequest(srv, { target: '/resources/files' });
    expect(res.status).toBe(404);
    expect(lines).toHaveLength(1);
    const [start] = readTrace(srv.tracePath);
    expectWellFormed(lines[0]!, srv.session, start!.event_id as string, 0);
    expect(lines[0]).toMatchObject({
      event_type: 'resource_list',
      root: '',
      entry_count: null,
      total_bytes: null,
      generation: 0,
      containment_achieved: 'advisory',
      outcome: 'no_resource_plane',
      reason: MESSAGE.no_resource_plane,
    });
  });

  it('a read: one resource_read line with the path as requested', async () => {
    const { res, lines } = await tracedRequest(srv, { target: '/resources/files/out%2Freport.md' });
    expect(res.status).toBe(404);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      event_type: 'resource_read',
      path: 'out/report.md',
      outcome: 'no_resource_plane',
      bytes: null,
      sha256: null,
      reason: MESSAGE.no_resource_plane,
    });
  });

  it('a 405 is traced; other paths are not', async () => {
    const post = await tracedRequest(srv, { method: 'POST', target: '/resources/files/x', body: 'x' });
    expect(post.res.status).toBe(405);
    expect(post.lines).toHaveLength(1);
    expect(post.lines[0]).toMatchObject({ event_type: 'resource_read', path: 'x', outcome: 'method_not_allowed' });
    expect((await tracedRequest(srv, { target: '/resources/other' })).lines).toEqual([]);
  });

  it('session_start declares no exports_files', () => {
    const [start] = readTrace(srv.tracePath);
    expect(start!.effective_grants).toMatchObject({ exports_files: null });
  });
});

describe('a trace that cannot be written', () => {
  it('makes reads and listings fail closed with 500 io_error and no file bytes', async () => {
    const workdir = tempDir();
    const dir = tempDir('rp-fifo-');
    const content = 'FILE-BYTES-that-must-not-leave';
    makeTree(workdir, [`out/report.md: ${content}`, 'out/other.txt: more bytes']);
    const fifo = join(dir, 'trace.jsonl');
    execFileSync('mkfifo', [fifo]);
    // The reader end is opened non-blocking first (so it needs no writer and never parks a thread in
    // read(2)); the session's O_WRONLY open then finds a reader and succeeds.
    const readerFd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    let readerOpen = true;
    const { session, server: srv } = await launchSession({ workdir, manifest: parseManifest(filesManifest('out/')), tracePath: fifo, containment: 'sealed' });
    try {
      const buf = Buffer.alloc(65536);
      const n = readSync(readerFd, buf, 0, buf.length, null);
      const received = buf.subarray(0, n).toString('utf8');
      expect(received.endsWith('\n')).toBe(true);
      expect(received.trim().split('\n')).toHaveLength(1);
      expect(JSON.parse(received)).toMatchObject({ event_type: 'session_start', session_id: session.sessionId });
      // With no reader left, every later write fails (EPIPE).
      closeSync(readerFd);
      readerOpen = false;

      const contentSha = sha256Hex(content);
      const check = (res: RawResponse) => {
        expect(res.status).toBe(500);
        expect(res.header('content-type')).toBe('application/json');
        expect(Number(res.header('content-length'))).toBe(res.body.length);
        expect(res.header('etag')).toBeUndefined();
        const body = res.json();
        expect(Object.keys(body)).toEqual(['error', 'message']);
        expect(body.error).toBe('io_error');
        expect(body.message).toMatch(/^read failed: /);
        const raw = res.raw.toString('latin1');
        expect(raw).not.toContain(content);
        expect(raw).not.toContain(contentSha);
        expect(raw).not.toContain('report.md');
      };
      check(await rawGet(srv.url, '/resources/files/report.md'));
      check(await rawGet(srv.url, '/resources/files'));
      check(await rawGet(srv.url, '/resources/files/'));
      check(await rawGet(srv.url, '/resources/files/missing'));
      // It stays closed: nothing is latched open by a first failure.
      check(await rawGet(srv.url, '/resources/files/report.md'));
    } finally {
      if (readerOpen) closeSync(readerFd);
      await srv.close();
      await session.close();
      removeTree(workdir);
      removeTree(dir);
    }
  });

  it('openSession rejects when session_start cannot be written (/dev/full)', async () => {
    const workdir = tempDir();
    try {
      await expect(openSession({ workdir, manifest: parseManifest(filesManifest('out/')), tracePath: '/dev/full' })).rejects.toThrow();
      expect(existsSync(join(workdir, 'out'))).toBe(false);
    } finally {
      removeTree(workdir);
    }
  });
});
