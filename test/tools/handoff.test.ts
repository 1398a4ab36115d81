// The peer handoff end to end, between real capsules on loopback: share-file mints against the
// peer's real agent card, the minter's redeem route serves, fetch-peer-file lands the bytes. Also
// the mint's own refusals (the escape table through the tool, directories, missing files, TTLs,
// the network allow list) and the fetch's pre-connection ones (peer_fetch.allow, token shape),
// each checked against what the trace recorded and what the peer saw on the wire.
import { createHash } from 'node:crypto';
import { lstatSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readUnverified } from '../../src/handle/token.js';
import { fetchPeerFile } from '../../src/tools/fetch-peer-file.js';
import { Refusal } from '../../src/codes.js';
import { shareFile } from '../../src/tools/share-file.js';
import type { Containment } from '../../src/manifest/model.js';
import { capsule as servedCapsule, type Capsule } from '../helpers/capsule.js';
import { buildEscapeTree, ESCAPE_CASES, MAX_BYTES, SECRET, SECRET_SHA } from '../helpers/escape-cases.js';
import { listenLoopback } from '../helpers/loopback.js';
import { refusal } from '../helpers/refusal.js';
import { scratch } from '../helpers/tree.js';
import { sha256Hex } from '../helpers/http.js';

// ── Fixtures ─────────────────────────────────────────────────────────────────

interface CapsuleSpec {
  name: string;
  /** YAML appended after name/version. */
  yaml?: string;
  tree?: string[];
  containment?: Containment;
  /** Build the escape-case fixture into the workdir instead of `tree`. */
  escapeTree?: boolean;
}

/** A served capsule named `spec.name` (sealed unless said otherwise), closed when the test finishes. */
async function capsule(spec: CapsuleSpec): Promise<Capsule> {
  const workdir = scratch();
  if (spec.escapeTree) buildEscapeTree(workdir);
  return servedCapsule({
    yaml: `name: ${spec.name}\nversion: 0.1.0\n${spec.yaml ?? ''}`,
    workdir,
    tree: spec.tree,
    containment: spec.containment ?? 'sealed',
  });
}

const SHARES = (extra = '') => `exports:
  peer_files:
    root: out/
    max_ttl: 60s
${extra}capabilities:
  network:
    allow: ["127.0.0.1"]
`;
const FETCHES = `capabilities:
  peer_fetch:
    allow: ["127.0.0.1"]
`;

type Event = Record<string, unknown> & { event_type: string };

function traceOf(c: Capsule): { text: string; events: Event[] } {
  const text = readFileSync(c.tracePath, 'utf8');
  return {
    text,
    events: text
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Event),
  };
}

function eventsOf(c: Capsule, type: string): Event[] {
  return traceOf(c).events.filter((e) => e.event_type === type);
}

/** Every path under `dir`, relative, directories marked with a trailing `/`, sorted. */
function snapshot(dir: string): string[] {
  const out: string[] = [];
  const walk = (abs: string) => {
    for (const name of readdirSync(abs)) {
      const path = join(abs, name);
      const stat = lstatSync(path);
      out.push(relative(dir, path) + (stat.isDirectory() ? '/' : ''));
      if (stat.isDirectory()) walk(path);
    }
  };
  walk(dir);
  return out.sort();
}

/** A raw TCP listener that only counts who connects: the "peer saw nothing" witness. */
function countingListener() {
  return listenLoopback(createServer((socket) => socket.destroy()));
}

// ── End to end ───────────────────────────────────────────────────────────────

