// The mutation step between two requests: ways a capsule changes a served file under the server,
// each applied on the real filesystem and to the test's record of the file's bytes, so the
// properties can require the next etag, listing digest and body to follow the bytes. Node has no
// mmap: writes through a shared mapping go through a small python3 helper kept running for the
// whole file (mmap MAP_SHARED read-write, read-fault the page first, then write into it, unmap),
// which on tmpfs changes the bytes without changing mtime or ctime (STACK.md).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { closeSync, ftruncateSync, openSync, readFileSync, renameSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import fc from 'fast-check';
import { sizeArb } from './thresholds.js';

export type Mutation =
  | { m: 'write'; at: number; len: number; salt: number }
  | { m: 'truncate'; size: number }
  | { m: 'rename-over'; size: number; salt: number }
  | { m: 'replace'; size: number; salt: number }
  | { m: 'mmap-write'; at: number; len: number; salt: number }
  // Round three: changes that keep some of (size, mtime, ctime), for the digest cache's key. A
  // same-size write in place whose mtime is then put back to the nanosecond (utimensat): only
  // ctime moves. A same-size file given the target's mtime, then renamed over it: a new inode
  // with the old size and mtime.
  | { m: 'write-keep-mtime'; at: number; len: number; salt: number }
  | { m: 'rename-keep-mtime'; salt: number };

export const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ m: fc.constant('write' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 64 }), salt: fc.integer({ min: 1, max: 255 }) }),
  },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('truncate' as const), size: sizeArb }) },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('rename-over' as const), size: sizeArb, salt: fc.integer({ min: 1, max: 255 }) }) },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('replace' as const), size: sizeArb, salt: fc.integer({ min: 1, max: 255 }) }) },
  {
    weight: 3,
    arbitrary: fc.record({ m: fc.constant('mmap-write' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 64 }), salt: fc.integer({ min: 1, max: 255 }) }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      m: fc.constant('write-keep-mtime' as const),
      at: fc.nat(),
      len: fc.integer({ min: 1, max: 64 }),
      salt: fc.integer({ min: 1, max: 255 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ m: fc.constant('rename-keep-mtime' as const), salt: fc.integer({ min: 1, max: 255 }) }) },
);

/** Distinct, reproducible content of `size` bytes. */
export function bytesFor(size: number, salt: number): Buffer {
  const out = Buffer.alloc(size);
  for (let i = 0; i < size; i++) out[i] = (i * 131 + salt * 7 + (i >>> 8) * 17) & 0xff;
  return out;
}

/** The range a same-length write changes, with new bytes that differ from the old at every position. */
function changedRange(old: Buffer, at: number, len: number, salt: number): { at: number; bytes: Buffer } | null {
  if (old.length === 0) return null;
  const start = at % old.length;
  const n = Math.min(len, old.length - start);
  const bytes = Buffer.alloc(n);
  for (let i = 0; i < n; i++) bytes[i] = old[start + i]! ^ (salt | 1);
  return { at: start, bytes };
}

