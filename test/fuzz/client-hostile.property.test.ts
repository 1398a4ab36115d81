// Issue 28's SPEC 10 gap: the client trusts no server text. `resource-plane ls` and `get` against
// a generated hostile server on a real loopback socket (test/fuzz/hostile.ts): refusals whose code
// and message carry C0 and C1 controls, bidi and zero-width characters, tag characters, lone
// surrogates, backslashes and quotes, or are not strings, not JSON, or longer than the refusal cap;
// listings whose texts carry the same and whose numbers are strings, negative, fractional or null;
// bodies that are not JSON; files under etags naming other bytes or malformed (with the same
// characters), content-lengths exact, short, long or absent, chunked whole or cut, ended by a FIN,
// kept open or reset, around 64 KiB and `--max-bytes`. The model (peer-model.ts, from SPEC 10 and
// docs/cli.md) predicts the exit status, the error line (the server's words through the printable
// filter, exactly), the bytes saved or nothing saved, and the listing printed; nothing either verb
// prints, on stdout or stderr, may hold a character a terminal acts on. Most cases call the verbs'
// functions in process (src/cli/client.ts and download.ts, the error line as the command prints it); one in six
// runs the real command (dist/cli/main.js), so the exit status and printing are the binary's.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { list } from '../../src/cli/client.js';
import { get } from '../../src/cli/download.js';
import { ClientError } from '../../src/cli/exit.js';
import { runCliAsync } from '../helpers/cli.js';
import { removeTree, tempDir } from '../helpers/tree.js';
import { bytesFrom, framingAndEnding, hostileServer, sha256Hex, type Ending, type Framing, type Scripted } from './hostile.js';
import { getExpectation, lsExpectation, printableModel, TERMINAL_CONTROL, type ClientExpectation } from './peer-model.js';
import { fuzzIt, guard } from './runner.js';

/** Characters a hostile server puts in its texts. */
const HOSTILE = [
  '\u001b[2J',
  '\u001b]0;t\u0007',
  '\r',
  '\n',
  '\t',
  '\u0000',
  '\u007f',
  '\u0085',
  '\u009b',
  '\u202e',
  '\u2066',
  '\u200b',
  '\ufeff',
  '\u{e0041}',
  '\ud800',
  '\\x1b',
  '\\',
  '"',
  ' ',
  '\u00a0',
  '\u2028',
  'é',
  'ok',
  'saved 6 bytes',
];
const hostileText = fc.array(fc.constantFrom(...HOSTILE), { maxLength: 6 }).map((parts) => parts.join(''));
/** Characters of a hostile header value (latin1). */
const HEADER_CHARS = ['\u001b[31m', '\u0007', '\u007f', '\t', '\u0085', '\u009b', '\u00ad', '\u00a0', 'é', '\\', '"', ' ', 'a1'];
/** A value where the listing wants a number or a string. */
const wrongValue = fc.constantFrom<unknown>('6', '6\u001b[1m', -1, 1.5, null, [], {}, true);

type Verb = 'ls' | 'ls-json' | 'get' | 'get-stdout';
type RefusalBody = { kind: 'json'; error: unknown; message: unknown } | { kind: 'not-json' } | { kind: 'long' };

interface Case {
  verb: Verb;
  viaCli: boolean;
  status: number;
  refusal: RefusalBody;
  /** ls: the listing (or raw text) served. */
  listing: unknown;
  /** get: the file's size, its bytes' seed, and what its etag says. */
  size: number;
  seed: number;
  etag: { kind: 'delivered' | 'other' | 'hostile' | 'absent'; text: string };
  maxBytes: number | null;
  framing: Framing;
  ending: Ending;
}

let base: string;
beforeAll(() => {
  base = tempDir('rp-fuzz-client-');
});
afterAll(() => removeTree(base));

