// A launch that fails leaves nothing (issue 25), whichever step fails, checked on real starts of
// `serve` with the records directory pointed at an empty temp directory and a workdir that does
// not exist yet: the port taken (by the peer or the operator listener, after the other was
// bound), the execve into the Landlock domain refused (E2BIG: a large environment under a small
// stack limit, after confinement), and a Landlock domain the kernel refuses to stack (the launch
// then serves unconfined as the one session it planned, never a second one). Plus a stale unix
// operator socket after kill -KILL, which the next start replaces, and a live one, which it refuses.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Confinement } from '../../src/session/confinement.js';
import { landlockAbi } from '../../src/addon/landlock.js';
import { defer } from '../helpers/cleanup.js';
import { CLI, runCliAsync, startServe } from '../helpers/cli.js';
import { readTrace } from '../helpers/http.js';
import { scratch } from '../helpers/tree.js';
import { CAP_YAML, unmadeCapsule } from '../helpers/capsule.js';

const ABI = landlockAbi().abi;

async function takenPort(): Promise<number> {
  const server = createServer((s) => s.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  defer(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as { port: number }).port;
}

function run(args: string[], env: NodeJS.ProcessEnv, shell?: string): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = shell
      ? spawn('sh', ['-c', `${shell}; exec "$@"`, 'launcher', process.execPath, CLI, ...args], { env })
      : spawn(process.execPath, [CLI, ...args], { env });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout.resume();
    child.on('close', (status) => resolve({ status, stderr }));
  });
}

describe('a failed launch leaves nothing', () => {
  it('the operator port taken after the peer listener was bound', async () => {
    const port = await takenPort();
    const { records, manifest, workdir } = unmadeCapsule();
    const r = await runCliAsync(['serve', '--workdir', workdir, '--manifest', manifest, '--operator-listen', `127.0.0.1:${port}`], {
      RESOURCE_PLANE_RECORDS_DIR: records,
    });
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toContain('EADDRINUSE');
    expect(readdirSync(records)).toEqual([]);
    expect(existsSync(join(workdir, '..'))).toBe(false);
  });

  it('a unix operator socket bound before the peer port failed is removed', async () => {
    const port = await takenPort();
    const { records, manifest, workdir } = unmadeCapsule();
    const dir = scratch();
    const sock = join(dir, 'op.sock');
    // The peer port is taken: the launch fails at its first bind, before the operator socket exists.
    const r = await runCliAsync(['serve', '--workdir', workdir, '--manifest', manifest, '--listen', `127.0.0.1:${port}`, '--operator-listen', `unix:${sock}`], {
      RESOURCE_PLANE_RECORDS_DIR: records,
    });
    expect(r.status, r.stderr).toBe(1);
    expect(existsSync(sock)).toBe(false);
    expect(readdirSync(records)).toEqual([]);
  });

  it.skipIf(ABI === 0)('an execve refused after confinement fails closed: an error, no second session, nothing kept', async () => {
    const { records, manifest, workdir } = unmadeCapsule();
    // Under a 256 KiB stack limit execve takes 128 KiB of arguments and environment: the first
    // exec fits, the re-exec (the same, plus the handoff) does not.
    const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, RESOURCE_PLANE_RECORDS_DIR: records };
    const args = ['serve', '--workdir', workdir, '--manifest', manifest];
    const used =
      [process.execPath, CLI, ...args, 'sh', '-c'].reduce((n, a) => n + a.length + 1, 0) +
      Object.entries(env).reduce((n, [k, v]) => n + k.length + (v ?? '').length + 2, 0) +
      300;
    const room = 128 * 1024 - used - 700;
    env.BIG_A = 'x'.repeat(Math.floor(room / 2));
    env.BIG_B = 'x'.repeat(Math.floor(room / 2) - 20);
    const r = await run(args, env, 'ulimit -s 256');
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/re-exec into the Landlock domain failed \(EXEC_FAILED: .*Argument list too long\); nothing was served/);
    expect(readdirSync(records)).toEqual([]);
    expect(existsSync(join(workdir, '..'))).toBe(false);
  });

  it.skipIf(ABI === 0)('a domain the kernel refuses to stack: served unconfined as the one session it planned', async () => {
    const { records, manifest, workdir } = unmadeCapsule();
    // 16 nested domains (the kernel's limit), each handling only make_block: restrict_self then
    // fails with E2BIG inside serve.
    const stack = `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure): _fields_ = [('fs', ctypes.c_uint64)]
libc.prctl(38, 1, 0, 0, 0)
for _ in range(16):
    fd = libc.syscall(444, ctypes.byref(Attr(1 << 11)), ctypes.c_size_t(8), ctypes.c_uint32(0))
    assert fd >= 0 and libc.syscall(446, fd, 0) == 0, ctypes.get_errno()
    os.close(fd)
os.execv(sys.argv[1], sys.argv[1:])`;
    const child = spawn('python3', ['-c', stack, process.execPath, CLI, 'serve', '--workdir', workdir, '--manifest', manifest], {
      env: { ...process.env, RESOURCE_PLANE_RECORDS_DIR: records },
    });
    defer(() => {
      if (child.exitCode === null) child.kill('SIGTERM');
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const ready = await new Promise<{ trace: string; session_id: string }>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(JSON.parse(out.slice(0, out.indexOf('\n'))));
      });
      child.once('exit', (code) => reject(new Error(`exited ${code}: ${err}`)));
    });
    const start = readTrace(ready.trace)[0]!;
    expect((start.confinement as Confinement).applied).toBe(false);
    expect((start.confinement as Confinement).reason).toContain('RESTRICT_FAILED');
    // One records directory, one session in it: the one serving.
    const [digest, ...others] = readdirSync(records);
    expect(others).toEqual([]);
    expect(readdirSync(join(records, digest!))).toEqual([ready.session_id]);
  });
});

