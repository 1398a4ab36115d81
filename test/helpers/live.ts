// A live capsule, for the tests of a workdir that changes while it is served (SPEC section 10, a
// live workdir): raw GETs over TCP or a unix socket that can stall mid-body, writers in other
// processes that keep rewriting, appending or truncating a file, and mounts a test may make as
// root (a small tmpfs to fill, a loop-mounted ext4 image), each undone when the test ends.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { defer, reap } from './cleanup.js';
import { CLI, startServe } from './cli.js';
import { scratch } from './tree.js';

/** Where a server listens: a TCP port on loopback, or a unix socket's path. */
export type Target = { port: number } | { path: string };

/** The target of a ready line's `url` (http://127.0.0.1:PORT) or `operator_url` (unix:PATH). */
export function targetOf(url: string): Target {
  if (url.startsWith('unix:')) return { path: url.slice('unix:'.length) };
  return { port: Number(new URL(url).port) };
}

export function connectTo(target: Target): Socket {
  return 'port' in target ? connect({ host: '127.0.0.1', port: target.port }) : connect({ path: target.path });
}

export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  /** The body arrived whole: as many bytes as content-length promised, and the connection ended. */
  complete: boolean;
}

/**
 * GETs `path` on a fresh connection (Connection: close), reading until `pauseAt` body bytes, then
 * stops reading and runs `meanwhile`; afterwards reads on until the server ends or cuts the
 * connection. Never rejects for a cut: `complete` says whether the body arrived whole.
 */
export function stalledGet(target: Target, path: string, pauseAt = Infinity, meanwhile: () => unknown = () => undefined): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connectTo(target);
    let raw = Buffer.alloc(0);
    let head: { status: number; headers: Record<string, string> } | null = null;
    const chunks: Buffer[] = [];
    let got = 0;
    let paused = false;
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      if (!head) return reject(new Error(`no response head: ${raw.toString('latin1').slice(0, 200)}`));
      const body = Buffer.concat(chunks);
      resolve({ status: head.status, headers: head.headers, body, complete: body.length === Number(head.headers['content-length']) });
    };
    socket.on('data', (d: Buffer) => {
      if (!head) {
        raw = Buffer.concat([raw, d]);
        const end = raw.indexOf('\r\n\r\n');
        if (end < 0) return;
        const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
        const headers: Record<string, string> = {};
        for (const line of lines.slice(1)) {
          const i = line.indexOf(':');
          headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
        }
        head = { status: Number(lines[0]!.split(' ')[1]), headers };
        d = raw.subarray(end + 4);
      }
      chunks.push(d);
      got += d.length;
      if (!paused && got >= pauseAt) {
        paused = true;
        socket.pause();
        Promise.resolve()
          .then(meanwhile)
          .then(() => socket.resume(), reject);
      }
    });
    socket.on('error', finish);
    socket.on('close', finish);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  });
}

/** A script for another process (python3): the file at argv[1] is changed in a loop until killed. */
export const WRITERS = {
  /** Rewrites the whole file in place (same size, no truncation), each time with another byte. */
  inPlace: 'import os,sys\nfd=os.open(sys.argv[1],os.O_WRONLY)\nn=os.fstat(fd).st_size\ni=0\nwhile True:\n  os.pwrite(fd,bytes([65+i%26])*n,0)\n  i+=1\n',
  /** Appends a line every 2 ms. */
  append:
    'import os,sys,time\nfd=os.open(sys.argv[1],os.O_WRONLY|os.O_APPEND)\ni=0\nwhile True:\n  os.write(fd,b"log line %d of a capsule that keeps writing\\n"%i)\n  i+=1\n  time.sleep(0.002)\n',
  /**
   * Saves by rename, as most editors and agents do: version i (`v%08d\\n`, then the byte i % 251)
   * is written to argv[2] (beside the export, one path per writer) and renamed over the file. See renamedVersion.
   */
  renameOver:
    'import os,sys\nn=os.stat(sys.argv[1]).st_size\ni=0\nwhile True:\n  t=sys.argv[2]\n  with open(t,"wb") as f: f.write(b"v%08d\\n"%i+bytes([i%251])*(n-10))\n  os.rename(t,sys.argv[1])\n  i+=1\n',
  /** Truncates to zero and writes it back, as an editor that saves in place does. */
  truncateRewrite:
    'import os,sys\nfd=os.open(sys.argv[1],os.O_WRONLY)\nn=os.fstat(fd).st_size\ni=0\nwhile True:\n  os.ftruncate(fd,0)\n  os.pwrite(fd,bytes([97+i%26])*n,0)\n  i+=1\n',
} as const;

/**
 * Whether `body` is one whole version the renameOver writer wrote over a file of `size` bytes: its
 * number, or null when it is not (torn, or a mix of two inodes).
 */
export function renamedVersion(body: Buffer, size: number): number | null {
  const head = /^v(\d{8})\n/.exec(body.subarray(0, 10).toString('latin1'));
  if (!head || body.length !== size) return null;
  const i = Number(head[1]);
  const fill = i % 251;
  for (let k = 10; k < body.length; k++) if (body[k] !== fill) return null;
  return i;
}