function answer(c: Case): Scripted {
  if (c.status !== 200) {
    const r = c.refusal;
    const text =
      r.kind === 'not-json'
        ? 'refused, as plain text\u001b[2J'
        : r.kind === 'long'
          ? JSON.stringify({ error: 'not_found', message: 'm'.repeat(17 * 1024) })
          : JSON.stringify({ error: r.error, message: r.message });
    return {
      status: c.status,
      headers: [['content-type', 'application/json']],
      body: Buffer.from(text),
      framing: { kind: 'exact' },
      ending: c.ending === 'reset' ? 'close' : c.ending,
    };
  }
  if (c.verb === 'ls' || c.verb === 'ls-json') {
    const body = Buffer.from(typeof c.listing === 'string' ? c.listing : JSON.stringify(c.listing));
    return { status: 200, headers: [['content-type', 'application/json']], body, framing: c.framing, ending: c.ending };
  }
  const body = bytesFrom(c.seed, c.size);
  const f = c.framing;
  const delivered = f.kind === 'short' ? body.subarray(0, Math.max(0, body.length - f.by)) : body;
  const headers: Array<[string, string]> = [['content-type', 'application/octet-stream']];
  if (c.etag.kind === 'delivered') headers.push(['etag', `"sha256:${sha256Hex(delivered)}"`]);
  else if (c.etag.kind === 'other') headers.push(['etag', `"sha256:${sha256Hex(`other ${c.seed}`)}"`]);
  else if (c.etag.kind === 'hostile') headers.push(['etag', c.etag.text]);
  return { status: 200, headers, body, framing: c.framing, ending: c.ending };
}

interface Observed {
  status: number;
  stdout: Buffer;
  /** What the command writes on stderr for an error: `error: <message>`. */
  errorLine: string | null;
  stderr: string;
}

/** The verb in process: its result or ClientError, as main.ts prints them (`error: <message>`, the error's exit status). */
async function inProcess(c: Case, url: string, dir: string): Promise<Observed> {
  const chunks: Buffer[] = [];
  const stdout = new Writable({ write: (chunk: Buffer, _e, done) => void (chunks.push(Buffer.from(chunk)), done()) });
  try {
    if (c.verb === 'ls' || c.verb === 'ls-json') {
      const text = await list(url, { json: c.verb === 'ls-json' });
      return { status: 0, stdout: Buffer.from(text), errorLine: null, stderr: '' };
    }
    const r = await get(url, 'blob.bin', {
      output: c.verb === 'get-stdout' ? '-' : join(dir, 'blob.bin'),
      stdout,
      progress: null,
      ...(c.maxBytes !== null ? { maxBytes: c.maxBytes } : {}),
    });
    const saved = r.savedTo ? `saved ${r.bytes} bytes to ${r.savedTo} (sha256 ${r.sha256}, etag verified)\n` : '';
    return { status: 0, stdout: Buffer.concat(chunks), errorLine: null, stderr: saved };
  } catch (error) {
    if (!(error instanceof ClientError)) throw error;
    return { status: error.exitStatus, stdout: Buffer.concat(chunks), errorLine: error.message, stderr: `error: ${error.message}\n` };
  }
}

async function viaCli(c: Case, url: string, dir: string): Promise<Observed> {
  const args = c.verb === 'ls' ? ['ls', url] : c.verb === 'ls-json' ? ['ls', url, '--json'] : ['get', url, 'blob.bin', '-o', join(dir, 'blob.bin')];
  if (c.verb.startsWith('get') && c.maxBytes !== null) args.push('--max-bytes', String(c.maxBytes));
  const r = await runCliAsync(args);
  const m = /^error: (.*)\n$/s.exec(r.stderr);
  return { status: r.status ?? -1, stdout: Buffer.from(r.stdout), errorLine: m ? m[1]! : null, stderr: r.stderr };
}

