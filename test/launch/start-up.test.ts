// A light start-up (issue 25): serve loads no schema compiler (its apps declare no schema), imports
// node:http only through require (an ES import builds node:http's facade, which loads Node's bundled
// undici), and the confined image takes its compiled modules from the package's compile cache,
// which only a directory no one else can write may be, and which the confined image never writes.
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import * as nodeModule from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { COMPILE_CACHE_DIR, compileCacheOutcome, compileCacheProblem, useCompileCache } from '../../src/cli/compile-cache.js';
import { landlockAbi } from '../../src/addon/landlock.js';
import { defer } from '../helpers/cleanup.js';
import { startServe } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';
import { capsuleDir } from '../helpers/capsule.js';

const ABI = landlockAbi().abi;
const RECORDER = fileURLToPath(new URL('../helpers/load-recorder.mjs', import.meta.url));
const HAS_SYNC_HOOKS = typeof (nodeModule as { registerHooks?: unknown }).registerHooks === 'function';
const HAS_COMPILE_CACHE = typeof (nodeModule as { enableCompileCache?: unknown }).enableCompileCache === 'function';
const ROOT = typeof process.geteuid === 'function' && process.geteuid() === 0;

describe('compileCacheProblem', () => {
  it('accepts a directory of this user that no one else can write, with its version entries', () => {
    const dir = join(scratch(), 'cache');
    mkdirSync(join(dir, 'v22-x64-0'), { recursive: true, mode: 0o755 });
    chmodSync(dir, 0o755);
    expect(compileCacheProblem(dir)).toBeNull();
  });

  it('is not thrown by entries that vanish while it looks: another process writing the cache meanwhile', async () => {
    // Node saves a compiled module as a temporary file renamed into place, and makes a version
    // directory on first use: a command started while another saves used to die of ENOENT (an
    // lstat of a name readdir had just returned). Count-based: a fixed number of checks while a
    // writer churns, none may throw, and each sees only this user's files.
    const dir = join(scratch(), 'cache');
    mkdirSync(join(dir, 'v22-x64-0'), { recursive: true, mode: 0o755 });
    chmodSync(dir, 0o755);
    const writer = spawn(
      process.execPath,
      [
        '-e',
        `const fs = require('fs'), d = process.argv[1];
         process.stdout.write('ready\\n');
         for (let i = 0; ; i++) {
           const v = d + '/v' + (i % 3) + '-x64-0';
           fs.mkdirSync(v, { recursive: true, mode: 0o755 });
           fs.writeFileSync(v + '/f' + (i % 5) + '.tmp' + i, 'x', { mode: 0o644 });
           fs.renameSync(v + '/f' + (i % 5) + '.tmp' + i, v + '/f' + (i % 5));
           if (i % 7 === 0) fs.rmSync(v, { recursive: true, force: true });
         }`,
        dir,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    defer(() => {
      writer.kill('SIGKILL');
    });
    await new Promise((r) => writer.stdout!.once('data', r));
    for (let i = 0; i < 2_000; i++) expect(compileCacheProblem(dir)).toBeNull();
  });

  it('refuses a missing directory, a symbolic link and a file', () => {
    const base = scratch();
    expect(compileCacheProblem(join(base, 'none'))).toMatch(/cannot be read \(ENOENT\)/);
    mkdirSync(join(base, 'real'), { mode: 0o755 });
    symlinkSync(join(base, 'real'), join(base, 'link'));
    expect(compileCacheProblem(join(base, 'link'))).toMatch(/is a symbolic link/);
    writeFileSync(join(base, 'file'), 'x');
    expect(compileCacheProblem(join(base, 'file'))).toMatch(/is not a directory/);
  });

  it('refuses a directory, or a version entry in it, that group or others may write', () => {
    const dir = join(scratch(), 'cache');
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o775);
    expect(compileCacheProblem(dir)).toMatch(/writable by group or others \(mode 775\)/);
    chmodSync(dir, 0o755);
    mkdirSync(join(dir, 'v22-x64-0'));
    chmodSync(join(dir, 'v22-x64-0'), 0o757);
    expect(compileCacheProblem(dir)).toMatch(/v22-x64-0 is writable by group or others/);
    chmodSync(join(dir, 'v22-x64-0'), 0o755);
    symlinkSync('/tmp', join(dir, 'v24-x64-0'));
    expect(compileCacheProblem(dir)).toMatch(/v24-x64-0 is a symbolic link/);
  });

  it('refuses the cache for one file in it that is a link, writable by others, or not a regular file', () => {
    const fresh = () => {
      const dir = join(scratch(), 'cache');
      mkdirSync(join(dir, 'v22-x64-0'), { recursive: true, mode: 0o755 });
      chmodSync(dir, 0o755);
      chmodSync(join(dir, 'v22-x64-0'), 0o755);
      writeFileSync(join(dir, 'v22-x64-0', '0a1b2c3d'), 'code', { mode: 0o600 });
      return dir;
    };
    expect(compileCacheProblem(fresh())).toBeNull();
    // A planted link to a world-writable file (anyone could put code there).
    let dir = fresh();
    const planted = join(scratch(), 'planted');
    writeFileSync(planted, 'their code');
    chmodSync(planted, 0o666);
    symlinkSync(planted, join(dir, 'v22-x64-0', '9f8e7d6c'));
    expect(compileCacheProblem(dir)).toMatch(/v22-x64-0\/9f8e7d6c is a symbolic link/);
    // A file others may write, in place.
    dir = fresh();
    writeFileSync(join(dir, 'v22-x64-0', '9f8e7d6c'), 'code');
    chmodSync(join(dir, 'v22-x64-0', '9f8e7d6c'), 0o646);
    expect(compileCacheProblem(dir)).toMatch(/v22-x64-0\/9f8e7d6c is writable by group or others \(mode 646\)/);
    dir = fresh();
    mkdirSync(join(dir, 'v22-x64-0', 'nested'), { mode: 0o755 });
    expect(compileCacheProblem(dir)).toMatch(/v22-x64-0\/nested is not a regular file/);
    // useCompileCache then leaves the cache off, and says why loudly enough for serve's log.
    expect(useCompileCache(dir)).toMatch(/nested is not a regular file: the compile cache is off/);
    expect(compileCacheOutcome()).toMatchObject({ used: false, level: 'warn' });
  });

  it.skipIf(!ROOT)('refuses the cache for one file another user owns', () => {
    const dir = join(scratch(), 'cache');
    mkdirSync(join(dir, 'v22-x64-0'), { recursive: true, mode: 0o755 });
    chmodSync(dir, 0o755);
    chmodSync(join(dir, 'v22-x64-0'), 0o755);
    writeFileSync(join(dir, 'v22-x64-0', '0a1b2c3d'), 'code', { mode: 0o644 });
    chownSync(join(dir, 'v22-x64-0', '0a1b2c3d'), 65534, 65534);
    expect(compileCacheProblem(dir)).toMatch(/0a1b2c3d is owned by uid 65534/);
  });

  it.skipIf(!ROOT)('refuses a directory another user owns', () => {
    const dir = join(scratch(), 'cache');
    mkdirSync(dir, { mode: 0o755 });
    chownSync(dir, 65534, 65534);
    expect(compileCacheProblem(dir)).toMatch(/is owned by uid 65534/);
    // Root's own is trusted by any user, as root's install of the package is.
    expect(compileCacheProblem(dir, 65534)).toBeNull();
  });
});

describe("serve's log about the compile cache", () => {
  it.skipIf(!HAS_COMPILE_CACHE)("says that a caller's NODE_COMPILE_CACHE is used unchecked", async () => {
    const callers = join(scratch(), 'callers-cache');
    const s = await startServe(['--workdir', capsuleDir(), '--no-landlock', '--trace', join(scratch(), 'trace.jsonl')], { NODE_COMPILE_CACHE: callers });
    defer(async () => {
      s.child.kill('SIGTERM');
      await s.exited;
    });
    const line = s
      .stderr()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { level: number; msg: string; compile_cache?: string })
      .find((l) => l.msg.startsWith('compile cache:'));
    expect(line).toMatchObject({
      level: 30,
      msg: `compile cache: NODE_COMPILE_CACHE is set: the caller's cache (${callers}) is used as Node opened it, unchecked`,
    });
  });
});

