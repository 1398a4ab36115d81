// Round three: the tools at their bounds. A sharer whose peer plane's max_bytes sits just above
// fetch-peer-file's fetch limit (10 MiB, DEFAULT_FETCH_MAX_BYTES) shares files of sizes at and
// around both bounds with a peer, which fetches them (SPEC 6): at or under both, the bytes land
// whole in peer-in/ with their sha256; one past the fetch limit, `too_large` with the fetch
// limit's message and nothing stored; one past the peer plane's max_bytes, the peer's own
// `too_large` (its redeem is a 413) and nothing stored. Every fetch leaves its peer_file_fetch line.
import { existsSync, mkdirSync, readdirSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { DEFAULT_FETCH_MAX_BYTES } from '../../src/limits.js';
import { callTool } from '../../src/tools/index.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, type Served } from './capsules.js';
import { fuzzIt, guard } from './runner.js';
import { TraceTail } from './wire.js';
import { sha256Hex } from '../helpers/http.js';

/** README, Errors: fetch-peer-file's cap (10 MiB by default). */
const FETCH_LIMIT = DEFAULT_FETCH_MAX_BYTES;
/** The sharer's exports.peer_files.max_bytes: two past the fetch limit, so both bounds are reachable. */
const PEER_MAX = FETCH_LIMIT + 2;
const SIZES = [0, 1, FETCH_LIMIT - 1, FETCH_LIMIT, FETCH_LIMIT + 1, PEER_MAX, PEER_MAX + 1];

let base: string;
let sharer: Served;
let peer: Served;
let peerTail: TraceTail;

beforeAll(async () => {
  base = tempDir('rp-fuzz-tools-');
  const traceDir = join(base, 'traces');
  const a = join(base, 'sharer');
  const b = join(base, 'peer');
  mkdirSync(join(a, 'out'), { recursive: true });
  mkdirSync(b);
  const allow = 'capabilities:\n  network:\n    allow: [127.0.0.1]\n  peer_fetch:\n    allow: [127.0.0.1]\n';
  peer = await serveCapsule({ workdir: b, traceDir, yaml: `name: reader\nversion: "1"\n${allow}` });
  sharer = await serveCapsule({
    workdir: a,
    traceDir,
    yaml: `name: sharer\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: 10m\n    max_bytes: ${PEER_MAX}\n${allow}`,
  });
  // Sparse, then a few bytes set: every size at its bound costs no disk, and each file is its own.
  for (const size of SIZES) {
    const path = join(a, 'out', `f${size}`);
    writeFileSync(path, '');
    truncateSync(path, size);
  }
  peerTail = new TraceTail(peer.tracePath);
  peerTail.next();
}, 120_000);

afterAll(async () => {
  await sharer?.close();
  await peer?.close();
  removeTree(base);
});

function landed(): string[] {
  const dir = join(peer.workdir, 'peer-in');
  return existsSync(dir) ? readdirSync(dir).filter((n) => !n.startsWith('.')) : [];
}

async function runCase(size: number): Promise<void> {
  const name = `f${size}`;
  const bytes = readFileSync(join(sharer.workdir, 'out', name));
  const before = landed();
  const minted = (await callTool(sharer.launched.session, 'share-file', { path: name, peer: peer.address })) as { handle: string; handle_id: string };
  expect(typeof minted.handle, `share-file of ${size} bytes mints`).toBe('string');
  peerTail.next();
  let result: Record<string, unknown>;
  let code: string | null = null;
  try {
    result = (await callTool(peer.launched.session, 'fetch-peer-file', { peer: sharer.address, handle: minted.handle })) as Record<string, unknown>;
  } catch (error) {
    code = (error as { code?: string }).code ?? String(error);
    result = { message: (error as Error).message };
  }
  const label = `fetch of a ${size}-byte file (fetch limit ${FETCH_LIMIT}, peer max_bytes ${PEER_MAX}): ${code ?? 'ok'} ${JSON.stringify(result).slice(0, 200)}`;
  const fresh = landed().filter((n) => !before.includes(n));
  const lines = peerTail.next().filter((l) => l.event_type === 'peer_file_fetch');
  expect(lines.length, `${label}: one peer_file_fetch line`).toBe(1);
  if (size <= FETCH_LIMIT) {
    expect(code, label).toBeNull();
    expect(result.bytes, label).toBe(size);
    expect(result.sha256, label).toBe(sha256Hex(bytes));
    expect(fresh.length, `${label}: one file landed`).toBe(1);
    expect(readFileSync(join(peer.workdir, 'peer-in', fresh[0]!)).equals(bytes), `${label}: the landed bytes`).toBe(true);
    expect(lines[0], label).toMatchObject({ outcome: 'ok', bytes: size, sha256: sha256Hex(bytes), handle_id: minted.handle_id });
    return;
  }
  expect(code, label).toBe('too_large');
  expect(fresh, `${label}: nothing stored`).toEqual([]);
  expect(lines[0], label).toMatchObject({ outcome: 'too_large', bytes: null, sha256: null, stored_path: null });
  // One past the fetch limit but within the peer plane: the fetch's own bound names its limit.
  if (size <= PEER_MAX) expect(result.message, label).toContain(`the fetch limit of ${FETCH_LIMIT} bytes`);
}

describe('share-file and fetch-peer-file at their bounds', () => {
  fuzzIt({
    name: 'tools-limits',
    file: import.meta.filename,
    runs: 2,
    timeoutMs: 120_000,
    // Every bound, exactly at and one past, in every run.
    examples: () => SIZES.map((s) => [s] as [number]),
    // Invariant: a fetch at or under both bounds lands exactly the bytes; one past either is too_large with nothing stored; each leaves one peer_file_fetch line.
    property: () => fc.asyncProperty(fc.constantFrom(...SIZES), guard(runCase)),
  });
});