describe('share-file → redeem → fetch-peer-file between two capsules', () => {
  it('lands byte-identical bytes, correlated by one handle_id, with no token anywhere', async () => {
    const binary = Buffer.from([0, 1, 2, 255, 254, 10, 13, 0x6d, 0x68, 0x31, 0x2e]);
    const alpha = await capsule({ name: 'Alpha', yaml: SHARES(), tree: ['out/'] });
    writeFileSync(join(alpha.workdir, 'out/report.bin'), binary);
    const beta = await capsule({ name: 'Beta', yaml: FETCHES });
    alpha.session.advanceGeneration();
    alpha.session.advanceGeneration();
    const before = snapshot(beta.workdir);

    const minted = await shareFile(alpha.session, { path: 'report.bin', peer: beta.address });
    expect(minted.audience).toBe(beta.audience);
    expect(minted.handle.startsWith('mh1.')).toBe(true);
    expect(Object.keys(minted)).toEqual(['handle', 'handle_id', 'expires_at_ms', 'audience']);
    expect(readUnverified(minted.handle)?.payload?.p).toBe('report.bin');

    const fetched = await fetchPeerFile(beta.session, { peer: alpha.address, handle: minted.handle });
    expect(fetched).toEqual({
      path: `peer-in/${minted.handle_id}-report.bin`,
      bytes: binary.length,
      sha256: sha256Hex(binary),
      peer: alpha.address,
      generation: 2,
    });
    expect(JSON.stringify(fetched)).not.toContain('mh1.');
    expect(readFileSync(join(beta.workdir, fetched.path)).equals(binary)).toBe(true);

    // Nothing but the inbox and the one landed file appeared in the fetcher's workdir.
    expect(snapshot(beta.workdir)).toEqual([...before, 'peer-in/', fetched.path].sort());

    const mint = eventsOf(alpha, 'peer_handle_mint');
    const redeem = eventsOf(alpha, 'peer_handle_redeem');
    const fetch = eventsOf(beta, 'peer_file_fetch');
    expect(mint).toHaveLength(1);
    expect(redeem).toHaveLength(1);
    expect(fetch).toHaveLength(1);
    for (const event of [mint[0]!, redeem[0]!, fetch[0]!]) expect(event.handle_id).toBe(minted.handle_id);
    expect(Object.keys(mint[0]!).slice(5)).toEqual(['handle_id', 'path', 'audience', 'expires_at_ms', 'outcome', 'reason']);
    expect(mint[0]).toMatchObject({ path: 'report.bin', audience: beta.audience, expires_at_ms: minted.expires_at_ms, outcome: 'ok', reason: null });
    expect(redeem[0]).toMatchObject({ outcome: 'ok', audience_asserted: beta.audience, bytes: binary.length, sha256: sha256Hex(binary) });
    expect(Object.keys(fetch[0]!).slice(5)).toEqual(['peer', 'handle_id', 'stored_path', 'bytes', 'sha256', 'outcome', 'reason']);
    expect(fetch[0]).toMatchObject({
      peer: alpha.address,
      stored_path: fetched.path,
      bytes: binary.length,
      sha256: sha256Hex(binary),
      outcome: 'ok',
      reason: null,
    });
    expect(traceOf(alpha).text).not.toContain('mh1.');
    expect(traceOf(beta).text).not.toContain('mh1.');
  });

  it('refuses a third capsule that redeems the handle under its own audience', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: for beta only'] });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    const gamma = await capsule({ name: 'gamma', yaml: FETCHES });
    const minted = await shareFile(alpha.session, { path: 'report.md', peer: beta.address });

    const error = await refusal(() => fetchPeerFile(gamma.session, { peer: alpha.address, handle: minted.handle }));
    expect(error.code).toBe('handle_not_valid');
    expect(error.message).not.toContain('mh1.');
    expect(snapshot(gamma.workdir)).toEqual([]);
    expect(eventsOf(gamma, 'peer_file_fetch')[0]).toMatchObject({
      handle_id: minted.handle_id,
      stored_path: null,
      bytes: null,
      sha256: null,
      outcome: 'handle_not_valid',
    });
    expect(eventsOf(alpha, 'peer_handle_redeem')[0]).toMatchObject({
      handle_id: minted.handle_id,
      path: null,
      audience_asserted: gamma.audience,
      outcome: 'handle_not_valid',
    });
    // The intended peer still redeems it: the refusal was about gamma, not the handle.
    const fetched = await fetchPeerFile(beta.session, { peer: alpha.address, handle: minted.handle });
    expect(readFileSync(join(beta.workdir, fetched.path), 'utf8')).toBe('for beta only');
    expect(traceOf(gamma).text).not.toContain('mh1.');
  });

  it('refuses an expired handle with handle_expired and lands nothing', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: brief'] });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    const minted = await shareFile(alpha.session, { path: 'report.md', peer: beta.address, ttl: '1s' });
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const error = await refusal(() => fetchPeerFile(beta.session, { peer: alpha.address, handle: minted.handle }));
    expect(error.code).toBe('handle_expired');
    expect(eventsOf(alpha, 'peer_handle_redeem')[0]).toMatchObject({ outcome: 'handle_expired', path: 'report.md' });
    expect(eventsOf(beta, 'peer_file_fetch')[0]).toMatchObject({ outcome: 'handle_expired', stored_path: null });
    expect(snapshot(beta.workdir)).toEqual([]);
  });

  it('redeems a rewritten file to its current bytes, landing under the same name', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/notes/today.md: first'] });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    const minted = await shareFile(alpha.session, { path: 'notes/today.md', peer: beta.address });
    const first = await fetchPeerFile(beta.session, { peer: alpha.address, handle: minted.handle });
    writeFileSync(join(alpha.workdir, 'out/notes/today.md'), 'second and longer');
    const second = await fetchPeerFile(beta.session, { peer: alpha.address, handle: minted.handle });
    expect(second.path).toBe(first.path);
    expect(first.path).toBe(`peer-in/${minted.handle_id}-today.md`);
    expect(second.sha256).not.toBe(first.sha256);
    expect(readFileSync(join(beta.workdir, second.path), 'utf8')).toBe('second and longer');
    expect(snapshot(beta.workdir)).toEqual(['peer-in/', second.path]);
  });
});

