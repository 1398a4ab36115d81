// The runtime-writes declaration cannot go stale silently: every place the project's own source
// (TypeScript and C++) can write is either a declared runtime write (it names the constant of a
// row of RUNTIME_WRITES) or listed below with a written reason. A new write anywhere fails this
// test until it is declared or exempted, and the planted cases prove the scanner sees writes.
// An exemption names the one write it covers: its call, and text of that call's line, which must
// match exactly one write site, so no exemption can cover a file wholesale or a second write
// added beside the first.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as scope from '../../src/manifest/scope.js';
import { scanProject, scanSource, type WriteSite } from '../helpers/write-scanner.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Each declared row is referenced in code through one exported constant of src/manifest/scope.ts. */
const ROW_CONSTANTS: Record<string, keyof typeof scope> = { 'peer-in': 'PEER_INBOX_DIR' };

interface Exemption {
  file: string;
  /** The write call covered, as the scanner names it (`write`, `openat`, `mkdirSync`, `Landing.open`, ...). */
  call: string;
  /** Text of the covered line, starting with `call(`. */
  match: string;
  reason: string;
}

const EXEMPT: Exemption[] = [
  // The Landing wrapper (src/addon/landing.ts): its write method, declared on the addon's handle and
  // defined on the class, appends only to the temporary file Landing.open created in the declared row.
  {
    file: 'src/addon/landing.ts',
    call: 'write',
    match: 'write(chunk: Buffer): Promise<void>;',
    reason: "the addon landing handle's write, as declared: it appends only to the temporary file Landing.open created",
  },
  {
    file: 'src/addon/landing.ts',
    call: 'write',
    match: 'write(chunk: Buffer): Promise<void> {',
    reason: "the Landing wrapper's own write method: it appends only to the temporary file Landing.open created",
  },
  {
    file: 'src/cli/logger.ts',
    call: 'write',
    match: 'write(line: string): unknown },',
    reason: "the access log's destination: the line buffer below, which writes to stderr only",
  },
  {
    file: 'src/cli/logger.ts',
    call: 'write',
    match: 'write(level: number, fields: object, msg: string): void {',
    reason: 'the access log formats one line into its buffer; no file is written',
  },
  { file: 'src/cli/logger.ts', call: 'write', match: 'write(line: string): void {', reason: "the access log's line buffer takes a line in memory" },
  {
    file: 'src/cli/logger.ts',
    call: 'writeSync',
    match: 'writeSync(this.fd, text, at);',
    reason: "the access log's buffered lines, written to stderr (fd 2), never to a file the server opens",
  },
  {
    file: 'src/trace/trace.ts',
    call: 'mkdirSync',
    match: 'mkdirSync(dirname(path)',
    reason: "the trace lives in the records directory, outside the workdir (an operator --trace is the operator's choice)",
  },
  { file: 'src/trace/trace.ts', call: 'openSync', match: 'openSync(path, flags', reason: 'the trace file itself, in the records directory' },
  { file: 'src/trace/trace.ts', call: 'writeSync', match: 'writeSync(this.fd, buf.subarray', reason: 'appends session_start to the trace' },
  { file: 'src/trace/trace.ts', call: 'writeSync', match: 'writeSync(this.fd, buf)', reason: 'appends an event to a trace that is a regular file' },
  { file: 'src/trace/trace.ts', call: 'write', match: 'write(this.fd', reason: 'appends an event to the trace' },
  {
    file: 'src/trace/trace.ts',
    call: 'ftruncateSync',
    match: 'ftruncateSync(this.fd, this.tornAt)',
    reason: 'rolls a line the disk cut short back out of the trace (all or nothing)',
  },
  {
    file: 'src/session/open-session.ts',
    call: 'mkdirSync',
    match: 'mkdirSync(requested',
    reason: 'creates the workdir itself when it does not exist yet, not a path beneath it',
  },
  {
    file: 'src/launch/confine-apply.ts',
    call: 'mkdirSync',
    match: 'mkdirSync(dirname(tracePath)',
    reason: "a confined launch creates the trace's directory in the records directory before the re-exec, outside the workdir",
  },
  {
    file: 'src/launch/confine-apply.ts',
    call: 'unlinkSync',
    match: 'unlinkSync(tracePath)',
    reason: 'a launch that goes on unconfined removes the trace file it created before the re-exec, which no session uses',
  },
  {
    file: 'src/launch/confine-apply.ts',
    call: 'rmdir',
    match: 'rmdir(at)',
    reason: "an execve refused after confinement removes the empty directories the launch created (the workdir, the trace's), through the pool",
  },
  {
    file: 'src/launch/confine-apply.ts',
    call: 'unlink',
    match: 'unlink(tracePath)',
    reason: 'an execve refused after confinement removes the trace file the launch created, which no session uses',
  },
  {
    file: 'src/session/options.ts',
    call: 'unlinkSync',
    match: 'unlinkSync(path)',
    reason: 'a stale operator socket (a socket of this user in the checked private directory that nothing listens on) is removed before it is replaced',
  },
  {
    file: 'src/launch/sockets.ts',
    call: 'unlinkSync',
    match: 'unlinkSync(l.unlinkOnClose)',
    reason: 'a launch that will not serve its unix operator socket removes the socket file it created',
  },
  {
    file: 'src/http/listener.ts',
    call: 'unlinkSync',
    match: 'unlinkSync(listener.unlinkOnClose)',
    reason: 'an inherited unix operator socket this launch created is removed when the server stops (libuv did not bind it, so does not)',
  },
  { file: 'native/sockets.cc', call: 'unlink', match: 'unlink(path.c_str())', reason: 'a unix socket just bound whose listen failed is removed' },
  {
    file: 'src/session/open-session.ts',
    call: 'rmdirSync',
    match: 'rmdirSync(at)',
    reason: "a launch that goes no further removes the empty directories it created itself (the workdir, the trace's), and nothing else",
  },
  {
    file: 'src/cli/records-tool.ts',
    call: 'renameSync',
    match: 'renameSync(s.dir, aside)',
    reason:
      "`records --prune` first renames an ended session's directory aside within the records directory (outside every workdir), so a launch reusing its id cannot race the removal",
  },
  {
    file: 'src/cli/records-tool.ts',
    call: 'renameSync',
    match: 'renameSync(aside, s.dir)',
    reason: '`records --prune` puts a session back where it was when a process opened its trace meanwhile (records directory only)',
  },
  {
    file: 'src/cli/records-tool.ts',
    call: 'rmSync',
    match: 'rmSync(aside, { recursive: true })',
    reason: "`records --prune` removes an ended session's directory in the records directory (outside every workdir), never a live one",
  },
  {
    file: 'src/cli/records-tool.ts',
    call: 'rmdirSync',
    match: 'rmdirSync(dirname(s.dir))',
    reason: "`records --prune` removes a workdir's digest directory in the records directory once its last session is gone (rmdir: only when empty)",
  },
  {
    file: 'src/cli/demo.ts',
    call: 'mkdtempSync',
    match: 'mkdtempSync(join(tmpdir()',
    reason: 'the demo makes a scratch directory in the system temp dir to hold its example workdirs',
  },
  {
    file: 'src/cli/demo.ts',
    call: 'cpSync',
    match: 'cpSync(join(examples, name)',
    reason: 'the demo copies an example capsule to become a workdir before any session starts',
  },
  {
    file: 'src/cli/demo.ts',
    call: 'rmSync',
    match: 'rmSync(scratch, { recursive: true, force: true })',
    reason: 'the demo removes the scratch directory it made in the system temp dir, on every way out',
  },
  {
    file: 'src/cli/download.ts',
    call: 'open',
    match: 'open(temp, target === null',
    reason:
      'the operator client streams a download into its own exclusive temporary file beside where the operator asked (-o), or a spool in the system temp dir for -o -, on the operator side; its writes go through this handle',
  },
  {
    file: 'src/cli/download.ts',
    call: 'linkSync',
    match: 'linkSync(temp, target)',
    reason: 'the operator client giving its own verified download its name without replacing anything',
  },
  {
    file: 'src/cli/download.ts',
    call: 'renameSync',
    match: 'renameSync(temp, target)',
    reason: 'the operator client moving its own verified download into place (--force)',
  },
  { file: 'src/cli/download.ts', call: 'unlinkSync', match: 'unlinkSync(path)', reason: 'the operator client discarding its own temporary download name' },
  {
    file: 'src/cli/local-tree.ts',
    call: 'mkdirSync',
    match: 'mkdirSync(dir, { recursive: true })',
    reason: '`mirror` creates the directory the operator named to mirror into, on the operator side',
  },
  {
    file: 'src/cli/local-tree.ts',
    call: 'mkdirSync',
    match: 'mkdirSync(this.at(parent.fd, name), 0o755)',
    reason: "`mirror` creates a directory the export has, beneath the descriptor of the operator's mirror directory, never through a symlink",
  },
  {
    file: 'src/cli/local-tree.ts',
    call: 'open',
    match: "open(this.at(dir.fd, name), 'wx', 0o644)",
    reason: "`mirror` streams a download into its own exclusive temporary file beneath the operator's mirror directory; its writes go through this handle",
  },
  {
    file: 'src/cli/local-tree.ts',
    call: 'renameSync',
    match: 'renameSync(this.at(dir.fd, temp), this.at(dir.fd, name))',
    reason: "`mirror` moving its own verified download into place beneath the operator's mirror directory",
  },
  {
    file: 'src/cli/local-tree.ts',
    call: 'unlinkSync',
    match: 'unlinkSync(this.at(dir.fd, temp))',
    reason: '`mirror` discarding its own temporary download name',
  },
  {
    file: 'src/cli/local-tree.ts',
    call: 'rmdirSync',
    match: 'rmdirSync(this.at(dir.fd, entry.name))',
    reason: "`mirror --delete` removing a directory left empty that the export does not have, in the operator's mirror directory (rmdir: only when empty)",
  },
  {
    file: 'src/cli/local-tree.ts',
    call: 'unlinkSync',
    match: 'unlinkSync(this.at(dir.fd, entry.name))',
    reason: "`mirror --delete` removing a local entry the export does not have, in the operator's mirror directory (the link itself, never what it points to)",
  },
  // The landing mechanism itself, reachable only through native.Landing.open, whose call sites are
  // held to the declared rows: each of its writes by name.
  {
    file: 'native/write.cc',
    call: 'mkdirat',
    match: 'mkdirat(workdir_fd, inbox.c_str(), 0755)',
    reason: 'the landing creates peer-in beneath the workdir descriptor when it is missing: the peer-in row',
  },
  {
    file: 'native/write.cc',
    call: 'openat',
    match: 'openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL',
    reason: 'the landing creates its exclusive temporary file inside the peer-in descriptor: the peer-in row',
  },
  {
    file: 'native/write.cc',
    call: 'unlinkat',
    match: 'unlinkat(dir.get(), name.c_str(), 0)',
    reason: 'the landing removes the temporary file it just created when it cannot stat it: the peer-in row',
  },
  {
    file: 'native/write.cc',
    call: 'write',
    match: 'write(file_.get(), data + done, length - done)',
    reason: 'the landing appends to its own temporary file inside peer-in, through the descriptor it holds: the peer-in row',
  },
  {
    file: 'native/write.cc',
    call: 'renameat',
    match: 'renameat(dir_.get(), temp_name_.c_str(), dir_.get(), final_name.c_str())',
    reason: 'the landing commits its temporary file to its final name within peer-in: the peer-in row',
  },
  {
    file: 'native/write.cc',
    call: 'unlinkat',
    match: 'unlinkat(dir_.get(), final_name_.c_str(), 0)',
    reason: 'an aborted landing removes the file it committed (the same inode) when its trace line cannot be written: the peer-in row',
  },
  {
    file: 'native/write.cc',
    call: 'unlinkat',
    match: 'unlinkat(dir_.get(), temp_name_.c_str(), 0)',
    reason: 'a landing closed while still writing removes its temporary file within peer-in: the peer-in row',
  },
];