describe('serve start-up', () => {
  it.skipIf(!HAS_SYNC_HOOKS)('loads no schema compiler, and node:http only through require', async () => {
    const record = join(scratch(), 'loads.txt');
    const s = await startServe(['--workdir', capsuleDir(), '--no-landlock', '--trace', join(scratch(), 'trace.jsonl')], {
      NODE_OPTIONS: `--import ${RECORDER}`,
      LOAD_RECORDER_FILE: record,
    });
    defer(async () => {
      s.child.kill('SIGTERM');
      await s.exited;
    });
    const loads = readFileSync(record, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split('\t') as [string, string]);
    // The recorder sees Fastify's own requires (so the check below can see Ajv if it came)...
    expect(loads.some(([url, how]) => url.endsWith('/node_modules/fastify/lib/route.js') && how === 'require')).toBe(true);
    // ...and no schema compiler came.
    expect(loads.filter(([url]) => /\/node_modules\/(ajv|@fastify\/ajv-compiler|@fastify\/fast-json-stringify-compiler)\//.test(url))).toEqual([]);
    expect(loads.filter(([url, how]) => url === 'node:http' && how === 'import')).toEqual([]);
  });

  it.skipIf(!HAS_COMPILE_CACHE || ABI === 0)('the confined image reads its modules from the compile cache and writes none', async () => {
    const version = readdirSync(COMPILE_CACHE_DIR).find((name) => name.startsWith(`v${process.versions.node}-`));
    // `npm ci` and `npm run build` fill it for the Node that runs them.
    expect(version, `no compile cache for Node ${process.versions.node} in ${COMPILE_CACHE_DIR}: run npm run build with it`).toBeDefined();
    const entries = join(COMPILE_CACHE_DIR, version!);
    const before = readdirSync(entries)
      .map((name) => `${name} ${statSync(join(entries, name)).mtimeMs}`)
      .sort();
    const s = await startServe(['--workdir', capsuleDir(), '--trace', join(scratch(), 'trace.jsonl')], { NODE_DEBUG_NATIVE: 'COMPILE_CACHE' });
    const res = await fetch(`${s.ready.url}/resources/files/a.txt`);
    expect(res.status).toBe(200);
    s.child.kill('SIGTERM');
    await s.exited;
    // Both images used it: the first stage for the command, the confined one for Fastify.
    // (Node 22 writes `cache for file:///…`, Node 24 `cache for ESM file:///…`.)
    expect(s.stderr()).toMatch(/cache for (ESM )?file:\/\/\S+\/dist\/cli\/program\.js was accepted/);
    expect(s.stderr()).toMatch(/cache for (CommonJS )?\S+\/node_modules\/fastify\/fastify\.js was accepted/);
    expect(s.stderr()).toMatch(/"landlock_abi"/);
    const after = readdirSync(entries)
      .map((name) => `${name} ${statSync(join(entries, name)).mtimeMs}`)
      .sort();
    expect(after).toEqual(before);
    expect(existsSync(COMPILE_CACHE_DIR)).toBe(true);
  });
});
