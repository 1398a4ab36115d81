// Properties of peer handles. In process: generated and mutated tokens and audiences verify exactly
// when the model says so — never unless the token is one this key sealed for that very audience —
// and verification never throws. Over real HTTP: every redeem answers the model's catalogued code
// and status; a token whose MAC does not verify never reaches the filesystem, which is checked twice:
// its trace line keeps `path` null, and an inotify watch on the peer root and the workdir sees no
// open until a verified handle is redeemed (which must be seen, or the watch proves nothing).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { CATALOGUE, isCode } from '../../src/codes.js';
import { InstanceKey } from '../../src/handle/key.js';
import { mintToken, sealRawForTests, verifyTokenForTests } from '../../src/handle/token.js';
import { openCapsule as launch, type Capsule as Launched } from '../helpers/capsule.js';
import { rawGet } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';
import { show } from './describe.js';
import * as model from './model.js';
import { wireSafe } from './requests.js';
import { fuzzIt, guard, guardSync } from './runner.js';
import {
  audienceMutationArb,
  differentAudience,
  modelHandleId,
  modelVerify,
  mutate,
  mutateAudience,
  mutationArb,
  payloadBytes,
  payloadRecipeArb,
  shapeOf,
  type Sealed,
} from './tokens.js';

const SID = 'ses_fuzz_handles';
const AUDIENCES = ['reader@localhost:41235', 'peer-b@127.0.0.1:8080', 'x@h:1'];
const PATHS = [
  'report.md',
  'sub/a.txt',
  'link',
  'escape',
  'missing',
  'fifo',
  'big.bin',
  'sub',
  '../secret.txt',
  'sub/../report.md',
  '',
  '/etc/passwd',
  'report.md/',
  './report.md',
  'sub//a.txt',
];

