// The tools as their docs say (issue 27, point 7): share-file's ttl takes an integer of seconds as
// well as a duration string; fetch-peer-file's size limit is the launch's to set (a 20 MiB handoff
// that share-file minted is fetchable once the fetcher allows it); the tool text names no tool the
// server does not have. Real capsules on loopback.
import { createHash } from 'node:crypto';
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { callTool, toolDefinitions } from '../../src/tools/index.js';
import { capsule } from '../helpers/capsule.js';
import { refusal } from '../helpers/refusal.js';
import { runCli } from '../helpers/cli.js';

const SHARES =
  'name: alpha\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: 10m\n    max_bytes: 32Mi\ncapabilities:\n  network:\n    allow: [localhost, 127.0.0.1]\n';
const FETCHES = 'name: beta\nversion: "1"\ncapabilities:\n  peer_fetch:\n    allow: [localhost, 127.0.0.1]\n';
const MiB = 1024 * 1024;

describe('share-file ttl', () => {
  it('takes an integer of seconds as the manifest grammar reads a bare number, and refuses 0 and negatives as invalid_ttl', async () => {
    const alpha = await capsule({ yaml: SHARES, tree: ['out/a.txt: a'] });
    const beta = await capsule({ yaml: FETCHES });
    const before = Date.now();
    const minted = await callTool(alpha.session, 'share-file', { path: 'a.txt', peer: beta.address, ttl: 90 });
    expect(minted.expires_at_ms).toBeGreaterThanOrEqual(before + 90_000);
    expect(minted.expires_at_ms).toBeLessThanOrEqual(Date.now() + 90_000);
    const asText = await callTool(alpha.session, 'share-file', { path: 'a.txt', peer: beta.address, ttl: '90' });
    expect(asText.expires_at_ms - minted.expires_at_ms).toBeLessThan(60_000);
    for (const ttl of [0, -5]) {
      const r = await refusal(callTool(alpha.session, 'share-file', { path: 'a.txt', peer: beta.address, ttl }));
      expect(r.code, String(ttl)).toBe('invalid_ttl');
    }
  });
});

describe("fetch-peer-file's limit", () => {
  it('refuses a 20 MiB handoff by default (too_large, nothing stored) and lands it under a raised fetchMaxBytes', async () => {
    const alpha = await capsule({ yaml: SHARES, tree: ['out/'] });
    const fd = openSync(join(alpha.workdir, 'out/big.bin'), 'w');
    const chunk = Buffer.alloc(MiB, 0x5a);
    for (let i = 0; i < 20; i++) writeSync(fd, chunk);
    closeSync(fd);
    const small = await capsule({ yaml: FETCHES });
    const large = await capsule({ yaml: FETCHES, fetchMaxBytes: 32 * MiB });

    const toSmall = await callTool(alpha.session, 'share-file', { path: 'big.bin', peer: small.address });
    const r = await refusal(callTool(small.session, 'fetch-peer-file', { peer: alpha.address, handle: toSmall.handle }));
    expect(r.code).toBe('too_large');

    const toLarge = await callTool(alpha.session, 'share-file', { path: 'big.bin', peer: large.address });
    const fetched = await callTool(large.session, 'fetch-peer-file', { peer: alpha.address, handle: toLarge.handle });
    expect(fetched.bytes).toBe(20 * MiB);
    expect(
      createHash('sha256')
        .update(readFileSync(join(large.workdir, fetched.path)))
        .digest('hex'),
    ).toBe(fetched.sha256);
  });

  it('is named in the tool text, which sends the agent to no tool this server lacks', async () => {
    const c = await capsule({ yaml: FETCHES, fetchMaxBytes: 32 * MiB });
    const fetch = toolDefinitions(c.session).find((t) => t.name === 'fetch-peer-file')!;
    expect(fetch.description).toContain(`at most ${32 * MiB} bytes`);
    expect(fetch.description).not.toMatch(/Read the file/);
    expect(fetch.description).toContain('This server has no tool that reads files');
  });

  it('serve --fetch-max-bytes takes a byte count, and refuses anything else as a usage mistake', () => {
    const r = runCli(['serve', '--workdir', '/nonexistent-rp', '--fetch-max-bytes', '20 MB']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(
      "--fetch-max-bytes must be a whole number of bytes, optionally suffixed Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T (powers of 1000), each with an optional B: 65536, 64Mi, 64MiB, 10GB, 1k (got '20 MB')",
    );
  });
});