// ── When the record cannot be written ────────────────────────────────────────

describe('a file whose name looks like a handle', () => {
  // An agent may name a file `mh1.report.final` so that the trace shows `<handle:…>` instead of
  // what it handed over. Redaction stays (a real token must never reach the trace); the file is
  // still identified, by the sha256 of what left, as docs/trace.md tells an auditor.
  it('stays redacted in every event, and an auditor finds the file by the digest the trace holds', async () => {
    const name = 'mh1.report.final';
    const alpha = await capsule({
      name: 'alpha',
      yaml: `exports:\n  files:\n    root: out/\n    mode: read-only\n${SHARES().slice('exports:\n'.length)}`,
      tree: [`out/${name}: what left the capsule`, 'out/decoy.txt: something else', 'out/sub/mh1.other.final: another token-shaped name'],
    });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    const minted = await shareFile(alpha.session, { path: name, peer: beta.address });
    const fetched = await fetchPeerFile(beta.session, { peer: alpha.address, handle: minted.handle });
    for (const c of [alpha, beta]) expect(traceOf(c).text).not.toContain('mh1.');

    // What the trace says: the name as a handle id, never as itself.
    const [mint] = eventsOf(alpha, 'peer_handle_mint');
    const redacted = `<handle:${createHash('sha256').update(name).digest('hex').slice(0, 16)}>`;
    expect(mint).toMatchObject({ handle_id: minted.handle_id, path: redacted, outcome: 'ok' });

    // The auditor's match, as docs/trace.md describes it: the mint's handle_id leads to the
    // redeem, whose sha256 is the digest of the bytes that left...
    const redeem = eventsOf(alpha, 'peer_handle_redeem').find((e) => e.handle_id === mint!.handle_id)!;
    expect(redeem).toMatchObject({ path: redacted, outcome: 'ok' });
    // ...and the operator plane's listing (or sha256sum over the root) names the file with it.
    const listing = await fetch(`${alpha.url}/resources/files`).then((r) => r.json() as Promise<{ entries: Array<{ path: string; sha256: string }> }>);
    expect(listing.entries.filter((e) => e.sha256 === redeem.sha256).map((e) => e.path)).toEqual([name]);
    // The redacted name's id is the first 16 hex of the name's own sha256, so it confirms the match.
    expect(redacted).toBe(
      `<handle:${createHash('sha256')
        .update(listing.entries.find((e) => e.sha256 === redeem.sha256)!.path)
        .digest('hex')
        .slice(0, 16)}>`,
    );

    // The fetcher's side: stored_path is redacted too, and its sha256 names the landed file.
    const [landed] = eventsOf(beta, 'peer_file_fetch');
    expect(landed).toMatchObject({ handle_id: minted.handle_id, stored_path: `peer-in/${minted.handle_id}-${redacted}`, sha256: redeem.sha256 });
    expect(sha256Hex(readFileSync(join(beta.workdir, fetched.path)))).toBe(landed!.sha256);
  });
});

describe('a trace that cannot be written', () => {
  it('fails the mint: no handle is handed out unrecorded', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: x'] });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    await alpha.session.trace.close();
    const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: beta.address }));
    expect(error.code).toBe('io_error');
    expect(error.message).toMatch(/trace/);
    expect(eventsOf(alpha, 'peer_handle_mint')).toEqual([]);
  });

  it('fails the fetch and removes the file it would have landed unrecorded', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: x'] });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    const minted = await shareFile(alpha.session, { path: 'report.md', peer: beta.address });
    await beta.session.trace.close();
    const error = await refusal(() => fetchPeerFile(beta.session, { peer: alpha.address, handle: minted.handle }));
    expect(error.code).toBe('io_error');
    expect(snapshot(beta.workdir)).toEqual(['peer-in/']);
  });
});

