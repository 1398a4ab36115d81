// Redaction. Token-shaped strings over the whole base64url alphabet (real handles minted by the
// sharing capsule's key, for the peer's audience or another, and random `mh1.<seg>.<seg>` strings)
// are put wherever text flows in: request paths and queries on both planes, the asserted audience,
// share-file's path, peer and ttl, fetch-peer-file's peer and handle, a tool's name, a file's name,
// long text that puts a token across the trace's field limit. Neither a token nor any 16-character
// slice of one may then appear in either capsule's trace, in a line of either capsule's log (the
// CLI's pino logger at level trace, captured), in any HTTP answer, or in a tool's result or
// refusal (SPEC 6 and 8: the handle_id stands in for a token wherever one would be recorded). The
// only place a token may appear is the `handle` share-file returns, which is the tool's product.
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { mintToken } from '../../src/handle/token.js';
import { callTool } from '../../src/tools/index.js';
import { rawGet } from '../helpers/http.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { serveCapsule, type Served } from './capsules.js';
import { fuzzIt, guard } from './runner.js';

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const SLICE = 16;

let base: string;
let sharer: Served;
let peer: Served;

beforeAll(async () => {
  base = tempDir('rp-fuzz-redact-');
  const traceDir = join(base, 'traces');
  const a = join(base, 'sharer');
  const b = join(base, 'peer');
  mkdirSync(join(a, 'out'), { recursive: true });
  mkdirSync(b);
  writeFileSync(join(a, 'out', 'report.md'), 'plain report bytes\n');
  const allow = 'capabilities:\n  network:\n    allow: [127.0.0.1]\n  peer_fetch:\n    allow: [127.0.0.1]\n';
  peer = await serveCapsule({ workdir: b, traceDir, yaml: `name: reader\nversion: "1"\n${allow}` });
  sharer = await serveCapsule({
    workdir: a,
    traceDir,
    yaml: `name: sharer\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n  peer_files:\n    root: out/\n    max_ttl: 10m\n${allow}`,
  });
});

afterAll(async () => {
  await sharer?.close();
  await peer?.close();
  removeTree(base);
});

// ── Tokens ───────────────────────────────────────────────────────────────────────────────────────

type TokenRecipe = { t: 'minted'; path: string; forPeer: boolean; audience: string } | { t: 'shaped'; payload: string; mac: string };

const segArb = (min: number, max: number) => fc.string({ unit: fc.constantFrom(...B64), minLength: min, maxLength: max });

const tokenArb: fc.Arbitrary<TokenRecipe> = fc.oneof(
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('minted' as const),
      path: fc.constantFrom('report.md', 'missing', 'a/b'),
      forPeer: fc.boolean(),
      audience: fc.string({ minLength: 1, maxLength: 20 }),
    }),
  },
  // The MAC's 43 characters, or any other length: the shape alone makes it a token to redact.
  { weight: 3, arbitrary: fc.record({ t: fc.constant('shaped' as const), payload: segArb(1, 200), mac: fc.oneof(segArb(43, 43), segArb(1, 80)) }) },
);

function materialiseToken(r: TokenRecipe): string {
  if (r.t === 'shaped') return `mh1.${r.payload}.${r.mac}`;
  const s = sharer.launched.session;
  return mintToken(
    s.key!,
    { v: 1, iss: s.sessionId, p: r.path, exp: Date.now() + 600_000, n: '00112233445566778899aabbccddeeff' },
    r.forPeer ? peer.audience : r.audience,
  );
}

// ── Where tokens go ──────────────────────────────────────────────────────────────────────────────

const SITES = [
  'file-path',
  'file-query',
  'redeem-path',
  'redeem-audience',
  'redeem-query',
  'share-path',
  'share-peer',
  'share-ttl',
  'fetch-handle',
  'fetch-peer',
  'tool-name',
  'share-then-fetch',
  'named-file',
] as const;
type SiteName = (typeof SITES)[number];

interface Site {
  where: SiteName;
  token: number;
  /** Text around the token: nothing, words, or enough to put it across the trace's 512-character cut. */
  before: string;
  after: string;
  /** In a URL, one character of the token percent-encoded (the server decodes it back). */
  encode: boolean;
}

const aroundArb = fc.oneof(
  fc.constantFrom('', '', ' ', 'x/', 'see ', '(', '"', "'", ':'),
  fc.integer({ min: 440, max: 511 }).map((n) => 'p'.repeat(n)),
);

const siteArb = (where: readonly SiteName[], encode: boolean): fc.Arbitrary<Site> =>
  fc.record({
    where: fc.constantFrom(...where),
    token: fc.nat(),
    before: aroundArb,
    after: fc.constantFrom('', '', '.', ' ', '/x', '?', ',', 'é'),
    encode: fc.constant(encode),
  });