describe('peer handles in process', () => {
  let key: InstanceKey;
  let other: InstanceKey;
  beforeAll(() => {
    key = InstanceKey.generate();
    other = InstanceKey.generate();
  });
  afterAll(() => {
    key.destroy();
    other.destroy();
  });

  fuzzIt({
    name: 'token-verify',
    // Invariant: a token verifies (and to the model's verdict) only if this key sealed it for this very audience.
    file: import.meta.filename,
    runs: 150,
    property: () =>
      fc.property(
        payloadRecipeArb(PATHS),
        payloadRecipeArb(PATHS),
        fc.constantFrom(...AUDIENCES),
        fc.array(fc.array(mutationArb, { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 6 }),
        audienceMutationArb,
        guardSync((good, odd, audience, mutations, audMutation) => {
          const now = Date.now();
          // A well-formed handle minted the production way, and arbitrary payload bytes sealed by
          // the same key (validly MAC'd, not necessarily a valid payload).
          const goodPayload = { v: 1, iss: SID, p: 'report.md', exp: now + 600_000, n: '0123456789abcdef0123456789abcdef' };
          const minted = mintToken(key, goodPayload, audience);
          const sealedOdd = sealRawForTests(key, payloadBytes(odd, SID, now), audience);
          const sealedGood = sealRawForTests(key, payloadBytes(good, SID, now), audience);
          const foreign = mintToken(other, goodPayload, audience);
          const sealed: Sealed[] = [minted, sealedOdd, sealedGood].map((token) => ({ token, audience }));
          const candidates = [minted, sealedOdd, sealedGood, foreign, ...mutations.flatMap((ms) => [mutate(minted, ms), mutate(sealedOdd, ms)])];
          const audiences = [audience, mutateAudience(audience, audMutation), differentAudience(audience, audMutation)];
          for (const token of candidates) {
            for (const aud of audiences) {
              const expected = modelVerify(token, aud, sealed, SID, now);
              const got = verifyTokenForTests(key, token, aud, SID, now);
              const label = `verify ${show(token.slice(0, 200))} for audience ${JSON.stringify(aud)} (sealed for ${JSON.stringify(audience)})`;
              const verdict = got.ok ? 'ok' : got.reason;
              expect(verdict, label).toBe(expected.verdict);
              if (got.ok) {
                // The one thing that must hold whatever the model says: only a sealed token, for
                // the audience it was sealed for, verifies.
                expect(
                  sealed.some((s) => s.token === token && s.audience === aud),
                  label,
                ).toBe(true);
                expect(got.payload.p, label).toBe(expected.payload!.p);
              }
            }
          }
          // The minted handle under a different audience: never valid.
          const wrong = verifyTokenForTests(key, minted, differentAudience(audience, audMutation), SID, now);
          expect(wrong.ok ? 'ok' : wrong.reason).toBe('not_valid');
        }),
      ),
  });
});

// ── Over HTTP ────────────────────────────────────────────────────────────────────────────────────

const PEER_YAML = 'name: reporter\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: 10m\n    max_bytes: 1Ki\n';
const SECRET = 'SECRET-handles-outside';
const MAX = 1024;

/** The peer root as the model holds it (built on disk by makeTree below). */
function peerModel(): model.MDir {
  const root = model.newDir();
  const sub = model.newDir();
  const file = (s: string): model.MNode => ({ kind: 'file', content: Buffer.from(s) });
  root.children.set('report.md', file('known bytes'));
  root.children.set('sub', sub);
  sub.children.set('a.txt', file('in sub'));
  root.children.set('link', { kind: 'symlink', target: 'report.md' });
  root.children.set('escape', { kind: 'symlink', target: '../secret.txt' });
  root.children.set('big.bin', { kind: 'file', content: Buffer.alloc(2048) });
  root.children.set('fifo', { kind: 'fifo' });
  root.children.set('.marker', file(''));
  return root;
}

/** SPEC 6: `p` is canonical at mint and judged again, lexically, after the MAC (no decoding). */
function canonical(p: string): string[] | null {
  if (p === '' || p.includes('\0') || p.startsWith('/')) return null;
  const t = p.endsWith('/') ? p.slice(0, -1) : p;
  const parts = t.split('/');
  return parts.some((c) => c === '' || c === '.' || c === '..') ? null : parts;
}

const PEER_STATUS: Record<string, number> = {
  ok: 200,
  not_found: 404,
  malformed_handle: 400,
  missing_audience: 400,
  handle_not_valid: 403,
  handle_expired: 410,
  outside_root: 403,
  symlink_refused: 403,
  not_a_regular_file: 403,
  too_large: 413,
  no_peer_plane: 404,
  bad_request: 431,
};

/** The model's answer to `GET <target>` with `x-murmur-audience: <audience>` (absent when null). */
function expectedRedeem(
  target: string,
  audience: string | null,
  sealed: readonly Sealed[],
  sessionId: string,
  containment: model.Containment,
  declared: boolean,
): { code: string; verified: boolean; bytes?: Buffer } {
  // Node's parser refuses a header block (request line included) past 16 KiB with 431; within a
  // few hundred bytes of that the other headers decide, so the model keeps clear of the edge.
  if (target.length > 16_500) return { code: 'bad_request', verified: false };
  const path = model.targetPath(target);
  const token = path.slice('/resources/peer/'.length);
  if (token === '') return { code: 'not_found', verified: false };
  if (!declared) return { code: 'no_peer_plane', verified: false };
  if (shapeOf(token) === null) return { code: 'malformed_handle', verified: false };
  // Node trims optional whitespace (space, tab) around a header value; the server trims again.
  const asserted = audience === null ? '' : audience.trim();
  if (asserted === '') return { code: 'missing_audience', verified: false };
  const v = modelVerify(token, asserted, sealed, sessionId, Date.now());
  const macOk = sealed.some((s) => s.token === token && s.audience === asserted);
  if (v.verdict === 'malformed') return { code: 'malformed_handle', verified: macOk };
  if (v.verdict === 'not_valid') return { code: 'handle_not_valid', verified: macOk };
  if (v.verdict === 'expired') return { code: 'handle_expired', verified: true };
  const parts = canonical(v.payload!.p);
  if (parts === null) return { code: 'outside_root', verified: true };
  const r = model.readComponents(peerModel(), parts, containment, MAX);
  return r.code === 'ok' ? { code: 'ok', verified: true, bytes: r.bytes } : { code: r.code, verified: true };
}

/** An inotify watch (IN_OPEN | IN_ACCESS) on a few directories, through python3's ctypes. */
class OpenWatch {
  private events: string[] = [];
  private buffer = '';
  private waiters: Array<() => void> = [];
  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    private readonly marker: string,
  ) {
    child.stdout.on('data', (d: Buffer) => {
      this.buffer += d.toString('latin1');
      let nl: number;
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        this.events.push(this.buffer.slice(0, nl));
        this.buffer = this.buffer.slice(nl + 1);
      }
      for (const w of this.waiters.splice(0)) w();
    });
  }

  static async start(dirs: string[], marker: string): Promise<OpenWatch> {
    const script = [
      'import ctypes, os, struct, sys',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'fd = libc.inotify_init1(0)',
      'for i, d in enumerate(sys.argv[1:]):',
      '  if libc.inotify_add_watch(fd, os.fsencode(d), 0x1 | 0x20) < 0: sys.exit("watch failed")',
      'print("ready", flush=True)',
      'while True:',
      '  data = os.read(fd, 65536); i = 0',
      '  while i < len(data):',
      '    w, mask, cookie, n = struct.unpack_from("iIII", data, i)',
      '    name = data[i + 16:i + 16 + n].rstrip(b"\\0"); i += 16 + n',
      '    print(w, hex(mask), name.hex(), flush=True)',
    ].join('\n');
    const child = spawn('python3', ['-c', script, ...dirs]);
    const w = new OpenWatch(child, marker);
    await w.until((e) => e.includes('ready'));
    w.events = [];
    return w;
  }

  private until(pred: (e: string) => boolean): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`inotify watch: timed out; saw ${this.events.join(' | ')}`)), 10_000);
      const check = () => {
        if (this.events.some(pred)) {
          clearTimeout(timer);
          resolve();
        } else this.waiters.push(check);
      };
      check();
    });
  }

  /** Every event since the last call, after a marker open proves the queue has been drained. */
  async drain(): Promise<string[]> {
    const name = Buffer.from('.marker').toString('hex');
    closeSync(openSync(this.marker, 'r'));
    await this.until((e) => e.endsWith(` ${name}`));
    const seen = this.events.filter((e) => !e.endsWith(` ${name}`));
    this.events = [];
    return seen;
  }

  stop(): void {
    this.child.kill();
  }
}

