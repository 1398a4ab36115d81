// Conditional GET (RFC 9110 section 13.1.2, with the strong comparison the spec decides): a client
// that already has the bytes (it sends the strong etag the server computes for what it would send)
// gets a 304 with no body and the same validator headers, traced as a read that sent no body; a
// weak tag, another tag or changed bytes get the whole body. HEAD stays 405; Range is ignored.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { mintToken, randomNonceHex } from '../../src/handle/token.js';
import { capsule, filesManifest } from '../helpers/capsule.js';
import { rawGet, rawRequest, readTrace } from '../helpers/http.js';

const F = '/resources/files/report.md';

describe('If-None-Match on the operator plane', () => {
  it('answers 304 for the current strong etag, alone, in a list, or as *', async () => {
    const c = await capsule({ tree: ['out/report.md: known bytes'], yaml: filesManifest('out/'), containment: 'sealed' });
    const full = await rawGet(c.url, F);
    const etag = full.header('etag')!;
    for (const value of [etag, `"other", ${etag}`, `W/"x",${etag}`, '*']) {
      const res = await rawRequest(c.url, { target: F, headers: [['If-None-Match', value]] });
      expect(res.status, value).toBe(304);
      expect(res.body.length, value).toBe(0);
      expect(res.header('etag'), value).toBe(etag);
      expect(res.header('x-murmur-containment'), value).toBe('sealed');
      expect(res.header('x-murmur-generation'), value).toBe('0');
      // RFC 9110 8.6: the raw head, not a client's view of it, has no content-length at all.
      expect(res.headerNames, value).not.toContain('content-length');
      expect(res.raw.toString('latin1'), value).toMatch(/\r\n\r\n$/);
    }
    const reads = readTrace(c.tracePath).filter((e) => e.event_type === 'resource_read');
    expect(reads[0]).toMatchObject({ outcome: 'ok', bytes: 11 });
    for (const r of reads.slice(1)) expect(r).toMatchObject({ path: 'report.md', outcome: 'not_modified', bytes: 0, sha256: etag.slice(8, -1) });
  });

  it('sends the whole body for a weak tag, another tag, or bytes that changed since', async () => {
    const c = await capsule({ tree: ['out/report.md: known bytes'], yaml: filesManifest('out/'), containment: 'sealed' });
    const etag = (await rawGet(c.url, F)).header('etag')!;
    for (const value of [`W/${etag}`, '"sha256:0000"', etag.toUpperCase(), `${etag.slice(0, -1)}`]) {
      const res = await rawRequest(c.url, { target: F, headers: [['If-None-Match', value]] });
      expect([res.status, res.body.toString()], value).toEqual([200, 'known bytes']);
    }
    writeFileSync(join(c.workdir, 'out/report.md'), 'newer bytes');
    const changed = await rawRequest(c.url, { target: F, headers: [['If-None-Match', etag]] });
    expect(changed.status).toBe(200);
    expect(changed.body.toString()).toBe('newer bytes');
    expect(changed.header('etag')).not.toBe(etag);
  });

  it('leaves HEAD a 405 and ignores Range (the whole body, 200)', async () => {
    const c = await capsule({ tree: ['out/report.md: known bytes'], yaml: filesManifest('out/'), containment: 'sealed' });
    const head = await rawRequest(c.url, { method: 'HEAD', target: F, headers: [['If-None-Match', '*']] });
    expect(head.status).toBe(405);
    const ranged = await rawGet(c.url, F, [['Range', 'bytes=0-3']]);
    expect([ranged.status, ranged.body.toString(), ranged.header('accept-ranges')]).toEqual([200, 'known bytes', undefined]);
  });
});

describe('If-None-Match on the peer plane', () => {
  it('a redeem of bytes the peer already has is a 304, traced not_modified', async () => {
    const yaml = 'name: reporter\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: 10m\n    max_bytes: 1Ki\n';
    const c = await capsule({ tree: ['out/report.md: known bytes'], yaml, containment: 'sealed' });
    const audience = 'reader@localhost:41235';
    const token = mintToken(c.session.key!, { v: 1, iss: c.session.sessionId, p: 'report.md', exp: Date.now() + 60_000, n: randomNonceHex() }, audience);
    const first = await rawGet(c.url, `/resources/peer/${token}`, [['x-murmur-audience', audience]]);
    expect(first.status).toBe(200);
    const again = await rawGet(c.url, `/resources/peer/${token}`, [
      ['x-murmur-audience', audience],
      ['If-None-Match', first.header('etag')!],
    ]);
    expect([again.status, again.body.length, again.header('etag')]).toEqual([304, 0, first.header('etag')]);
    expect(again.header('x-murmur-handle-id')).toBe(first.header('x-murmur-handle-id'));
    expect(again.headerNames).not.toContain('content-length');
    const redeems = readTrace(c.tracePath)
      .filter((e) => e.event_type === 'peer_handle_redeem')
      .map((e) => e.outcome);
    expect(redeems).toEqual(['ok', 'not_modified']);
  });
});