const URL_SITES: readonly SiteName[] = ['file-path', 'file-query', 'redeem-path', 'redeem-query'];

/** Every 16-character slice of a token (the whole token when it is shorter). */
function slices(token: string): string[] {
  if (token.length <= SLICE) return [token];
  const out: string[] = [];
  for (let i = 0; i + SLICE <= token.length; i++) out.push(token.slice(i, i + SLICE));
  return out;
}

function assertClean(text: string, tokens: readonly string[], where: string): void {
  for (const token of tokens) {
    for (const s of slices(token)) {
      const at = text.indexOf(s);
      if (at >= 0) throw new Error(`${where} carries '${s}', a slice of the token ${token.slice(0, 60)}…: …${text.slice(Math.max(0, at - 80), at + 80)}…`);
    }
  }
}

const urlPart = (s: string, encode = false) => {
  const e = encodeURI(s).replace(/\?/g, '%3F').replace(/#/g, '%23');
  // The character after the tag's full stop, as %XX: the same token once decoded.
  const at = e.indexOf('mh1.') + 4;
  return encode && at >= 4 && at < e.length ? `${e.slice(0, at)}%${e.charCodeAt(at).toString(16).toUpperCase()}${e.slice(at + 1)}` : e;
};

/** Text every output of a case is scanned for; grows as the case goes. */
interface Outputs {
  texts: Array<{ where: string; text: string }>;
}

async function tool(
  session: Served,
  name: string,
  args: Record<string, unknown>,
  out: Outputs,
  what: string,
  exempt: string[] = [],
): Promise<Record<string, unknown> | null> {
  try {
    const result = await callTool(session.launched.session, name, args);
    // share-file's handle is its product; everything else it returns is scanned.
    const skip = new Set([...exempt, ...(name === 'share-file' ? ['handle'] : [])]);
    out.texts.push({ where: `${what}: tool result`, text: JSON.stringify(Object.fromEntries(Object.entries(result).filter(([k]) => !skip.has(k)))) });
    return result;
  } catch (error) {
    const e = error as { code?: unknown; message?: unknown; detail?: unknown };
    out.texts.push({ where: `${what}: tool refusal`, text: `${String(e.code)} ${String(e.message)} ${String(e.detail)}` });
    return null;
  }
}

async function http(target: string, headers: Array<[string, string]>, out: Outputs, what: string): Promise<void> {
  const res = await rawGet(sharer.url, target, headers);
  out.texts.push({ where: `${what}: the HTTP answer`, text: res.raw.toString('latin1') });
}

async function visit(site: Site, token: string, out: Outputs, scanned: string[]): Promise<void> {
  const text = `${site.before}${token}${site.after}`;
  const what = `${site.where} with ${JSON.stringify(text.slice(0, 200))}`;
  switch (site.where) {
    case 'file-path':
      return http(`/resources/files/${urlPart(text, site.encode)}`, [], out, what);
    case 'file-query':
      return http(`/resources/files/report.md?h=${urlPart(text, site.encode)}`, [], out, what);
    case 'redeem-path':
      return http(`/resources/peer/${urlPart(text, site.encode)}`, [['x-murmur-audience', peer.audience]], out, what);
    case 'redeem-query':
      return http(`/resources/peer/${urlPart(token)}?next=${urlPart(text, site.encode)}`, [['x-murmur-audience', peer.audience]], out, what);
    case 'redeem-audience':
      return http(`/resources/peer/${urlPart(token)}`, [['x-murmur-audience', text.replace(/[^\x20-\x7e]/g, '_')]], out, what);
    case 'share-path':
      await tool(sharer, 'share-file', { path: text, peer: peer.address }, out, what);
      return;
    case 'share-peer':
      await tool(sharer, 'share-file', { path: 'report.md', peer: text }, out, what);
      return;
    case 'share-ttl':
      await tool(sharer, 'share-file', { path: 'report.md', peer: peer.address, ttl: text }, out, what);
      return;
    case 'fetch-handle':
      await tool(peer, 'fetch-peer-file', { peer: sharer.address, handle: text }, out, what);
      return;
    case 'fetch-peer':
      await tool(peer, 'fetch-peer-file', { peer: text, handle: token }, out, what);
      return;
    case 'tool-name':
      await tool(sharer, text, { path: token }, out, what);
      return;
    case 'share-then-fetch': {
      // A real handoff: the handle share-file returns, fetched by the peer with the token around it.
      const minted = await tool(sharer, 'share-file', { path: 'report.md', peer: peer.address }, out, what);
      if (minted) {
        out.texts.push({ where: 'harness', text: '' });
        await tool(peer, 'fetch-peer-file', { peer: sharer.address, handle: String(minted.handle) }, out, `${what} (the fetch)`);
      }
      return;
    }
    case 'named-file': {
      // A file whose name is token-shaped, shared and fetched. SPEC 6 keeps the name's characters
      // in the stored file's name (`peer-in/<handle_id>-<sanitised basename>`), so the fetch
      // result's `path` carries it by contract and is checked for exactly that instead; nothing
      // else may (see the README's Fuzzing section: this is a finding, not settled).
      // At most 120 characters survive in a stored name: a longer token is named by a whole,
      // shorter token made of its own segments (and that one is scanned for too).
      const [, seg1 = 'A', seg2 = 'A'] = token.split('.');
      const name = token.length <= 120 ? token : `mh1.${seg1.slice(0, 50)}.${seg2.slice(0, 50)}`;
      scanned.push(name);
      writeFileSync(join(sharer.workdir, 'out', name), 'named like a token\n');
      const minted = await tool(sharer, 'share-file', { path: name, peer: peer.address }, out, what);
      if (minted) {
        const fetched = await tool(peer, 'fetch-peer-file', { peer: sharer.address, handle: String(minted.handle) }, out, `${what} (the fetch)`, ['path']);
        expect(fetched?.path, what).toBe(`peer-in/${String(minted.handle_id)}-${name}`);
      }
      await http(`/resources/files/${urlPart(name)}`, [], out, what);
      return;
    }
  }
}

const size = (p: string) => statSync(p).size;

async function runCase(recipes: TokenRecipe[], sites: Site[]): Promise<void> {
  const tokens = recipes.map(materialiseToken);
  const out: Outputs = { texts: [] };
  const traces = [sharer, peer].map((s) => ({ s, from: size(s.tracePath), logFrom: s.logs.length }));
  for (const site of sites) await visit(site, tokens[site.token % tokens.length]!, out, tokens);
  for (const { s, from, logFrom } of traces) {
    const name = s === sharer ? 'sharer' : 'peer';
    out.texts.push({ where: `the ${name}'s trace`, text: readFileSync(s.tracePath).subarray(from).toString('utf8') });
    out.texts.push({ where: `the ${name}'s log`, text: s.logs.slice(logFrom).join('') });
  }
  for (const { where, text } of out.texts) assertClean(text, tokens, where);
  // The scan is not blind: the trace and the log did record these requests.
  if (sites.some((site) => site.where !== 'tool-name')) {
    expect(
      out.texts.some((t) => t.where.endsWith('trace') && t.text.length > 0),
      'nothing was traced',
    ).toBe(true);
  }
  if (sites.some((site) => URL_SITES.includes(site.where))) {
    expect(
      out.texts.some((t) => t.where.endsWith('log') && t.text.length > 0),
      'nothing was logged',
    ).toBe(true);
  }
}

describe('no token, nor any 16-character slice of one, leaves through a record or an answer', () => {
  fuzzIt({
    name: 'redaction',
    file: import.meta.filename,
    runs: 30,
    timeoutMs: 120_000,
    // Every site once, with a real handle for the peer and a random shaped token, in every run.
    examples: () => [
      [
        [
          { t: 'minted', path: 'report.md', forPeer: true, audience: 'x' },
          { t: 'shaped', payload: `${B64}${B64}`, mac: [...B64].reverse().join('').slice(0, 43) },
        ],
        SITES.map((where, i) => ({ where, token: i, before: i % 3 === 2 ? 'p'.repeat(500) : '', after: i % 2 ? '.' : '', encode: false })),
      ],
    ],
    // Invariant: no token nor any 16-character slice of one appears in a trace, a log line, an HTTP answer or a tool result.
    property: () =>
      fc.asyncProperty(fc.array(tokenArb, { minLength: 1, maxLength: 3 }), fc.array(siteArb(SITES, false), { minLength: 1, maxLength: 6 }), guard(runCase)),
  });

  fuzzIt({
    name: 'redaction-encoded-url',
    file: import.meta.filename,
    runs: 10,
    timeoutMs: 120_000,
    // The same, with one character of the token percent-encoded in the URL: the server decodes it
    // back into the token, so a record of the raw target carries the token's MAC.
    // Invariant: a token the server decodes from a URL is redacted wherever the URL is recorded.
    property: () =>
      fc.asyncProperty(fc.array(tokenArb, { minLength: 1, maxLength: 3 }), fc.array(siteArb(URL_SITES, true), { minLength: 1, maxLength: 4 }), guard(runCase)),
  });
});