describe('a stale unix operator socket', () => {
  function privateDir(): string {
    const dir = join(scratch(), 'run');
    mkdirSync(dir, { mode: 0o700 });
    return dir;
  }

  for (const [name, extra] of [
    ['confined', []],
    ['with --no-landlock', ['--no-landlock']],
  ] as const) {
    it(`${name}: is replaced after kill -KILL, and the log says so`, async () => {
      const workdir = scratch(['out/a.txt: a']);
      writeFileSync(join(workdir, 'murmur.yaml'), CAP_YAML);
      const sock = join(privateDir(), 'op.sock');
      const records = scratch();
      const first = await startServe(['--workdir', workdir, '--operator-listen', `unix:${sock}`, ...extra], { RESOURCE_PLANE_RECORDS_DIR: records });
      first.child.kill('SIGKILL');
      await first.exited;
      expect(statSync(sock).isSocket()).toBe(true);
      const second = await startServe(['--workdir', workdir, '--operator-listen', `unix:${sock}`, ...extra], { RESOURCE_PLANE_RECORDS_DIR: records });
      defer(async () => {
        second.child.kill('SIGTERM');
        await second.exited;
      });
      expect(second.stderr()).toContain('removed a stale operator socket');
      expect(second.stderr()).toContain(sock);
      expect((second.ready as Record<string, unknown>).operator_url).toBe(`unix:${sock}`);
      // And it serves there.
      const r = await runCliAsync(['ls', `unix:${sock}`]);
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toContain('a.txt');
    });
  }

  it('a live one is still an error, naming the process that holds it', async () => {
    const workdir = scratch(['out/a.txt: a']);
    writeFileSync(join(workdir, 'murmur.yaml'), CAP_YAML);
    const sock = join(privateDir(), 'op.sock');
    const records = scratch();
    const first = await startServe(['--workdir', workdir, '--operator-listen', `unix:${sock}`], { RESOURCE_PLANE_RECORDS_DIR: records });
    defer(async () => {
      first.child.kill('SIGTERM');
      await first.exited;
    });
    const r = await runCliAsync(['serve', '--workdir', workdir, '--operator-listen', `unix:${sock}`], { RESOURCE_PLANE_RECORDS_DIR: records });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`is in use by pid ${first.child.pid}`);
  });
});