type Verdict = { site: WriteSite; via: string } | { site: WriteSite; via: null };

function judge(sites: WriteSite[]): Verdict[] {
  return sites.map((site) => {
    for (const [row, constant] of Object.entries(ROW_CONSTANTS)) {
      if (new RegExp(`\\b${constant}\\b`).test(site.text)) return { site, via: `declared row ${row}` };
    }
    const exemption = EXEMPT.find((e) => covers(e, site));
    return { site, via: exemption ? `exempt: ${exemption.reason}` : null };
  });
}

function covers(e: Exemption, site: WriteSite): boolean {
  return e.file === site.file && e.call === site.call && site.text.includes(e.match);
}

/** Why each exemption is not one precise, live exemption: it must name its call and cover exactly one site. */
function exemptionProblems(exemptions: Exemption[], sites: WriteSite[]): string[] {
  const problems: string[] = [];
  for (const e of exemptions) {
    const label = `${e.file} ${e.call}: '${e.match}'`;
    if (!e.match.startsWith(`${e.call}(`)) problems.push(`${label} does not start with the call it covers`);
    const covered = sites.filter((site) => covers(e, site));
    if (covered.length !== 1) problems.push(`${label} covers ${covered.length} write sites, not exactly one`);
  }
  return problems;
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
    const undeclared = judge(sites)
      .filter((v) => v.via === null)
      .map((v) => `${v.site.file}:${v.site.line} ${v.site.text}`);
    expect(undeclared).toEqual([]);
    // The landing itself goes through the declared row.
    expect(judge(sites).some((v) => v.via === 'declared row peer-in' && v.site.call === 'Landing.open')).toBe(true);
  });

  it('no exemption is stale or broader than the one write it names', () => {
    const sites = scanProject(ROOT);
    for (const e of EXEMPT) expect(e.reason.length, e.file).toBeGreaterThan(20);
    expect(exemptionProblems(EXEMPT, sites)).toEqual([]);
  });

  it('an empty, call-less, over-broad or stale exemption is rejected', () => {
    const sites = scanSource('native/extra.cc', ['mkdirat(fd, "a", 0700);', 'renameat(fd, "a", fd, "b");', 'renameat(fd, "c", fd, "d");'].join('\n'), 'cc');
    expect(sites.map((s) => s.call)).toEqual(['mkdirat', 'renameat', 'renameat']);
    const reason = 'a reason long enough to pass the length check';
    const at = (call: string, match: string): Exemption => ({ file: 'native/extra.cc', call, match, reason });
    expect(exemptionProblems([at('mkdirat', 'mkdirat(fd, "a"'), at('renameat', 'renameat(fd, "c"')], sites)).toEqual([]);
    expect(exemptionProblems([at('mkdirat', '')], sites)).toEqual(["native/extra.cc mkdirat: '' does not start with the call it covers"]);
    expect(exemptionProblems([at('renameat', 'fd, "a"')], sites)).toEqual([`native/extra.cc renameat: 'fd, "a"' does not start with the call it covers`]);
    expect(exemptionProblems([at('renameat', 'renameat(fd')], sites)).toEqual([
      "native/extra.cc renameat: 'renameat(fd' covers 2 write sites, not exactly one",
    ]);
    expect(exemptionProblems([at('unlinkat', 'unlinkat(fd')], sites)).toEqual([
      "native/extra.cc unlinkat: 'unlinkat(fd' covers 0 write sites, not exactly one",
    ]);
  });

  it("a write added to native/write.cc is not covered by the landing's exemptions", () => {
    const text = readFileSync(`${ROOT}native/write.cc`, 'utf8');
    // A new kind of write, and a second ::write beside the landing's own (covered by name only).
    const planted = ['static void planted(int fd) { ftruncate(fd, 0); }', 'static void chatter(int fd) { ::write(fd, "x", 1); }'];
    const sites = scanSource('native/write.cc', `${text}\n${planted.join('\n')}\n`, 'cc');
    const undeclared = judge(sites)
      .filter((v) => v.via === null)
      .map((v) => v.site.text);
    expect(undeclared).toEqual(planted);
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