// ── Mint refusals ────────────────────────────────────────────────────────────

describe('share-file judges the path by the redeem resolver', () => {
  describe.each(['sealed', 'advisory', 'scoped'] as const)('class %s', (containment) => {
    it('gives every escape-table case the code the table gives (too_large mints)', async () => {
      const beta = await capsule({ name: 'beta', yaml: FETCHES });
      const alpha = await capsule({
        name: 'alpha',
        containment,
        escapeTree: true,
        yaml: `exports:\n  peer_files:\n    root: out/\n    max_bytes: ${MAX_BYTES}\ncapabilities:\n  network:\n    allow: ["127.0.0.1"]\n`,
      });
      for (const c of ESCAPE_CASES) {
        const expected = containment === 'scoped' ? c.scoped : c.follow;
        const mintable = expected === 'ok' || expected === 'too_large';
        let outcome: string;
        let minted: Awaited<ReturnType<typeof shareFile>> | null = null;
        try {
          minted = await shareFile(alpha.session, { path: c.raw, peer: beta.address });
          outcome = 'ok';
        } catch (error) {
          if (!(error instanceof Refusal)) throw error;
          outcome = error.code;
          expect(error.message, c.raw).toContain('exports.peer_files.root');
          expect(error.message, c.raw).not.toContain(alpha.workdir);
          expect(error.message, c.raw).not.toContain(SECRET);
        }
        expect(outcome, `${containment} ${c.raw}`).toBe(mintable ? 'ok' : expected);
        if (minted === null) continue;
        // The minted handle redeems through the real route to the table's bytes, or its refusal.
        try {
          const fetched = await fetchPeerFile(beta.session, { peer: alpha.address, handle: minted.handle });
          expect(expected, c.raw).toBe('ok');
          expect(readFileSync(join(beta.workdir, fetched.path), 'utf8'), c.raw).toBe(c.body);
        } catch (error) {
          if (!(error instanceof Refusal)) throw error;
          expect(`${c.raw}: ${error.code}`).toBe(`${c.raw}: too_large`);
        }
      }
      const mints = eventsOf(alpha, 'peer_handle_mint');
      expect(mints).toHaveLength(ESCAPE_CASES.length);
      ESCAPE_CASES.forEach((c, i) => {
        const event = mints[i]!;
        if (event.outcome === 'ok') {
          expect(event.audience).toBe(beta.audience);
          expect(typeof event.handle_id).toBe('string');
        } else {
          // Refused before the card was read: path as requested, no audience, no handle.
          expect(event).toMatchObject({ handle_id: null, path: c.raw, audience: '', expires_at_ms: null });
          expect(typeof event.reason).toBe('string');
        }
      });
      const text = traceOf(alpha).text + traceOf(beta).text;
      expect(text).not.toContain('mh1.');
      expect(text).not.toContain(SECRET);
      expect(text).not.toContain(SECRET_SHA);
    });
  });

  it('records the canonical path on a mint, never the spelling it was asked with', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/sub dir/x.md: spaced'] });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    const minted = await shareFile(alpha.session, { path: 'sub%20dir/x.md/', peer: beta.address });
    expect(readUnverified(minted.handle)?.payload?.p).toBe('sub dir/x.md');
    expect(eventsOf(alpha, 'peer_handle_mint')[0]).toMatchObject({ path: 'sub dir/x.md', outcome: 'ok' });
  });

  it('refuses a directory and a missing file, naming the declared root', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/nested/'] });
    const peer = await countingListener();
    const dir = await refusal(() => shareFile(alpha.session, { path: 'nested', peer: peer.address }));
    expect(dir.code).toBe('not_a_regular_file');
    expect(dir.message).toContain('exports.peer_files.root');
    const missing = await refusal(() => shareFile(alpha.session, { path: 'missing.md', peer: peer.address }));
    expect(missing.code).toBe('not_found');
    expect(missing.message).toContain('exports.peer_files.root');
    // Refused on the path: no card was fetched for a mint that could not happen.
    expect(peer.connections()).toBe(0);
    expect(eventsOf(alpha, 'peer_handle_mint').map((e) => [e.outcome, e.path, e.audience])).toEqual([
      ['not_a_regular_file', 'nested', ''],
      ['not_found', 'missing.md', ''],
    ]);
  });

  it('refuses an undeclared peer plane with no_peer_plane', async () => {
    const plain = await capsule({ name: 'plain', yaml: FETCHES, tree: ['out/report.md: x'] });
    const error = await refusal(() => shareFile(plain.session, { path: 'report.md', peer: '127.0.0.1:1' }));
    expect(error.code).toBe('no_peer_plane');
    expect(eventsOf(plain, 'peer_handle_mint')[0]).toMatchObject({ handle_id: null, path: 'report.md', outcome: 'no_peer_plane' });
  });
});

