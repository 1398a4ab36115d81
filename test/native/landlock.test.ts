// The addon's Landlock calls (native/landlock.cc), each exercised in a child process of its own:
// a domain cannot be left, so this process must never enter one. Among them, the kernel fact the
// whole design rests on: restricting the main thread in place leaves libuv's pool threads, which
// already exist and do every asynchronous open, outside the domain.
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ancestorNodeModules, elfInterpreter, planConfinement, preloadFiles } from '../../src/launch/confine-plan.js';
import { parseManifest } from '../../src/manifest/model.js';
import * as native from '../../src/addon/landlock.js';
import { scratch } from '../helpers/tree.js';

const NATIVE_JS = fileURLToPath(new URL('../../dist/addon/landlock.js', import.meta.url));
const ABI = native.landlockAbi().abi;

/** Runs an ES module body in a fresh node with `native` (the built addon wrapper) imported; returns its one JSON line. */
function inChild(body: string, args: string[] = []): Record<string, unknown> {
  const source = `
    import * as native from ${JSON.stringify(NATIVE_JS)};
    import { readFileSync } from 'node:fs';
    import { readFile } from 'node:fs/promises';
    const args = process.argv.slice(1);
    const code = (f) => { try { f(); return 'ok'; } catch (e) { return e.code; } };
    const out = {};
    ${body}
    process.stdout.write(JSON.stringify(out) + '\\n');`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', source, ...args], { encoding: 'utf8', timeout: 20_000 });
  if (r.status !== 0) throw new Error(`child failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Record<string, unknown>;
}

const RULE = (path: string, extra: Partial<native.LandlockPathRule> = {}): native.LandlockPathRule => ({
  path,
  access: ['read_file', 'read_dir'],
  directory: true,
  optional: false,
  ...extra,
});
const PLAN = (paths: native.LandlockPathRule[]): native.LandlockPlan => ({ paths, bindPorts: [], restrictConnect: true, connectPorts: [] });

describe('the Landlock ABI', () => {
  it('is detected, and the code table is the one the TS side knows', () => {
    const abi = native.landlockAbi();
    if (abi.ok) expect(abi.abi).toBeGreaterThanOrEqual(1);
    else expect(['LANDLOCK_UNSUPPORTED', 'LANDLOCK_DISABLED']).toContain(abi.code);
    expect([...native.LANDLOCK_CODES]).toEqual([
      'LANDLOCK_UNSUPPORTED',
      'LANDLOCK_DISABLED',
      'NOT_MAIN_THREAD',
      'RULE_PATH_UNAVAILABLE',
      'RULESET_FAILED',
      'NO_NEW_PRIVS_FAILED',
      'RESTRICT_FAILED',
      'EXEC_FAILED',
    ] satisfies native.LandlockCode[]);
  });

  it('refuses malformed plans with a TypeError before touching the kernel', () => {
    expect(() => native.landlockRestrictSelf(PLAN([RULE('relative/path')]))).toThrow(/absolute/);
    expect(() => native.landlockRestrictSelf(PLAN([RULE('/tmp', { access: ['read_everything' as native.LandlockFsRight] })]))).toThrow(
      /unknown filesystem right/,
    );
    expect(() => native.landlockRestrictSelf({ ...PLAN([]), bindPorts: [70000] })).toThrow(/ports/);
    expect(() => native.landlockRestrictSelf({ ...PLAN([]), restrictConnect: 'yes' as unknown as boolean })).toThrow(/restrictConnect/);
    expect(() => native.replaceProcessImage('/bin/true', ['a\0b'], [])).toThrow(/NUL/);
  });
});

describe.skipIf(ABI === 0)('restricting in a child process', () => {
  it('confines the calling thread, and leaves the pool threads that already existed outside: why serve re-executes', () => {
    const inside = scratch(['in.txt: in']);
    const outside = scratch(['out.txt: out']);
    const out = inChild(
      `
      await readFile(args[1]);   // the pool is running (the ESM loader started it; this makes sure)
      const r = native.landlockRestrictSelf({ paths: [{ path: args[0], access: ['read_file', 'read_dir'], directory: true, optional: false }], bindPorts: [], restrictConnect: true, connectPorts: [] });
      out.ok = r.ok; out.abi = r.abi; out.handledFs = r.handledFs;
      out.mainInside = code(() => readFileSync(args[0] + '/in.txt'));
      out.mainOutside = code(() => readFileSync(args[1]));
      out.poolOutside = await readFile(args[1]).then(() => 'ok', (e) => e.code);`,
      [inside, join(outside, 'out.txt')],
    );
    expect(out).toMatchObject({ ok: true, abi: ABI, mainInside: 'ok', mainOutside: 'EACCES' });
    expect(out.handledFs).toEqual(expect.arrayContaining(['read_file', 'write_file', 'execute', 'make_reg']));
    // The kernel's rule, shown: a thread that existed before the domain is not in it.
    expect(out.poolOutside).toBe('ok');
  });

  it('restricts nothing when a required rule cannot be opened, and skips an optional one', () => {
    const dir = scratch(['real/f: f', 'link -> real']);
    const outside = scratch(['o: o']);
    const out = inChild(
      `
      const missing = native.landlockRestrictSelf({ paths: [{ path: args[0] + '/nope', access: ['read_file'], directory: true, optional: false }], bindPorts: [], restrictConnect: true, connectPorts: [] });
      out.missing = [missing.ok, missing.code];
      // A symlink in a rule's path is refused: a planted link must never aim a rule elsewhere.
      const linked = native.landlockRestrictSelf({ paths: [{ path: args[0] + '/link', access: ['read_file'], directory: true, optional: false }], bindPorts: [], restrictConnect: true, connectPorts: [] });
      out.linked = [linked.ok, linked.code, linked.errno];
      out.stillFree = code(() => readFileSync(args[1]));
      const skipped = native.landlockRestrictSelf({ paths: [
        { path: args[0] + '/link', access: ['read_file', 'write_file', 'make_reg'], directory: true, optional: true },
        { path: args[0] + '/real', access: ['read_file', 'read_dir'], directory: true, optional: false },
      ], bindPorts: [], restrictConnect: true, connectPorts: [] });
      out.skipped = [skipped.ok, skipped.skipped.map((s) => s.index)];
      out.real = code(() => readFileSync(args[0] + '/real/f'));
      out.outside = code(() => readFileSync(args[1]));`,
      [dir, join(outside, 'o')],
    );
    expect(out.missing).toEqual([false, 'RULE_PATH_UNAVAILABLE']);
    expect(out.linked).toEqual([false, 'RULE_PATH_UNAVAILABLE', 40 /* ELOOP */]);
    expect(out.stillFree).toBe('ok');
    expect(out.skipped).toEqual([true, [0]]);
    expect(out).toMatchObject({ real: 'ok', outside: 'EACCES' });
  });

  it('answers NOT_MAIN_THREAD from a worker thread, which would confine only itself', () => {
    const free = scratch(['f: f']);
    const out = inChild(
      `
      const { Worker } = await import('node:worker_threads');
      // (The worker inherits --input-type=module: its source is an ES module.)
      const w = new Worker(\`
        const { parentPort, workerData } = await import('node:worker_threads');
        const native = await import(workerData);
        const r = native.landlockRestrictSelf({ paths: [], bindPorts: [], restrictConnect: false, connectPorts: [] });
        const e = native.replaceProcessImage('/bin/true', ['true'], []);
        parentPort.postMessage([r.code, e.code]);\`, { eval: true, workerData: ${JSON.stringify(NATIVE_JS)} });
      out.codes = await new Promise((resolve) => w.once('message', resolve));
      out.mainStillFree = code(() => readFileSync(args[0]));`,
      [join(free, 'f')],
    );
    expect(out.codes).toEqual(['NOT_MAIN_THREAD', 'NOT_MAIN_THREAD']);
    expect(out.mainStillFree).toBe('ok');
  });

  it('after a restrict and an execve from the main thread, every thread of the new image is inside', () => {
    const inside = scratch();
    const outside = scratch(['secret: s']);
    // The new image is a bare node reading from a pool thread and the main thread; it can start
    // only because the plan grants what node needs (the same planner serve uses).
    const plan = planConfinement({ workdir: inside, tracePath: join(inside, 'unused'), manifest: parseManifest('name: a\nversion: "1"\n'), listenPort: 0 });
    const out = inChild(
      `
      const plan = JSON.parse(args[0]);
      const r = native.landlockRestrictSelf({ paths: plan.rules.filter((p) => p.role !== 'write').map(({ path, access, directory, optional }) => ({ path, access, directory, optional })), bindPorts: [], restrictConnect: true, connectPorts: [] });
      if (!r.ok) { out.failed = r; } else {
        const script = "const fs=require('fs');fs.readFile(process.argv[1],(e)=>{let m;try{fs.readFileSync(process.argv[1]);m='ok'}catch(x){m=x.code}process.stdout.write(JSON.stringify({pool:e?e.code:'ok',main:m})+'\\\\n')})";
        const e = native.replaceProcessImage(process.execPath, [process.execPath, '-e', script, args[1]], []);
        out.failed = e;
      }`,
      [JSON.stringify(plan), join(outside, 'secret')],
    );
    expect(out).toEqual({ pool: 'EACCES', main: 'EACCES' });
  });
});