async function runCase(c: Case): Promise<void> {
  const server = await hostileServer(() => answer(c));
  const dir = tempDir('rp-fuzz-client-case-');
  try {
    const url = `http://${server.address}`;
    const a = answer(c);
    const expected: ClientExpectation = c.verb.startsWith('ls') ? lsExpectation(a) : getExpectation(a, c.maxBytes ?? 1024 ** 3);
    const seen = await (c.viaCli ? viaCli(c, url, dir) : inProcess(c, url, dir));
    const label = `${c.viaCli ? 'command' : 'in process'}: ${JSON.stringify({ ...c, listing: typeof c.listing === 'string' ? c.listing : '(object)' })} → status ${seen.status}, ${JSON.stringify(seen.stderr.slice(0, 400))}`;
    expect(seen.status, label).toBe(expected.status);
    // Nothing either verb prints drives the terminal; stdout of `get -o -` is the file's bytes, not text.
    // Newlines are the verbs' own (the table's rows, the line's end): the row count and the one
    // stderr line below show that no server text added one.
    expect(seen.stderr.replace(/\n/g, ''), label).not.toMatch(TERMINAL_CONTROL);
    expect(seen.stderr === '' || /^[^\n]*\n$/.test(seen.stderr), `${label}: one stderr line`).toBe(true);
    if (c.verb !== 'get-stdout') expect(seen.stdout.toString('utf8').replace(/\n/g, ''), label).not.toMatch(TERMINAL_CONTROL);
    if (expected.error === null) {
      expect(seen.errorLine, label).toBeNull();
    } else if (typeof expected.error === 'string') {
      expect(seen.errorLine, label).toBe(expected.error);
    } else {
      expect(seen.errorLine, label).toMatch(expected.error);
    }
    const left = readdirSync(dir);
    if (c.verb === 'get' && expected.status === 0) {
      expect(left, label).toEqual(['blob.bin']);
      expect(readFileSync(join(dir, 'blob.bin')).equals(expected.saved!), `${label}: the saved bytes`).toBe(true);
    } else {
      // Nothing saved, no temporary file left beside the target.
      expect(left, label).toEqual([]);
    }
    if (c.verb === 'get-stdout') expect(seen.stdout.equals(expected.status === 0 ? expected.saved! : Buffer.alloc(0)), `${label}: stdout`).toBe(true);
    if (c.verb === 'ls-json' && expected.status === 0) {
      const text = seen.stdout.toString('utf8');
      expect(text.endsWith('\n') && text.indexOf('\n') === text.length - 1, `${label}: one line`).toBe(true);
      expect(JSON.parse(text), label).toEqual(expected.listing);
    }
    if (c.verb === 'ls' && expected.status === 0) {
      const text = seen.stdout.toString('utf8');
      const listing = expected.listing as { root: string; entries: Array<{ path: string }> };
      expect(text.split('\n')[0], label).toContain(`root ${printableModel(listing.root)} (`);
      for (const e of listing.entries) expect(text, label).toContain(printableModel(e.path));
      expect(text.split('\n').length, `${label}: one row per entry`).toBe(listing.entries.length + 4);
    }
  } finally {
    await server.close();
    removeTree(dir);
  }
}

// ── Generators ───────────────────────────────────────────────────────────────

const STATUSES = [200, 201, 302, 400, 403, 404, 500];
const entryArb = fc.record({
  path: fc.oneof(hostileText, fc.constant('report.md'), wrongValue),
  size_bytes: fc.oneof({ weight: 4, arbitrary: fc.nat(1_000_000) }, { weight: 1, arbitrary: wrongValue }),
  mtime_ms: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: -1e12, max: 4e12 }) }, { weight: 1, arbitrary: wrongValue }),
  sha256: fc.oneof(fc.constant('a'.repeat(64)), hostileText, wrongValue),
});
const listingArb: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      root: fc.oneof({ weight: 3, arbitrary: hostileText }, { weight: 1, arbitrary: wrongValue }),
      mode: fc.oneof({ weight: 3, arbitrary: fc.constantFrom('read-only', 'read-only\u001b[5m') }, { weight: 1, arbitrary: wrongValue }),
      max_bytes: fc.oneof({ weight: 3, arbitrary: fc.nat(1 << 30) }, { weight: 1, arbitrary: wrongValue }),
      generation: fc.oneof({ weight: 3, arbitrary: fc.nat(100) }, { weight: 1, arbitrary: wrongValue }),
      containment_achieved: fc.oneof({ weight: 3, arbitrary: hostileText }, { weight: 1, arbitrary: wrongValue }),
      entries: fc.oneof({ weight: 6, arbitrary: fc.array(entryArb, { maxLength: 3 }) }, { weight: 1, arbitrary: wrongValue }),
    }),
  },
  { weight: 1, arbitrary: fc.constantFrom<unknown>('not json \u001b[2J', '[1, 2]', 'null', '"a string"', '{"root": "x"') },
);

const refusalArb: fc.Arbitrary<RefusalBody> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('json' as const),
      error: fc.oneof({ weight: 4, arbitrary: hostileText }, { weight: 1, arbitrary: wrongValue }),
      message: fc.oneof({ weight: 4, arbitrary: hostileText }, { weight: 1, arbitrary: wrongValue }),
    }),
  },
  { weight: 1, arbitrary: fc.constant<RefusalBody>({ kind: 'not-json' }) },
  { weight: 1, arbitrary: fc.constant<RefusalBody>({ kind: 'long' }) },
);