describe('share-file lifetimes', () => {
  it('clamps a ttl down to max_ttl, applies a shorter one, and defaults to max_ttl', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: x'] });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    // Bracketed by clock readings either side of each mint: exact, not slack-tolerant.
    const cases: Array<[string | undefined, number]> = [
      ['1d', 60_000],
      ['86400', 60_000],
      ['5s', 5_000],
      ['1m', 60_000],
      [undefined, 60_000],
    ];
    for (const [ttl, expectedMs] of cases) {
      const before = Date.now();
      const minted = await shareFile(alpha.session, { path: 'report.md', peer: beta.address, ...(ttl === undefined ? {} : { ttl }) });
      const after = Date.now();
      expect(minted.expires_at_ms, String(ttl)).toBeGreaterThanOrEqual(before + expectedMs);
      expect(minted.expires_at_ms, String(ttl)).toBeLessThanOrEqual(after + expectedMs);
      expect(readUnverified(minted.handle)?.payload?.exp).toBe(minted.expires_at_ms);
    }
  });

  it('defaults to one hour when max_ttl is not declared', async () => {
    const alpha = await capsule({
      name: 'alpha',
      tree: ['out/report.md: x'],
      yaml: 'exports:\n  peer_files:\n    root: out/\ncapabilities:\n  network:\n    allow: ["127.0.0.1"]\n',
    });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    const before = Date.now();
    const minted = await shareFile(alpha.session, { path: 'report.md', peer: beta.address, ttl: '2h' });
    const after = Date.now();
    expect(minted.expires_at_ms).toBeGreaterThanOrEqual(before + 3_600_000);
    expect(minted.expires_at_ms).toBeLessThanOrEqual(after + 3_600_000);
  });

  it('refuses a ttl that is not a positive duration, before any connection', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: x'] });
    const peer = await countingListener();
    for (const ttl of ['5 minutes', '30S', '30 m', '0', '', '-5', '1.5h', '99999999999999999999']) {
      const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: peer.address, ttl }));
      expect(error.code, ttl).toBe('invalid_ttl');
      expect(error.message).toMatch(/duration/);
    }
    expect(peer.connections()).toBe(0);
    expect(eventsOf(alpha, 'peer_handle_mint').every((e) => e.outcome === 'invalid_ttl' && e.handle_id === null)).toBe(true);
  });
});