/** Writes through shared mappings, one request at a time, in a python3 process. */
export class MapWriter {
  private pending: Array<(line: string) => void> = [];
  private buffer = '';
  private constructor(private readonly child: ChildProcessWithoutNullStreams) {
    child.stdout.on('data', (d: Buffer) => {
      this.buffer += d.toString('utf8');
      let nl: number;
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        const line = this.buffer.slice(0, nl);
        this.buffer = this.buffer.slice(nl + 1);
        this.pending.shift()?.(line);
      }
    });
  }

  static start(): MapWriter {
    const script = [
      'import mmap, os, sys, json',
      'for line in sys.stdin:',
      '  r = json.loads(line)',
      // Times put back to the nanosecond (Node's utimes takes float seconds and cannot).
      '  if r.get("op") == "utime-from":',
      '    st = os.stat(r["from"])',
      '    os.utime(r["path"], ns=(st.st_atime_ns, st.st_mtime_ns))',
      '    print("ok", flush=True)',
      '    continue',
      '  if r.get("op") == "write-keep-mtime":',
      '    st = os.stat(r["path"])',
      '    fd = os.open(r["path"], os.O_WRONLY)',
      '    os.pwrite(fd, bytes.fromhex(r["hex"]), r["at"])',
      '    os.close(fd)',
      '    os.utime(r["path"], ns=(st.st_atime_ns, st.st_mtime_ns))',
      '    print("ok", flush=True)',
      '    continue',
      '  fd = os.open(r["path"], os.O_RDWR)',
      '  try:',
      '    m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)',
      '    data = bytes.fromhex(r["hex"]); at = r["at"]',
      // The read fault first: on tmpfs the page is then mapped writable and the write takes no fault.
      '    _ = m[at]',
      '    m[at:at + len(data)] = data',
      '    m.close()',
      '  finally:',
      '    os.close(fd)',
      '  print("ok", flush=True)',
    ].join('\n');
    return new MapWriter(spawn('python3', ['-c', script]));
  }

  write(path: string, at: number, bytes: Buffer, op?: 'write-keep-mtime'): Promise<void> {
    return this.ask({ op, path, at, hex: bytes.toString('hex') });
  }

  /** Gives `path` the atime and mtime of `from`, to the nanosecond. */
  utimeFrom(path: string, from: string): Promise<void> {
    return this.ask({ op: 'utime-from', path, from });
  }

  private ask(request: object): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push((line) => (line === 'ok' ? resolve() : reject(new Error(`python helper: ${line}`))));
      this.child.stdin.write(`${JSON.stringify(request)}\n`);
    });
  }

  stop(): void {
    this.child.stdin.end();
    this.child.kill();
  }
}

/**
 * Applies `mu` to the file at `path` whose bytes are `old`; returns its new bytes (what the test's
 * model holds from here on). `scratch` is a free name in the same directory, for rename-over.
 */
export async function applyMutation(mu: Mutation, path: string, old: Buffer, scratch: string, maps: MapWriter): Promise<Buffer> {
  switch (mu.m) {
    case 'write': {
      const r = changedRange(old, mu.at, mu.len, mu.salt);
      if (r === null) return old;
      const fd = openSync(path, 'r+');
      try {
        writeSync(fd, r.bytes, 0, r.bytes.length, r.at);
      } finally {
        closeSync(fd);
      }
      const next = Buffer.from(old);
      r.bytes.copy(next, r.at);
      return next;
    }
    case 'mmap-write': {
      const r = changedRange(old, mu.at, mu.len, mu.salt);
      if (r === null) return old;
      await maps.write(path, r.at, r.bytes);
      const next = Buffer.from(old);
      r.bytes.copy(next, r.at);
      return next;
    }
    case 'write-keep-mtime': {
      const r = changedRange(old, mu.at, mu.len, mu.salt);
      if (r === null) return old;
      await maps.write(path, r.at, r.bytes, 'write-keep-mtime');
      const next = Buffer.from(old);
      r.bytes.copy(next, r.at);
      return next;
    }
    case 'rename-keep-mtime': {
      if (old.length === 0) return old;
      const next = Buffer.from(old);
      for (let i = 0; i < next.length; i += 997) next[i] = next[i]! ^ (mu.salt | 1);
      writeFileSync(scratch, next);
      await maps.utimeFrom(scratch, path);
      renameSync(scratch, path);
      return next;
    }
    case 'truncate': {
      const fd = openSync(path, 'r+');
      try {
        ftruncateSync(fd, mu.size);
      } finally {
        closeSync(fd);
      }
      const next = Buffer.alloc(mu.size);
      old.copy(next, 0, 0, Math.min(old.length, mu.size));
      return next;
    }
    case 'rename-over': {
      const next = bytesFor(mu.size, mu.salt + old.length);
      writeFileSync(scratch, next);
      renameSync(scratch, path);
      return next;
    }
    case 'replace': {
      // Same name, new inode (the number may well be reused), new bytes, written in place.
      const next = bytesFor(mu.size, mu.salt + 3 * old.length);
      unlinkSync(path);
      writeFileSync(path, next);
      return next;
    }
  }
}

/** The bytes on disk, for a harness self-check after each mutation. */
export function onDisk(path: string): Buffer {
  return readFileSync(path);
}
