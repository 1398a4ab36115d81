// The runtime-writes declaration cannot go stale silently: every place the project's own source
// (TypeScript and C++) can write is either a declared runtime write (it names the constant of a
// row of RUNTIME_WRITES) or listed below with a written reason. A new write anywhere fails this
// test until it is declared or exempted, and the planted cases prove the scanner sees writes.
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as scope from '../src/scope.js';
import { scanProject, scanSource, type WriteSite } from './helpers/write-scanner.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Each declared row is referenced in code through one exported constant of src/scope.ts. */
const ROW_CONSTANTS: Record<string, keyof typeof scope> = { 'peer-in': 'PEER_INBOX_DIR' };

interface Exemption {
  file: string;
  match: string;
  reason: string;
}

const EXEMPT: Exemption[] = [
  { file: 'src/native.ts', match: 'write(chunk: Buffer)', reason: 'the Landing wrapper\'s own write method (its declaration and definition): it appends only to the temporary file Landing.open created' },
  { file: 'src/trace.ts', match: 'mkdirSync(dirname(path)', reason: 'the trace lives in the records directory, outside the workdir (an operator --trace is the operator\'s choice)' },
  { file: 'src/trace.ts', match: 'openSync(path, flags', reason: 'the trace file itself, in the records directory' },
  { file: 'src/trace.ts', match: 'writeSync(this.fd', reason: 'appends session_start to the trace' },
  { file: 'src/trace.ts', match: 'write(this.fd', reason: 'appends an event to the trace' },
  { file: 'src/launch/open-session.ts', match: 'mkdirSync(requested', reason: 'creates the workdir itself when it does not exist yet, not a path beneath it' },
  { file: 'src/demo.ts', match: 'mkdtempSync(', reason: 'the demo makes a scratch directory in the system temp dir to hold its example workdirs' },
  { file: 'src/demo.ts', match: 'cpSync(', reason: 'the demo copies an example capsule to become a workdir before any session starts' },
  { file: 'src/client.ts', match: 'openSync(temp', reason: 'the operator client saves a download where the operator asked (-o), on the operator side' },
  { file: 'src/client.ts', match: 'writeSync(fd, body', reason: 'the operator client writing its own download' },
  { file: 'src/client.ts', match: 'unlinkSync(temp)', reason: 'the operator client removing its own partial download' },
  { file: 'src/client.ts', match: 'renameSync(temp, target)', reason: 'the operator client moving its own download into place' },
  { file: 'native/write.cc', match: '', reason: 'the landing mechanism itself: reachable only through native.Landing.open, whose call sites are held to the declared rows' },
];

type Verdict = { site: WriteSite; via: string } | { site: WriteSite; via: null };

function judge(sites: WriteSite[]): Verdict[] {
  return sites.map((site) => {
    for (const [row, constant] of Object.entries(ROW_CONSTANTS)) {
      if (new RegExp(`\\b${constant}\\b`).test(site.text)) return { site, via: `declared row ${row}` };
    }
    const exemption = EXEMPT.find((e) => e.file === site.file && site.text.includes(e.match));
    return { site, via: exemption ? `exempt: ${exemption.reason}` : null };
  });
}

describe('runtime writes are declared', () => {
  it('every declared row has the constant code uses to name it, with the same value', () => {
    for (const row of scope.RUNTIME_WRITES) {
      const constant = ROW_CONSTANTS[row.path];
      expect(constant, `no constant for row ${row.path}`).toBeDefined();
      expect(scope[constant!]).toBe(row.path);
    }
    expect(Object.keys(ROW_CONSTANTS).sort()).toEqual(scope.RUNTIME_WRITES.map((r) => r.path).sort());
  });

  it('every write site in src/ and native/ is declared or exempted with a reason', () => {
    const sites = scanProject(ROOT);
    expect(sites.length).toBeGreaterThan(5);
    const undeclared = judge(sites).filter((v) => v.via === null).map((v) => `${v.site.file}:${v.site.line} ${v.site.text}`);
    expect(undeclared).toEqual([]);
    // The landing itself goes through the declared row.
    expect(judge(sites).some((v) => v.via === 'declared row peer-in' && v.site.call === 'Landing.open')).toBe(true);
  });

  it('no exemption is stale', () => {
    const sites = scanProject(ROOT);
    for (const e of EXEMPT) {
      expect(e.reason.length, e.file).toBeGreaterThan(20);
      expect(sites.some((s) => s.file === e.file && s.text.includes(e.match)), `${e.file}: '${e.match}' matches nothing`).toBe(true);
    }
  });
});

describe('the scanner finds planted writes', () => {
  it.each([
    ['src/peer/notes.ts', "writeFileSync(join(session.workdir, 'notes.md'), text);", 'ts'],
    ['src/peer/notes.ts', "await fs.promises.mkdir(join(workdir, 'cache'), { recursive: true });", 'ts'],
    ['src/peer/notes.ts', "const fd = openSync(join(workdir, 'x'), 'a');", 'ts'],
    ['src/peer/notes.ts', "await native.Landing.open(session.workdirDescriptor, 'uploads');", 'ts'],
    ['src/peer/notes.ts', 'fs.rmSync(workdir, { recursive: true });', 'ts'],
    ['native/extra.cc', 'int fd = openat(workdir_fd, "state.db", O_WRONLY | O_CREAT, 0600);', 'cc'],
    ['native/extra.cc', 'mkdirat(workdir_fd, "cache", 0700);', 'cc'],
    ['native/extra.cc', 'renameat(dir_fd, "a", dir_fd, "b");', 'cc'],
  ] as const)('%s: %s', (file, line, kind) => {
    const sites = scanSource(file, `// planted\n${line}\n`, kind);
    expect(sites).toHaveLength(1);
    expect(judge(sites)[0]!.via).toBeNull();
  });

  it('ignores reads, comments and non-fs calls', () => {
    const text = [
      "const fd = openSync(path, 'r');",
      '// writeFileSync(x) in a comment',
      'reply.send(body);',
      'socket.write(chunk);',
      'int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);',
    ].join('\n');
    expect(scanSource('src/x.ts', text, 'ts')).toEqual([]);
    expect(scanSource('native/x.cc', 'int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);', 'cc')).toEqual([]);
  });
});
