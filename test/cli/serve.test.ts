// `resource-plane serve` as a launcher drives it: the URL on one stdout line, logs on stderr,
// clean shutdown on signals with the trace flushed, and launch diagnostics that create nothing.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { join, relative } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { reap } from '../helpers/cleanup.js';
import { runCli, startServe, type Served } from '../helpers/cli.js';
import { makeTree, removeTree, scratch, tempDir } from '../helpers/tree.js';

function workdirWith(manifest: string, lines: string[] = []): string {
  const dir = scratch(lines);
  writeFileSync(join(dir, 'murmur.yaml'), manifest);
  return dir;
}

const MANIFEST = 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n';

function track(s: Served): Served {
  reap(s.child);
  return s;
}

describe('serve', () => {
  it.each(['SIGTERM', 'SIGINT'] as const)('reports its URL on stdout, serves, and on %s exits 0 with the trace flushed', async (signal) => {
    const dir = workdirWith(MANIFEST, ['out/a.txt: hello']);
    const records = scratch();
    const s = track(await startServe(['--workdir', dir, '--containment', 'sealed', '--session-id', 'ses_test1'], { RESOURCE_PLANE_RECORDS_DIR: records }));
    expect(s.ready.event).toBe('listening');
    expect(s.ready.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(s.ready.advertised_url).toBe(`http://localhost:${new URL(s.ready.url).port}`);
    expect(s.ready.session_id).toBe('ses_test1');
    expect(s.ready.trace.startsWith(records)).toBe(true);
    const res = await fetch(`${s.ready.url}/resources/files/a.txt`);
    expect(await res.text()).toBe('hello');
    s.child.kill(signal);
    expect(await s.exited).toEqual({ code: 0, signal: null });
    // Exactly one stdout line, ever; logs went to stderr as JSON.
    expect(s.stdout().trim().split('\n')).toHaveLength(1);
    expect(s.stderr()).toContain('"msg":"shutting down"');
    const events = readFileSync(s.ready.trace, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(events.map((e) => e.event_type)).toEqual(['session_start', 'resource_read', 'session_end']);
    // A session that stopped cleanly says why, and what it recorded.
    expect(events[2]).toMatchObject({ reason: signal, counts: { resource_read: 1 } });
    // The trace lives outside the workdir, and the workdir was not written.
    expect(readdirSync(dir).sort()).toEqual(['murmur.yaml', 'out']);
  });

  it('lets a response being sent finish on SIGTERM, refuses new ones, and exits 0 (also on SIGHUP)', async () => {
    const dir = workdirWith('name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 64Mi\n');
    makeTree(dir, ['out/big.bin @ 1k']);
    writeFileSync(join(dir, 'out/big.bin'), Buffer.alloc(32 << 20, 7));
    const traces = scratch();
    for (const signal of ['SIGTERM', 'SIGHUP'] as const) {
      const s = track(await startServe(['--workdir', dir, '--trace', join(traces, `${signal}.jsonl`)]));
      const body = await new Promise<number>((resolve, reject) => {
        const req = get(`${s.ready.url}/resources/files/big.bin`, (res) => {
          res.pause();
          s.child.kill(signal);
          // Give the server time to start shutting down while the body is still queued.
          setTimeout(async () => {
            const refused = await fetch(`${s.ready.url}/resources/files/big.bin`).then(
              (r) => r.status,
              () => 'closed',
            );
            expect([503, 'closed']).toContain(refused);
            let n = 0;
            res.on('data', (d: Buffer) => (n += d.length));
            res.on('end', () => resolve(n));
            res.on('error', reject);
            res.resume();
          }, 300);
        });
        req.on('error', reject);
      });
      expect(body).toBe(32 << 20);
      expect(await s.exited).toEqual({ code: 0, signal: null });
    }
  });

  it.each([
    ['http://localhost:80', 'http://localhost:80'],
    ['https://Reporter.Example/', 'https://reporter.example:443'],
    ['http://proxy.local:8080/capsules/r1/', 'http://proxy.local:8080/capsules/r1'],
  ])('--advertise %s keeps the port explicit in the card (%s)', async (advertise, expected) => {
    const dir = workdirWith(MANIFEST);
    const s = track(await startServe(['--workdir', dir, '--advertise', advertise]));
    expect(s.ready.advertised_url).toBe(expected);
    const card = await (await fetch(`${s.ready.url}/.well-known/agent-card.json`)).json();
    expect(card.supportedInterfaces[0].url).toBe(expected);
    s.child.kill('SIGTERM');
    await s.exited;
  });

  it('honours --listen, --advertise and --trace', async () => {
    const dir = workdirWith(MANIFEST);
    const traceDir = scratch();
    const trace = join(traceDir, 'nested', 'trace.jsonl');
    const s = track(await startServe(['--workdir', dir, '--listen', '127.0.0.1:0', '--advertise', 'http://reporter.local:9000/', '--trace', trace]));
    expect(s.ready.advertised_url).toBe('http://reporter.local:9000');
    const card = await (await fetch(`${s.ready.url}/.well-known/agent-card.json`)).json();
    expect(card.supportedInterfaces[0].url).toBe('http://reporter.local:9000');
    expect(s.ready.trace).toBe(trace);
    s.child.kill('SIGTERM');
    await s.exited;
    expect(JSON.parse(readFileSync(trace, 'utf8').split('\n')[0]!).event_type).toBe('session_start');
  });

  it('logs requests to stderr at debug level with handle tokens redacted', async () => {
    const dir = workdirWith('name: cap\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n');
    const s = track(await startServe(['--workdir', dir], { RESOURCE_PLANE_LOG_LEVEL: 'debug' }));
    const token = 'mh1.eyJ2IjoxfQ.c2lnbmF0dXJl';
    await fetch(`${s.ready.url}/resources/peer/${token}`, { headers: { 'x-murmur-audience': 'a@b' } });
    await fetch(`${s.ready.url}/nowhere/${token}%ZZ`);
    s.child.kill('SIGTERM');
    await s.exited;
    expect(s.stderr()).toContain('"url":"/resources/peer/<handle:');
    expect(s.stderr()).not.toContain(token);
    expect(s.stdout()).not.toContain(token);
  });

  it('refuses a trace it cannot write before serving anything', () => {
    const dir = workdirWith(MANIFEST);
    const r = runCli(['serve', '--workdir', dir, '--trace', '/dev/full']);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^error: the trace could not be written/);
    expect(r.stdout).toBe('');
  });

  it.each([
    [['--listen', 'nonsense'], /--listen must be HOST:PORT/],
    [['--listen', '127.0.0.1:70000'], /--listen must be HOST:PORT/],
    [['--advertise', 'ftp://x'], /--advertise must be an http\(s\) URL/],
    [['--advertise', 'http://x/?q=1'], /--advertise must be an http\(s\) URL/],
    [['--advertise', 'http://user@x/'], /--advertise must be an http\(s\) URL/],
    [['--containment', 'airtight'], /Allowed choices are advisory, scoped, sealed/],
    [['--session-id', 'bad id'], /--session-id must be/],
  ])('refuses bad options %j with a clear message and exit status 2', (extra, message) => {
    const dir = workdirWith(MANIFEST);
    const r = runCli(['serve', '--workdir', dir, ...extra]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
  });
});

describe('an export root reached through an absolute symlink', () => {
  it.each(['files', 'peer_files'])('is refused at launch and by explain-scope (E-CAP-007), though on the host it points inside (%s)', (block) => {
    const base = scratch();
    const workdir = join(base, 'workdir');
    makeTree(workdir, ['real/f.txt: f', `out -> ${join(workdir, 'real')}`]);
    const manifest =
      block === 'files'
        ? 'name: x\nversion: "1"\nexports:\n  files:\n    root: out\n    mode: read-only\n'
        : 'name: x\nversion: "1"\nexports:\n  peer_files:\n    root: out\n';
    writeFileSync(join(workdir, 'murmur.yaml'), manifest);
    const field = block === 'files' ? 'exports.files.root' : 'exports.peer_files.root';
    const expected = `error[E-CAP-007]: ${field} 'out' resolves to '${join(workdir, 'real')}', which is outside the capsule workdir '${workdir}'\n  hint: point ${field} at a directory inside the workdir; a symlinked root needs a relative target`;
    const r = runCli(['serve', '--workdir', workdir, '--trace', join(base, 't.jsonl')]);
    expect(r.status).toBe(2);
    expect(r.stderr.startsWith(expected)).toBe(true);
    expect(existsSync(join(base, 't.jsonl'))).toBe(false);
    const e = runCli(['explain-scope', '--manifest', join(workdir, 'murmur.yaml')]);
    expect(e.status).toBe(2);
    expect(e.stderr.startsWith(expected)).toBe(true);
    // A relative link that stays inside is a valid root.
    removeTree(join(workdir, 'out'));
    makeTree(workdir, ['out -> real']);
    expect(runCli(['explain-scope', '--manifest', join(workdir, 'murmur.yaml'), '--json']).status).toBe(0);
  });
});

describe('launch diagnostics create nothing', () => {
  const outside = tempDir();
  afterAll(() => removeTree(outside));
  const cases: Array<[string, string, string, string[]]> = [
    [
      'E-MAN-003',
      'name: x\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 10MB\n',
      'exports.files.max_bytes must be a byte count, optionally suffixed Ki/Mi/Gi',
      [],
    ],
    [
      'E-MAN-003',
      'name: x\nversion: "1"\nexports:\n  files:\n    root: ../out\n    mode: read-only\n',
      'exports.files.root must be a relative path inside the workdir',
      [],
    ],
    [
      'E-MAN-003',
      'name: x\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: 5 minutes\n',
      'exports.peer_files.max_ttl must be a duration: an integer, optionally suffixed s/m/h/d',
      [],
    ],
    [
      'E-MAN-003',
      'name: x\nversion: "1"\ncapabilities:\n  peer_fetch:\n    allow: []\n',
      'capabilities.peer_fetch.allow must be a non-empty list of network destinations',
      [],
    ],
    ['E-CAP-001', 'name: x\nversion: "1"\ncapabilities:\n  network:\n    allow: ["http://h/path"]\n', "invalid network allow entry 'http://h/path'", []],
    [
      'E-CAP-007',
      'name: x\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n',
      "exports.files.root 'out/' resolves to",
      [`out -> ${outside}`],
    ],
    ['E-CAP-007', 'name: x\nversion: "1"\nexports:\n  peer_files:\n    root: share\n', "exports.peer_files.root 'share' resolves to", [`share -> ${outside}`]],
    ['E-CAP-008', 'name: x\nversion: "1"\nexports:\n  peer_files:\n    root: out/\nlifecycle:\n  after_task: sleep\n', 'exports.peer_files.max_ttl', []],
    ['E-CAP-008', 'name: x\nversion: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: 1h\nlifecycle:\n  after_task: sleep\n', '1h', []],
  ];

  it.each(cases)('%s: %s', (code, manifest, message, tree) => {
    const base = scratch();
    const records = scratch();
    const manifestPath = join(base, 'murmur.yaml');
    writeFileSync(manifestPath, manifest);
    const workdir = join(base, 'workdir');
    if (tree.length) makeTree(workdir, tree);
    const before = existsSync(workdir) ? readdirSync(workdir).sort() : null;
    const trace = join(base, 'trace.jsonl');
    const r = runCli(['serve', '--workdir', workdir, '--manifest', manifestPath, '--trace', trace], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect(r.status).toBe(2);
    expect(r.stderr.startsWith(`error[${code}]: `)).toBe(true);
    expect(r.stderr).toContain(message);
    expect(r.stderr).toMatch(/\n {2}hint: \S/);
    expect(r.stdout).toBe('');
    expect(existsSync(trace)).toBe(false);
    expect(readdirSync(records)).toEqual([]);
    expect(existsSync(workdir) ? readdirSync(workdir).sort() : null).toEqual(before);
    // explain-scope applies the same diagnostics (E-CAP-007 against the workdir it is given)
    const e = runCli(['explain-scope', '--manifest', manifestPath, '--json', '--workdir', workdir]);
    expect(e.status).toBe(2);
    expect(e.stderr.startsWith(`error[${code}]: `)).toBe(true);
    expect(e.stdout).toBe('');
  });
});

describe('the trace is kept out of the capsule workdir', () => {
  // Inside the workdir the capsule could rewrite its own record, the operator plane would serve
  // it, and an export root would be written to. Refused on the path as the kernel resolves it.
  function layout() {
    const base = scratch([
      `cap/murmur.yaml: ${MANIFEST}`,
      'cap/sub/',
      'outside/',
      'into-sub -> cap/sub',
      'into-missing -> cap/not-yet',
      'up-into -> cap/sub/..',
      'outside/rel-into -> ../cap',
    ]);
    return { base, workdir: join(base, 'cap'), records: scratch() };
  }
  const tree = (dir: string): string[] => readdirSync(dir, { recursive: true }).map(String).sort();
  const traces: Array<[string, (b: string) => string]> = [
    ['a file in the workdir', (b) => join(b, 'cap/trace.jsonl')],
    ['a file in a directory of the workdir that does not exist yet', (b) => join(b, 'cap/out/records/trace.jsonl')],
    ['the workdir itself', (b) => join(b, 'cap')],
    ['a symlink into the workdir', (b) => join(b, 'into-sub/trace.jsonl')],
    ['a dangling symlink into the workdir', (b) => join(b, 'into-missing/trace.jsonl')],
    ['a symlink whose target climbs back into the workdir', (b) => join(b, 'up-into/trace.jsonl')],
    ['a relative symlink into the workdir', (b) => join(b, 'outside/rel-into/sub/t.jsonl')],
    ['.. out of a directory that does not exist, back in', (b) => join(b, 'outside/none/../../cap/t.jsonl')],
    ['.. out of the workdir and back', (b) => `${b}/cap/sub/../../cap/./t.jsonl`],
    ['a relative path', (b) => relative(process.cwd(), join(b, 'cap/sub/t.jsonl'))],
  ];

  it.each(traces)('--trace naming %s is refused in one line, creating nothing', (_what, tracePath) => {
    const { base, workdir, records } = layout();
    const before = tree(base);
    const r = runCli(['serve', '--workdir', workdir, '--trace', tracePath(base)], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^error: --trace '[^\\n]*' resolves to '${workdir}[^\\n]*', inside the capsule workdir '${workdir}'[^\\n]*\\n$`));
    expect(r.stdout).toBe('');
    expect(tree(base)).toEqual(before);
    expect(readdirSync(records)).toEqual([]);
  });

  it('a workdir that does not exist yet is not created for a refused trace', () => {
    const { base, records } = layout();
    const workdir = join(base, 'new-cap');
    const manifest = join(base, 'outside', 'm.yaml');
    writeFileSync(manifest, MANIFEST);
    const r = runCli(['serve', '--workdir', workdir, '--manifest', manifest, '--trace', join(workdir, 'out/t.jsonl')], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect([r.status, r.stderr.split('\n').length]).toEqual([2, 2]);
    expect(existsSync(workdir)).toBe(false);
  });

  it.each([
    ['inside the workdir', (b: string) => join(b, 'cap/.records')],
    ['reached through a symlink', (b: string) => join(b, 'into-sub/records')],
  ])('a records directory %s is refused the same way', (_what, dir) => {
    const { base, workdir } = layout();
    const before = tree(base);
    const r = runCli(['serve', '--workdir', workdir], { RESOURCE_PLANE_RECORDS_DIR: dir(base) });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(
      /^error: the records directory \(RESOURCE_PLANE_RECORDS_DIR\) '[^\n]*' resolves to '[^\n]*', inside the capsule workdir '[^\n]*'[^\n]*\n$/,
    );
    expect(tree(base)).toEqual(before);
  });

  it('a trace beside the workdir is served as before', async () => {
    const { base, workdir, records } = layout();
    const trace = join(base, 'outside', 'capsule-trace.jsonl');
    const s = track(await startServe(['--workdir', workdir, '--trace', trace, '--no-landlock'], { RESOURCE_PLANE_RECORDS_DIR: records }));
    expect(s.ready.trace).toBe(trace);
    s.child.kill('SIGTERM');
    await s.exited;
    expect(readFileSync(trace, 'utf8')).toContain('"session_end"');
  });
});
