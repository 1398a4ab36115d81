// Every command in the README's first two sections (Quick start, The demo) runs as written, in a
// fresh clone, from a non-interactive shell (`bash -c`: no job control, no terminal, stdin closed),
// as a new user's first minutes would (issue 40). The clone is the checkout's files as git knows
// them (tracked and new, nothing ignored), copied into a temp directory, with what `npm ci` leaves
// beside them: node_modules, dist/ and the compile cache, linked from this checkout (which ran
// `npm ci`; running it again here would cost a minute and the registry). So a `npm ci` line is the
// one command taken as already run; the test says so. The records directory is in the temp
// directory too, so nothing is written anywhere else.
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');

/** The first two `## ` sections, each with its ```sh blocks. */
function firstTwoSections(): Array<{ title: string; blocks: string[] }> {
  const parts = README.split(/^## /m).slice(1, 3);
  return parts.map((part) => ({
    title: part.slice(0, part.indexOf('\n')),
    blocks: [...part.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!),
  }));
}

let base: string;
let clone: string;
let env: NodeJS.ProcessEnv;

beforeAll(() => {
  base = mkdtempSync(join(tmpdir(), 'rp-readme-commands-'));
  clone = join(base, 'capsule-resource-plane');
  mkdirSync(clone);
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: ROOT, encoding: 'utf8' })
    .split('\0')
    .filter((f) => f !== '' && existsSync(join(ROOT, f)));
  for (const f of files) {
    mkdirSync(dirname(join(clone, f)), { recursive: true });
    cpSync(join(ROOT, f), join(clone, f));
  }
  for (const built of ['node_modules', 'dist', '.compile-cache']) {
    if (existsSync(join(ROOT, built))) symlinkSync(join(ROOT, built), join(clone, built));
  }
  // The node running the suite first on PATH, as the README's reader has a Node 22 `node`.
  env = {
    ...process.env,
    PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}`,
    RESOURCE_PLANE_RECORDS_DIR: join(base, 'records'),
  };
  delete env.npm_config_loglevel;
  // The commands run as a reader runs them: without `npm run test:asan`'s sanitizer runtime, which
  // a preloaded curl hangs under, and with the committed prebuild rather than the ASan build.
  for (const name of ['LD_PRELOAD', 'ASAN_OPTIONS', 'UBSAN_OPTIONS', 'RESOURCE_PLANE_ADDON', 'RESOURCE_PLANE_ASAN']) delete env[name];
}, 60_000);
afterAll(() => rmSync(base, { recursive: true, force: true }));

/** Runs a block with bash, non-interactively; resolves with its status and output. */
function runBlock(script: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', script], { cwd: clone, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

describe("the README's first two sections", () => {
  const sections = firstTwoSections();

  it('are the Quick start and the demo, and hold the commands this test runs', () => {
    expect(sections.map((s) => s.title)).toEqual(['Quick start', 'The demo']);
    expect(sections[0]!.blocks).toHaveLength(2);
    expect(sections[1]!.blocks).toHaveLength(1);
    expect(sections[0]!.blocks[0]!.trim()).toMatch(/^npm ci\b[^\n]*$/);
  });

  it('Quick start: the serve session runs as a script and leaves no server behind', async () => {
    process.stderr.write("readme-commands: 'npm ci' is taken as run: the clone links this checkout's node_modules and dist/\n");
    const r = await runBlock(sections[0]!.blocks[1]!);
    // The last line is `wait "$SERVER"`, whose status is the server's: 0, a clean stop on SIGTERM.
    expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
    const ready = JSON.parse(readFileSync(join(clone, 'serve.out'), 'utf8').trim().split('\n')[0]!) as {
      event: string;
      advertised_url: string;
      operator_url: string;
      trace: string;
    };
    expect(ready.event).toBe('listening');
    expect(ready.advertised_url).toMatch(/^http:\/\/localhost:\d+$/);
    expect(ready.operator_url).toBe(`unix:${join(clone, 'operator.sock')}`);
    // The listing (with the default max_bytes), the bytes, ls and get, in that order on stdout.
    expect(r.stdout).toContain('"max_bytes":10485760');
    expect(r.stdout).toContain('the report\n');
    expect(r.stdout).toMatch(/report\.md/);
    expect(readFileSync(join(clone, 'copy.md'), 'utf8')).toBe('the report\n');
    expect(r.stderr).toMatch(/saved 11 bytes to .*copy\.md \(sha256 [0-9a-f]{64}, etag verified\)/);
    // The access log went to serve.log, not into curl's output.
    expect(r.stdout).not.toContain('request completed');
    expect(readFileSync(join(clone, 'serve.log'), 'utf8')).toContain('request completed');
    // `kill "$SERVER"; wait "$SERVER"`: the server stopped cleanly, its trace ends with session_end.
    const trace = readFileSync(ready.trace, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event_type: string });
    expect(trace.at(-1)!.event_type).toBe('session_end');
    expect(existsSync(join(clone, 'operator.sock'))).toBe(false);
  }, 120_000);

  it('The demo: npm start hands a file over and stops on SIGINT, as Ctrl-C does', async () => {
    const script = sections[1]!.blocks[0]!;
    expect(script.trim()).toMatch(/^npm start\b/);
    // detached: its own process group, which SIGINT reaches as a terminal's Ctrl-C would.
    const child = spawn('bash', ['-c', script], { cwd: clone, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let out = '';
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<string>((resolve) => child.on('close', (code, signal) => resolve(`${code ?? signal}`)));
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('Ctrl-C to stop.')) resolve();
      });
      void exited.then((code) => reject(new Error(`npm start exited ${code} early: ${out}`)));
    });
    expect(out).toMatch(/minted handle [0-9a-f]{16} for audience reader@localhost:\d+/);
    expect(out).toMatch(/MATCH/);
    process.kill(-child.pid!, 'SIGINT');
    // It ends: npm passes the interrupt on and ends as the signal asks, as after a Ctrl-C.
    expect(['0', '130', 'SIGINT']).toContain(await exited);
  }, 120_000);

  it('the picture is what docs/planes.mjs draws', async () => {
    const { planesSvg } = (await import(pathToFileURL(join(ROOT, 'docs/planes.mjs')).href)) as { planesSvg: () => string };
    expect(readFileSync(join(ROOT, 'docs/planes.svg'), 'utf8')).toBe(planesSvg());
    expect(README).toContain("![The operator plane and the peer plane of one session's server, and the trace they both write](docs/planes.svg)");
  });
});