const caseArb: fc.Arbitrary<Case> = fc
  .record({
    verb: fc.constantFrom<Verb>('ls', 'ls-json', 'get', 'get-stdout'),
    viaCli: fc.oneof({ weight: 5, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
    status: fc.oneof({ weight: 3, arbitrary: fc.constant(200) }, { weight: 2, arbitrary: fc.constantFrom(...STATUSES) }),
    refusal: refusalArb,
    listing: listingArb,
    size: fc.constantFrom(0, 5, 1_000, 65_536, 70_000),
    seed: fc.integer(),
    etag: fc.oneof(
      { weight: 3, arbitrary: fc.constant({ kind: 'delivered' as const, text: '' }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'other' as const, text: '' }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'absent' as const, text: '' }) },
      // Sent as latin1: controls the parser refuses, and C1 controls, a soft hyphen (Cf) and
      // obs-text it takes. CR and LF would end the header itself.
      {
        weight: 1,
        arbitrary: fc.array(fc.constantFrom(...HEADER_CHARS), { maxLength: 5 }).map((t) => ({ kind: 'hostile' as const, text: `"sha256:${t.join('')}"` })),
      },
    ),
    maxBytes: fc.constantFrom<number | null>(null, null, 1_000, 65_536),
  })
  // `get -o -` writes the file's bytes to stdout, which the command helper reads as text: in process only.
  .map((c) => (c.verb === 'get-stdout' ? { ...c, viaCli: false } : c))
  .chain((c) => framingAndEnding(c.size, c.maxBytes ?? 1024 ** 3, 2_000).map((fe) => ({ ...c, ...fe })));

function examples(): Array<[Case]> {
  const base: Case = {
    verb: 'get',
    viaCli: true,
    status: 200,
    refusal: { kind: 'not-json' },
    listing: null,
    size: 1_000,
    seed: 3,
    etag: { kind: 'delivered', text: '' },
    maxBytes: null,
    framing: { kind: 'exact' },
    ending: 'close',
  };
  const listing = {
    root: 'out/\u009b2J',
    mode: 'read-only',
    max_bytes: 10,
    generation: 1,
    containment_achieved: 'sealed\u202e',
    entries: [{ path: 'invoice_\u202efdp.exe\u001b[2K', size_bytes: 5, mtime_ms: 1, sha256: 'a'.repeat(64) }],
  };
  return (
    [
      base,
      { ...base, status: 404, refusal: { kind: 'json', error: 'not_found\u001b[1A', message: '\u001b]0;pwned\u0007\rsaved 6 bytes' } },
      { ...base, verb: 'ls', status: 403, refusal: { kind: 'json', error: 'x\u0085\u202e', message: 7 } },
      { ...base, verb: 'ls', status: 403, refusal: { kind: 'long' } },
      { ...base, verb: 'ls', listing },
      { ...base, verb: 'ls-json', listing },
      { ...base, verb: 'ls', listing: { ...listing, entries: [{ ...listing.entries[0], size_bytes: '5' }] } },
      { ...base, verb: 'ls', listing: { ...listing, generation: -1 } },
      { ...base, etag: { kind: 'hostile', text: '"sha256:\u001b[31m"' } },
      { ...base, etag: { kind: 'hostile', text: '"sha256:\u009b\u00ad\t1"' } },
      { ...base, etag: { kind: 'other', text: '' }, viaCli: false },
      { ...base, framing: { kind: 'long', by: 10 }, ending: 'reset', viaCli: false },
      { ...base, size: 65_536, framing: { kind: 'none' }, maxBytes: 65_536, viaCli: false },
      { ...base, size: 70_000, framing: { kind: 'chunked' }, maxBytes: 65_536, viaCli: false },
      { ...base, verb: 'get-stdout', size: 70_000, framing: { kind: 'short', by: 5 }, viaCli: false },
    ] as Case[]
  ).map((c) => [c]);
}

describe('ls and get against a hostile server', () => {
  fuzzIt({
    name: 'client-hostile',
    file: import.meta.filename,
    runs: 60,
    timeoutMs: 60_000,
    examples,
    // Invariant: the exit status and the error line are the model's (the server's words through the printable filter); nothing printed holds a terminal control; exactly the verified bytes are saved, or nothing is; a listing is printed only when well-formed.
    property: () => fc.asyncProperty(caseArb, guard(runCase)),
  });
});