describe('peer handles over real HTTP', () => {
  let workdir: string;
  let traceDir: string;
  const sessions: Array<{ containment: model.Containment; launched: Launched; declared: boolean }> = [];
  let watch: OpenWatch;

  beforeAll(async () => {
    workdir = tempDir('rp-fuzz-handles-');
    traceDir = tempDir('rp-fuzz-handles-trace-');
    makeTree(workdir, [
      'out/report.md: known bytes',
      'out/sub/a.txt: in sub',
      'out/link -> report.md',
      'out/escape -> ../secret.txt',
      'out/big.bin @ 2k',
      'out/fifo |',
      'out/.marker: ',
      `secret.txt: ${SECRET}`,
    ]);
    for (const containment of ['sealed', 'scoped'] as const) {
      sessions.push({ containment, launched: await launch({ workdir, traceDir, yaml: PEER_YAML, containment }), declared: true });
    }
    sessions.push({ containment: 'sealed', launched: await launch({ workdir, traceDir, yaml: 'name: x\nversion: "1"\n' }), declared: false });
    watch = await OpenWatch.start([join(workdir, 'out'), join(workdir, 'out/sub'), workdir], join(workdir, 'out/.marker'));
  });

  afterAll(async () => {
    watch?.stop();
    for (const s of sessions) await s.launched.close();
    removeTree(workdir);
    removeTree(traceDir);
  });

  const headerValue = fc.oneof(
    { weight: 2, arbitrary: fc.constant(null) },
    { weight: 6, arbitrary: audienceMutationArb.map((m) => ({ m })) },
    { weight: 1, arbitrary: fc.constantFrom('', ' ', '\t', 'x', 'é'.normalize()) },
  );

  fuzzIt({
    name: 'redeem-http',
    // Invariant: every redeem answers the model's code and status, and a token whose MAC fails opens no file.
    file: import.meta.filename,
    runs: 40,
    timeoutMs: 120_000,
    property: () =>
      fc.asyncProperty(
        fc.constantFrom(...PATHS),
        payloadRecipeArb(PATHS),
        fc.constantFrom(...AUDIENCES),
        fc.array(fc.tuple(fc.nat({ max: 5 }), fc.array(mutationArb, { maxLength: 3 }), headerValue, fc.nat()), { minLength: 1, maxLength: 8 }),
        guard(async (p, odd, audience, requests) => {
          const now = Date.now();
          const cases: Array<{ s: (typeof sessions)[number]; target: string; aud: string | null; expected: ReturnType<typeof expectedRedeem> }> = [];
          for (const [which, ms, header, pick] of requests) {
            const index = pick % sessions.length;
            const s = sessions[index]!;
            // The session without a peer plane has no key: its tokens are sealed by the first one's.
            const key = (s.launched.session.key ?? sessions[0]!.launched.session.key)!;
            const sid = s.launched.session.sessionId;
            const minted = mintToken(key, { v: 1, iss: sid, p, exp: now + 600_000, n: '0123456789abcdef0123456789abcdef' }, audience);
            const sealedOdd = sealRawForTests(key, payloadBytes(odd, sid, now), audience);
            // Another session's handle: its own key and issuer, never this one's.
            const otherSession = sessions[index === 0 ? 1 : 0]!.launched;
            const foreign = mintToken(otherSession.session.key!, { v: 1, iss: otherSession.session.sessionId, p, exp: now + 600_000, n: 'aa' }, audience);
            const sealed: Sealed[] = s.declared ? [minted, sealedOdd].map((token) => ({ token, audience })) : [];
            const base = [minted, sealedOdd, foreign, minted, sealedOdd, `mh1.${'A'.repeat(which * 7)}`][which]!;
            const token = mutate(base, ms);
            const aud = header === null ? null : typeof header === 'string' ? header : mutateAudience(audience, header.m).replace(/[\0\r\n]/g, '');
            const target = `/resources/peer/${wireSafe(Buffer.from(token, 'utf8').toString('latin1'))}`;
            cases.push({ s, target, aud, expected: expectedRedeem(target, aud, sealed, sid, s.containment, s.declared) });
          }
          // Unverified first: nothing may be opened while they are answered.
          const order = [...cases.filter((c) => !c.expected.verified), ...cases.filter((c) => c.expected.verified)];
          let phase: 'unverified' | 'verified' = 'unverified';
          await watch.drain();
          for (const c of order) {
            if (phase === 'unverified' && c.expected.verified) {
              const opened = await watch.drain();
              expect(opened, 'files opened while answering handles whose MAC does not verify').toEqual([]);
              phase = 'verified';
            }
            const headers: Array<[string, string]> = c.aud === null ? [] : [['x-murmur-audience', Buffer.from(c.aud, 'utf8').toString('latin1')]];
            const res = await rawGet(c.s.launched.url, Buffer.from(c.target, 'latin1'), headers);
            const label = `GET ${show(c.target.slice(0, 300))} audience ${JSON.stringify(c.aud)} under ${c.s.containment}${c.s.declared ? '' : ' (no peer plane)'}`;
            if (c.expected.code === 'bad_request') {
              expect(res.status, label).toBe(431);
              continue;
            }
            if (c.target.length > 16_000 && res.status === 431) continue;
            expect(res.status, label).toBe(PEER_STATUS[c.expected.code]);
            expect(res.header('content-length'), label).toBe(String(res.body.length));
            expect(res.raw.includes(SECRET), label).toBe(false);
            if (c.expected.code === 'ok') {
              expect(res.body.equals(c.expected.bytes!), label).toBe(true);
              expect(res.header('x-murmur-export-root'), label).toBeUndefined();
              continue;
            }
            const body = res.json() as { error: string; message: string };
            expect(body.error, label).toBe(c.expected.code);
            expect(isCode(body.error), label).toBe(true);
            expect(CATALOGUE[body.error as keyof typeof CATALOGUE].status, label).toBe(res.status);
            const token = model.targetPath(c.target).slice('/resources/peer/'.length);
            if (c.expected.code !== 'not_found' || token !== '') {
              if (c.s.declared || c.expected.code !== 'not_found') expect(res.header('x-murmur-handle-id'), label).toBe(modelHandleId(token));
            }
          }
          if (phase === 'unverified') expect(await watch.drain(), 'files opened while answering handles whose MAC does not verify').toEqual([]);
          // The trace: a handle whose MAC did not verify never has its path recorded (in the trace
          // of the session that refused it; the same token may verify in its issuer's).
          for (const s of sessions) {
            const unverified = new Set(
              cases.filter((c) => c.s === s && !c.expected.verified).map((c) => modelHandleId(model.targetPath(c.target).slice('/resources/peer/'.length))),
            );
            const verified = new Set(
              cases.filter((c) => c.s === s && c.expected.verified).map((c) => modelHandleId(model.targetPath(c.target).slice('/resources/peer/'.length))),
            );
            const lines = readFileSync(s.launched.tracePath, 'utf8')
              .trim()
              .split('\n')
              .map((l) => JSON.parse(l) as Record<string, unknown>);
            for (const line of lines) {
              if (line.event_type !== 'peer_handle_redeem') continue;
              const id = String(line.handle_id);
              if (unverified.has(id) && !verified.has(id)) expect(line.path, `trace of ${id}`).toBeNull();
            }
          }
        }),
      ),
  });

  fuzzIt({
    name: 'redeem-http-opens',
    // Invariant: redeeming a verified handle is seen as an open (the inotify watch is not blind).
    file: import.meta.filename,
    runs: 3,
    // The watch is not blind: redeeming a verified handle for a file is seen as an open of it.
    property: () =>
      fc.asyncProperty(
        fc.constantFrom('report.md', 'sub/a.txt', 'link'),
        guard(async (p) => {
          const s = sessions[0]!;
          const token = mintToken(s.launched.session.key!, { v: 1, iss: s.launched.session.sessionId, p, exp: Date.now() + 60_000, n: 'ab' }, AUDIENCES[0]!);
          await watch.drain();
          const res = await rawGet(s.launched.url, `/resources/peer/${token}`, [['x-murmur-audience', AUDIENCES[0]!]]);
          expect(res.status).toBe(200);
          expect((await watch.drain()).length).toBeGreaterThan(0);
        }),
      ),
  });
});