describe('the plan', () => {
  const manifest = (extra: string) => parseManifest(`name: a\nversion: "1"\n${extra}`);
  const base = { workdir: '/nonexistent-workdir', tracePath: '/nonexistent-trace/t.jsonl', listenPort: 8080, mappedFiles: [] };

  it('connects only to the ports of the allow lists the server connects through, and to none without them', () => {
    expect(planConfinement({ ...base, manifest: manifest('') }).connectPorts).toEqual([]);
    const fetch = manifest(
      'capabilities:\n  peer_fetch:\n    allow:\n      - localhost:9001\n      - https://peer.example\n  network:\n    allow:\n      - localhost:7000\n',
    );
    // network.allow matters only with a peer plane (share-file reads the recipient's card).
    expect(planConfinement({ ...base, manifest: fetch }).connectPorts).toEqual([443, 9001]);
    const both = manifest('exports:\n  peer_files:\n    root: out/\ncapabilities:\n  network:\n    allow:\n      - localhost:7000\n');
    expect(planConfinement({ ...base, manifest: both })).toMatchObject({ connectPorts: [7000], bindPorts: [8080] });
    const bare = planConfinement({ ...base, manifest: manifest('capabilities:\n  peer_fetch:\n    allow:\n      - localhost\n') });
    expect(bare.connectPorts).toBeNull();
    expect(bare.notes[0]).toMatch(/'localhost' names no port/);
  });

  it("writes only the trace file and, when it may fetch, peer-in (optional: it lies in the capsule's workdir)", () => {
    const writes = (m: string) => planConfinement({ ...base, manifest: manifest(m) }).rules.filter((r) => r.role === 'write');
    expect(writes('')).toEqual([{ path: base.tracePath, access: ['write_file', 'truncate'], directory: false, optional: false, role: 'write' }]);
    expect(writes('capabilities:\n  peer_fetch:\n    allow:\n      - localhost:1\n').map((r) => [r.path, r.optional])).toEqual([
      [base.tracePath, false],
      ['/nonexistent-workdir/peer-in', true],
    ]);
  });

  it('executes only node and its ELF interpreter', () => {
    const plan = planConfinement({ ...base, manifest: manifest('') });
    const interp = elfInterpreter(process.execPath);
    expect(plan.rules.filter((r) => r.role === 'execute').length).toBe(interp === null ? 1 : 2);
    expect(plan.rules.every((r) => r.role === 'execute' || !r.access.includes('execute'))).toBe(true);
  });

  it('reads the node_modules its dependencies are installed in, when it is itself an installed package', () => {
    const project = scratch(['node_modules/capsule-resource-plane/node_modules/own/index.js: ', 'node_modules/commander/index.js: ']);
    const installed = join(project, 'node_modules/capsule-resource-plane');
    expect(ancestorNodeModules(installed)).toContain(join(project, 'node_modules'));
    expect(ancestorNodeModules(installed)).not.toContain(join(installed, 'node_modules'));
    const plan = planConfinement({ ...base, manifest: manifest(''), packageRoot: installed });
    expect(plan.rules.filter((r) => r.role === 'read').map((r) => r.path)).toEqual(expect.arrayContaining([installed, join(project, 'node_modules')]));
  });

  it("reads the files node's own command line preloads: the re-executed image loads them again", () => {
    expect(
      preloadFiles(
        ['--import', '/a/pre.mjs', '--require=./b.cjs', '--enable-source-maps', '-r', 'some-package'],
        '--import file:///c/d.mjs --max-old-space-size=100',
      ),
    ).toEqual(['/a/pre.mjs', resolve('b.cjs'), '/c/d.mjs']);
    const dir = scratch(['pre.mjs: ']);
    const plan = planConfinement({ ...base, manifest: manifest(''), execArgv: ['--import', join(dir, 'pre.mjs')] });
    expect(plan.rules).toContainEqual({ path: join(dir, 'pre.mjs'), access: ['read_file'], directory: false, optional: false, role: 'read' });
  });

  it('reads no shared directory just because a non-library file is mapped from it', () => {
    const dir = scratch(['data.bin: x', 'libx.so.1: x']);
    const plan = planConfinement({ ...base, manifest: manifest(''), mappedFiles: [join(dir, 'data.bin')] });
    expect(plan.rules.some((r) => r.path === dir)).toBe(false);
    const withLib = planConfinement({ ...base, manifest: manifest(''), mappedFiles: [join(dir, 'libx.so.1')] });
    expect(withLib.rules.some((r) => r.path === dir)).toBe(true);
  });
});