/** Starts `script` on `path` in python3; killed when the test ends. Resolves once it runs. */
export async function startWriter(script: string, path: string, ...rest: string[]): Promise<ChildProcess> {
  const child = reap(
    spawn('python3', ['-c', `import sys\nsys.stdout.write("go\\n");sys.stdout.flush()\n${script}`, path, ...rest], { stdio: ['ignore', 'pipe', 'inherit'] }),
  );
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the writer exited (${code}) before it began`)));
  });
  return child;
}

/** Runs a command as it is; true if it exited 0. */
function ok(cmd: string, args: string[]): boolean {
  return spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
}

/**
 * Mounts a tmpfs of `size` (e.g. '256k') on `dir`, unmounted when the test ends; null (with the
 * reason) where mounting is refused (not root, no CAP_SYS_ADMIN).
 */
export function mountTmpfs(dir: string, size: string): string | null {
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0700`, 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) return `mount -t tmpfs was refused here: ${(r.stderr || r.error?.message || '').trim()}`;
  defer(() => unmount(dir));
  return null;
}

/** Unmounts `dir`, lazily if it is still busy, so no test leaves a mount behind. */
export function unmount(dir: string): void {
  if (!ok('umount', [dir])) ok('umount', ['-l', dir]);
}

/**
 * Attaches `image` to a free loop device; the device, or null with the reason. Detached when the
 * test ends.
 */
export function attachLoop(image: string): { device: string } | { refused: string } {
  const r = spawnSync('losetup', ['-f', '--show', image], { encoding: 'utf8' });
  if (r.status !== 0) return { refused: `losetup was refused here: ${(r.stderr || r.error?.message || '').trim()}` };
  const device = r.stdout.trim();
  defer(() => ok('losetup', ['-d', device]));
  return { device };
}

export const ACTIVATE = '/usr/bin/systemd-socket-activate';
const YAML = 'name: live\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 67108864\n';

/** Bytes of `size` that differ for each seed, so that two versions never agree by accident. */
export function pattern(size: number, seed: number): Buffer {
  const b = Buffer.alloc(size);
  for (let i = 0; i + 4 <= size; i += 4) b.writeUInt32LE((Math.imul(i, 2654435761) + seed) >>> 0, i);
  return b;
}

/** A workdir exporting out/ (max_bytes 64 MiB) holding `files`. */
export function liveWorkdir(files: Record<string, Buffer | string>): string {
  const dir = scratch(['out/']);
  writeFileSync(join(dir, 'murmur.yaml'), YAML);
  for (const [name, bytes] of Object.entries(files)) writeFileSync(join(dir, 'out', name), bytes);
  return dir;
}

/** The digest an answer's etag vouches for. */
export function etagOf(a: Answer): string | undefined {
  return /^"sha256:([0-9a-f]{64})"$/.exec(a.headers.etag ?? '')?.[1];
}

/** Every line of the trace parses (throws naming the first that does not); returns the events. */
export function parsedTrace(path: string): Array<Record<string, unknown>> {
  const text = readFileSync(path, 'utf8');
  if (text.length > 0 && !text.endsWith('\n')) throw new Error(`the trace does not end with a whole line: ${JSON.stringify(text.slice(-200))}`);
  return text
    .split('\n')
    .slice(0, -1)
    .map((line, i) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        throw new Error(`trace line ${i + 1} does not parse: ${JSON.stringify(line.slice(0, 200))}`);
      }
    });
}

export interface LiveServer {
  /** Where the operator plane answers. */
  target: Target;
  trace: string;
  /** Stops the server with SIGTERM; resolves with how it exited. */
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  alive(): boolean;
  stderr(): string;
}

/** The listeners a deployment uses: TCP, a unix socket, a socket handed over by systemd. */
export type Listener = 'tcp' | 'unix' | 'systemd';

/**
 * Runs the real `serve` command (a crash is a dead process, not a failed assertion inside one) on
 * `dir`, its operator plane on a listener of `kind`, its trace at `trace` (default: a fresh private
 * directory). Killed when the test ends if it still runs.
 */
export async function serveLive(kind: Listener, dir: string, opts: { trace?: string; args?: string[] } = {}): Promise<LiveServer> {
  const run = join(scratch(), 'run');
  mkdirSync(run, { mode: 0o700 });
  const trace = opts.trace ?? join(run, 'trace.jsonl');
  const args = ['--workdir', dir, '--trace', trace, ...(opts.args ?? [])];
  if (kind === 'systemd') {
    // One unix socket handed over (LISTEN_FDS): it serves both planes, and cannot be reset.
    const sock = join(run, 'peer.sock');
    const child = spawn(ACTIVATE, ['-l', sock, '--', process.execPath, CLI, 'serve', ...args], { env: process.env });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => resolve({ code, signal })),
    );
    defer(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    for (let i = 0; i < 10_000 && !stderr.includes('Listening on') && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 5));
    return {
      target: { path: sock },
      trace,
      stop: async () => (child.kill('SIGTERM'), exited),
      alive: () => child.exitCode === null && child.signalCode === null,
      stderr: () => stderr,
    };
  }
  if (kind === 'unix') args.push('--operator-listen', `unix:${join(run, 'operator.sock')}`);
  const s = await startServe(args);
  defer(async () => {
    if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
    await s.exited;
  });
  const ready = s.ready as typeof s.ready & { operator_url?: string };
  return {
    target: targetOf(kind === 'unix' ? ready.operator_url! : ready.url),
    trace,
    stop: async () => (s.child.kill('SIGTERM'), s.exited),
    alive: () => s.child.exitCode === null && s.child.signalCode === null,
    stderr: s.stderr,
  };
}
