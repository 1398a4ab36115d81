// The listing's validator (issue 38, item 3): a strong etag that is the SHA-256 of exactly the body
// sent, in the files' etag format, and If-None-Match naming it answered 304 with no body and the
// same headers, traced as a listing that sent none (outcome not_modified). As for files
// (conditional-get.test.ts): a weak tag, another tag or a changed export get the whole listing.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { capsule, filesManifest } from '../helpers/capsule.js';
import { rawGet, rawRequest, readTrace } from '../helpers/http.js';

const L = '/resources/files';

describe('the listing carries a strong etag and answers If-None-Match', () => {
  it("the etag is the sha256 of the exact body sent, in the files' format", async () => {
    const c = await capsule({ tree: ['out/report.md: known bytes', 'out/sub/b.txt: b'], yaml: filesManifest('out/'), containment: 'sealed' });
    const res = await rawGet(c.url, L);
    expect(res.status).toBe(200);
    expect(res.header('etag')).toBe(`"sha256:${createHash('sha256').update(res.body).digest('hex')}"`);
    // In the read's place: right after content-type.
    expect(res.headerNames.slice(0, 2)).toEqual(['content-type', 'etag']);
    // The same listing asked for again is the same bytes, so the same etag.
    expect((await rawGet(c.url, `${L}/`)).header('etag')).toBe(res.header('etag'));
  });

  it('answers 304 with no body and the same headers for the current etag, alone, in a list, or *', async () => {
    const c = await capsule({ tree: ['out/report.md: known bytes'], yaml: filesManifest('out/'), containment: 'sealed' });
    const full = await rawGet(c.url, L);
    const etag = full.header('etag')!;
    for (const value of [etag, `"other", ${etag}`, `W/"x",${etag}`, '*']) {
      const res = await rawRequest(c.url, { target: L, headers: [['If-None-Match', value]] });
      expect(res.status, value).toBe(304);
      expect(res.body.length, value).toBe(0);
      expect(res.header('etag'), value).toBe(etag);
      expect(res.header('content-type'), value).toBe('application/json');
      expect(res.header('x-murmur-containment'), value).toBe('sealed');
      expect(res.header('x-murmur-generation'), value).toBe('0');
      expect(res.header('x-murmur-export-root'), value).toBe('out/');
      expect(res.headerNames, value).not.toContain('content-length');
      expect(res.raw.toString('latin1'), value).toMatch(/\r\n\r\n$/);
    }
    const lists = readTrace(c.tracePath).filter((e) => e.event_type === 'resource_list');
    expect(lists[0]).toMatchObject({ outcome: 'ok', entry_count: 1, total_bytes: 11 });
    expect(lists).toHaveLength(5);
    for (const l of lists.slice(1)) expect(l).toMatchObject({ root: 'out/', outcome: 'not_modified', reason: null, entry_count: 1, total_bytes: 11 });
    // Not one of them was followed by an undelivered line: a 304 sends no body to lose.
    expect(readTrace(c.tracePath).filter((e) => e.event_type === 'response_undelivered')).toEqual([]);
  });

  it('sends the whole listing for a weak tag, another tag, or an export that changed since', async () => {
    const c = await capsule({ tree: ['out/report.md: known bytes'], yaml: filesManifest('out/'), containment: 'sealed' });
    const first = await rawGet(c.url, L);
    const etag = first.header('etag')!;
    for (const value of [`W/${etag}`, '"sha256:0000"', etag.toUpperCase(), etag.slice(0, -1)]) {
      const res = await rawRequest(c.url, { target: L, headers: [['If-None-Match', value]] });
      expect([res.status, res.body.equals(first.body)], value).toEqual([200, true]);
    }
    writeFileSync(join(c.workdir, 'out/report.md'), 'newer bytes');
    const changed = await rawRequest(c.url, { target: L, headers: [['If-None-Match', etag]] });
    expect(changed.status).toBe(200);
    expect(changed.header('etag')).not.toBe(etag);
    expect(changed.header('etag')).toBe(`"sha256:${createHash('sha256').update(changed.body).digest('hex')}"`);
    // Another generation is another body (the listing names it), so another etag: nothing stale is confirmed.
    const current = changed.header('etag')!;
    c.session.advanceGeneration();
    const next = await rawRequest(c.url, { target: L, headers: [['If-None-Match', current]] });
    expect([next.status, JSON.parse(next.body.toString()).generation]).toEqual([200, 1]);
  });

  it('leaves HEAD a 405 and an undeclared plane a 404, If-None-Match or not', async () => {
    const c = await capsule({ tree: ['out/report.md: x'], yaml: filesManifest('out/') });
    const head = await rawRequest(c.url, { method: 'HEAD', target: L, headers: [['If-None-Match', '*']] });
    expect(head.status).toBe(405);
    const none = await capsule({ yaml: 'name: c\nversion: "1"\n' });
    const res = await rawRequest(none.url, { target: L, headers: [['If-None-Match', '*']] });
    expect(res.status).toBe(404);
  });
});
