import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { filesManifest, openCapsule, type Capsule } from '../helpers/capsule.js';
import { rawExchange, rawGet, readTrace, sha256Hex, type RawResponse } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';
import { sleep } from '../helpers/adversary.js';

// ── 8. Pipelining and smuggling ─────────────────────────────────────────────────────────────────

describe('pipelining and request smuggling', () => {
  let srv: Capsule;
  const VICTIM = 'VICTIM-bytes-only-a-smuggled-request-asks-for';
  const sizes = [1, 100_000, 10, 1_000_000, 0, 50_000, 3, 700_000];
  const content = (i: number) => Buffer.alloc(sizes[i]!, 97 + i);
  beforeAll(async () => {
    const work = tempDir('rp-adv-pipe-');
    makeTree(work, [`out/victim.txt: ${VICTIM}`]);
    sizes.forEach((_, i) => writeFileSync(join(work, `out/f${i}`), content(i)));
    srv = await openCapsule({ workdir: work, yaml: filesManifest('out/', 4 << 20), containment: 'sealed' });
    return async () => {
      await srv.close();
      removeTree(work);
    };
  });

  const host = () => new URL(srv.url).host;
  const get = (path: string, extra = '') => `GET ${path} HTTP/1.1\r\nHost: ${host()}\r\n${extra}\r\n`;
  const victimReads = () => readTrace(srv.tracePath).filter((l) => l.event_type === 'resource_read' && l.path === 'victim.txt').length;

  it('40 pipelined reads of files of very different sizes come back in order, each whole', async () => {
    const order = Array.from({ length: 40 }, (_, k) => (k * 5) % sizes.length);
    const bytes = order.map((i, k) => get(`/resources/files/f${i}`, k === order.length - 1 ? 'Connection: close\r\n' : '')).join('');
    const responses = await rawExchange(srv.url, bytes, 30_000);
    expect(responses).toHaveLength(order.length);
    responses.forEach((r, k) => {
      expect(r.status).toBe(200);
      expect(r.body.equals(content(order[k]!)), `response ${k}`).toBe(true);
      expect(r.header('etag')).toBe(`"sha256:${sha256Hex(r.body)}"`);
    });
  });

  const smuggled = `GET /resources/files/victim.txt HTTP/1.1\r\nHost: x\r\n\r\n`;
  const attempts: Array<[string, string, number[]]> = [
    ['GET with a content-length body', `GET /resources/files/f0 HTTP/1.1\r\nHost: h\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`, [200, 200]],
    [
      'GET with a chunked body',
      `GET /resources/files/f0 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`,
      [200, 200],
    ],
    [
      'duplicate content-length (0 then n)',
      `GET /resources/files/f0 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`,
      [400],
    ],
    ['content-length list', `GET /resources/files/f0 HTTP/1.1\r\nHost: h\r\nContent-Length: 0, ${smuggled.length}\r\n\r\n${smuggled}`, [400]],
    ['CL + TE (CL.TE)', `POST /resources/files/f0 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`, [400]],
    [
      'TE + CL (TE.CL)',
      `POST /resources/files/f0 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`,
      [400],
    ],
    [
      'TE with a space before the colon',
      `POST /resources/files/f0 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\nContent-Length: 0\r\n\r\n${smuggled}`,
      [400],
    ],
    ['TE chunked, identity', `POST /resources/files/f0 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n${smuggled}`, [400]],
    ['TE xchunked', `POST /resources/files/f0 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n${smuggled}`, [400]],
    ['obs-fold TE', `POST /resources/files/f0 HTTP/1.1\r\nHost: h\r\nX-A: b\r\n Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n${smuggled}`, [400]],
    ['bare LF line endings', `GET /resources/files/f0 HTTP/1.1\nHost: h\nContent-Length: ${smuggled.length}\n\n${smuggled}`, [400]],
    [
      'chunk-size with extension and smuggled trailer',
      `GET /resources/files/f0 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0;ext=1\r\nX: ${smuggled.replace(/\r\n/g, ' ')}\r\n\r\n`,
      [200, 200],
    ],
    ['negative content-length', `GET /resources/files/f0 HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n${smuggled}`, [400]],
    ['plus-signed content-length', `GET /resources/files/f0 HTTP/1.1\r\nHost: h\r\nContent-Length: +${smuggled.length}\r\n\r\n${smuggled}`, [400]],
  ];
  it.each(attempts)('%s: the embedded request is never executed (statuses %j)', async (_name, bytes, statuses) => {
    const before = victimReads();
    const tail = `GET /resources/files/f2 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n`;
    let responses: RawResponse[] = [];
    try {
      responses = await rawExchange(srv.url, bytes + tail, 10_000);
    } catch (error) {
      // A connection the server reset without a complete answer is a refusal too.
      expect(String(error)).toMatch(/ECONNRESET|header block|timed out/);
    }
    for (const r of responses) expect(r.raw.toString('latin1')).not.toContain(VICTIM);
    await sleep(50);
    expect(victimReads() - before).toBe(0);
    // Either both requests are answered (the body was framed and drained) or the parser refused the
    // connection outright; never a third answer.
    expect(responses.map((r) => r.status)).toEqual(statuses);
  });

  it('every 200 read carried a trace line with its sha256 (the trace is never behind the bytes)', async () => {
    const before = readTrace(srv.tracePath).length;
    const targets = Array.from({ length: 60 }, (_, i) => `/resources/files/f${i % sizes.length}`);
    const responses = await Promise.all(targets.map((t) => rawGet(srv.url, t)));
    const lines = readTrace(srv.tracePath).slice(before);
    expect(lines).toHaveLength(targets.length);
    const shas = lines.map((l) => l.sha256);
    for (const r of responses) expect(shas).toContain(/sha256:([0-9a-f]{64})/.exec(r.header('etag')!)![1]);
  });
});