describe('share-file and the network allow list', () => {
  it('refuses a peer the network allow list does not include, and the peer sees no request', async () => {
    const peer = await countingListener();
    const port = peer.address.split(':')[1];
    for (const allow of ['["localhost"]', `["127.0.0.1:${Number(port) === 65535 ? 1 : Number(port) + 1}"]`, `["https://127.0.0.1:${port}"]`, null]) {
      const yaml =
        allow === null
          ? 'exports:\n  peer_files:\n    root: out/\n'
          : `exports:\n  peer_files:\n    root: out/\ncapabilities:\n  network:\n    allow: ${allow}\n`;
      const alpha = await capsule({ name: 'alpha', yaml, tree: ['out/report.md: x'] });
      const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: peer.address }));
      // Refused by the manifest, not unreachable: nothing was tried.
      expect(error.code, String(allow)).toBe('peer_not_allowed');
      expect(error.message).toContain(
        `capabilities.network.allow does not include the peer (allowed: ${allow === null ? 'nothing' : JSON.parse(allow).join(', ')}; asked: ${peer.address}`,
      );
      expect(eventsOf(alpha, 'peer_handle_mint')[0]).toMatchObject({ handle_id: null, audience: '', outcome: 'peer_not_allowed' });
    }
    expect(peer.connections()).toBe(0);
  });

  it('names the mismatch when the peer is written as 127.0.0.1 and the list allows localhost (issue 40)', async () => {
    const peer = await countingListener();
    const port = peer.address.split(':')[1];
    const alpha = await capsule({
      name: 'alpha',
      yaml: `exports:\n  peer_files:\n    root: out/\ncapabilities:\n  network:\n    allow: ["localhost:${port}"]\n`,
      tree: ['out/report.md: x'],
    });
    const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: `127.0.0.1:${port}` }));
    expect([error.code, error.message]).toEqual([
      'peer_not_allowed',
      `capabilities.network.allow does not include the peer (allowed: localhost:${port}; asked: 127.0.0.1:${port}; hosts are compared as written: localhost is not 127.0.0.1), so its agent card cannot be fetched`,
    ]);
    const beta = await capsule({ name: 'beta', yaml: `capabilities:\n  peer_fetch:\n    allow: ["localhost:${port}"]\n` });
    const fetched = await refusal(() => fetchPeerFile(beta.session, { peer: `http://127.0.0.1:${port}`, handle: 'mh1.YWJj.YWJj' }));
    expect([fetched.code, fetched.message]).toEqual([
      'peer_not_allowed',
      `capabilities.peer_fetch.allow does not include the peer (allowed: localhost:${port}; asked: http://127.0.0.1:${port}; hosts are compared as written: localhost is not 127.0.0.1)`,
    ]);
    expect(peer.connections()).toBe(0);
  });

  it('refuses a peer address that is not host:port or an http(s) URL', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: x'] });
    for (const peer of ['127.0.0.1', 'ftp://127.0.0.1:21', 'http://127.0.0.1:80/path', 'user@127.0.0.1:80', '']) {
      const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer }));
      expect(error.code, peer).toBe('peer_unreachable');
    }
  });

  it('refuses a peer that is not listening as peer_unreachable', async () => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: x'] });
    const peer = await countingListener();
    // Closed again at once: the port is (very likely) free, so the connect is refused.
    const address = peer.address;
    await peer.close();
    const error = await refusal(() => shareFile(alpha.session, { path: 'report.md', peer: address }));
    expect(error.code).toBe('peer_unreachable');
    expect(error.message).toMatch(/could not be fetched/);
  });
});

// ── Fetch refusals before any connection ─────────────────────────────────────

describe('fetch-peer-file before any connection', () => {
  const someHandle = async (): Promise<string> => {
    const alpha = await capsule({ name: 'alpha', yaml: SHARES(), tree: ['out/report.md: x'] });
    const beta = await capsule({ name: 'beta', yaml: FETCHES });
    return (await shareFile(alpha.session, { path: 'report.md', peer: beta.address })).handle;
  };

  it('refuses a peer peer_fetch.allow does not include, and the peer sees no connection', async () => {
    const handle = await someHandle();
    const peer = await countingListener();
    const port = Number(peer.address.split(':')[1]);
    for (const allow of ['["localhost"]', `["127.0.0.1:${port === 65535 ? 1 : port + 1}"]`, `["https://127.0.0.1:${port}"]`]) {
      // network.allow admitting the peer widens nothing: the fetch list is separate.
      const gamma = await capsule({
        name: 'gamma',
        yaml: `capabilities:\n  peer_fetch:\n    allow: ${allow}\n  network:\n    allow: ["127.0.0.1"]\n`,
      });
      const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
      expect(error.code, allow).toBe('peer_not_allowed');
      expect(error.message).toContain('capabilities.peer_fetch.allow does not include');
      expect(error.message).not.toContain('mh1.');
      expect(snapshot(gamma.workdir)).toEqual([]);
      expect(eventsOf(gamma, 'peer_file_fetch')[0]).toMatchObject({
        peer: peer.address,
        stored_path: null,
        bytes: null,
        sha256: null,
        outcome: 'peer_not_allowed',
      });
      expect(traceOf(gamma).text).not.toContain('mh1.');
    }
    const undeclared = await capsule({ name: 'delta', yaml: 'capabilities:\n  network:\n    allow: ["127.0.0.1"]\n' });
    const error = await refusal(() => fetchPeerFile(undeclared.session, { peer: peer.address, handle }));
    expect(error.code).toBe('peer_not_allowed');
    expect(peer.connections()).toBe(0);
  });

  it('refuses a handle that is not a well-formed token without connecting', async () => {
    const peer = await countingListener();
    const gamma = await capsule({ name: 'gamma', yaml: FETCHES });
    for (const handle of ['', 'report.md', '../files/secret', 'mh1.abc', 'mh1.YWJj.YWJj/../../files/x', 'mh1.YWJj.YWJj?x=1']) {
      const error = await refusal(() => fetchPeerFile(gamma.session, { peer: peer.address, handle }));
      expect(error.code, handle).toBe('malformed_handle');
    }
    expect(peer.connections()).toBe(0);
    expect(snapshot(gamma.workdir)).toEqual([]);
  });
});
