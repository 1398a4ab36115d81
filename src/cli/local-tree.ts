// The directory `resource-plane mirror` writes into, held by descriptor, so that whatever names a
// listing carries nothing is written outside it. Node has no openat/renameat, so every operation
// names its target as `/proc/self/fd/<dir descriptor>/<one component>`: the kernel follows the
// magic link to the directory that descriptor holds (wherever it now is) and looks the one
// component up inside it, and O_NOFOLLOW (or O_EXCL, or rename, which never follows its last
// component) keeps a symlink in that component from being followed. A directory is opened only
// beneath the one above it, one component at a time, with O_NOFOLLOW|O_DIRECTORY: a symlink planted
// anywhere on the way (`sub -> /etc`) stops the walk (ELOOP/ENOTDIR) instead of leading out.
// Names reach here already checked to be components (no `/`, not empty, `.` or `..`: mirror.ts
// safeComponents); the descriptor walk is what holds even so.
import { randomBytes, createHash } from 'node:crypto';
import * as fs from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { MAX_IDLE_DIRS } from '../limits.js';

const PROC_FD = '/proc/self/fd';
const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = fs.constants;
const HASH_CHUNK = 256 * 1024;
/**
 * A file of at most this many bytes is checked with synchronous calls: four pool round trips
 * (open, fstat, read, close) cost more than the work for a small file (10,000 files of 4 KiB:
 * about 0.5 s synchronously, 1.3-1.6 s through the pool with four at a time, here), and one such
 * file holds the event loop for well under a millisecond. Larger files go through the pool.
 */
const SYNC_HASH_MAX = 256 * 1024;

/** A component of a local path that is not a directory mirror may enter (a symlink, a file). */
export class NotADirectory extends Error {
  constructor(readonly at: string) {
    super(`'${at}' is a symlink or not a directory, and mirror never writes through one`);
    this.name = 'NotADirectory';
  }
}

function errno(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException)?.code;
}

/**
 * A directory of the tree, held open by descriptor while anyone uses it: `dir()` takes a reference,
 * `release()` gives it back. Only an unreferenced one is ever closed, so a descriptor number in
 * use can never be closed and reused for another directory under an operation.
 */
export class HeldDir {
  refs = 0;
  /** Its entries changed: fsync'd before it is closed, so the renames in it are durable. */
  dirty = false;
  constructor(readonly fd: number) {}
}

export class LocalTree {
  /** Open directories by relative path ('' is the root, held for the tree's life), least recent first. */
  private readonly dirs = new Map<string, HeldDir>();

  private constructor(rootFd: number) {
    const root = new HeldDir(rootFd);
    root.refs = 1;
    this.dirs.set('', root);
  }

  /**
   * The operator's directory (created when missing; the operator's own path, so a symlink there is
   * followed, as `get -o` follows one). Fails when /proc/self/fd cannot reach it: without it there
   * is no descriptor-relative name, and mirror writes nothing rather than write by path.
   */
  static open(dir: string): LocalTree {
    fs.mkdirSync(dir, { recursive: true });
    const fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY);
    try {
      if (!fs.statSync(`${PROC_FD}/${fd}`).isDirectory()) throw new Error('not a directory');
    } catch (error) {
      fs.closeSync(fd);
      throw new Error(
        `${PROC_FD} does not reach the directory (${errno(error) ?? (error as Error).message}); mirror needs /proc to write beneath a descriptor`,
      );
    }
    return new LocalTree(fd);
  }

  /** The name of `name` inside the directory `fd` holds. */
  private at(fd: number, name: string): string {
    return `${PROC_FD}/${fd}/${name}`;
  }

  /** The held directory at `rel`, marked most recently used, with a reference taken. */
  private take(rel: string): HeldDir | undefined {
    const held = this.dirs.get(rel);
    if (held === undefined) return undefined;
    this.dirs.delete(rel);
    this.dirs.set(rel, held);
    held.refs += 1;
    return held;
  }

  /** Gives back a reference dir() took; idle directories past MAX_IDLE_DIRS are synced and closed. */
  release(held: HeldDir): void {
    held.refs -= 1;
    if (this.dirs.size <= MAX_IDLE_DIRS) return;
    for (const [rel, d] of this.dirs) {
      if (this.dirs.size <= MAX_IDLE_DIRS) break;
      if (d.refs === 0) this.drop(rel, d);
    }
  }

  /** Closes an unreferenced directory (synced first if its entries changed) and forgets it. */
  private drop(rel: string, held: HeldDir): void {
    this.dirs.delete(rel);
    if (held.dirty) {
      try {
        fs.fsyncSync(held.fd);
      } catch {
        // a directory that cannot be synced (some filesystems refuse): its renames stand
      }
    }
    fs.closeSync(held.fd);
  }

  /**
   * The directory `components` name beneath the root, each opened beneath the last without
   * following a symlink, with a reference taken (give it back with release()). Missing: created
   * when `create`, else null. Throws NotADirectory when one is a symlink or anything but a directory.
   */
  dir(components: readonly string[], create: boolean): HeldDir | null {
    let held = this.take('')!;
    let rel = '';
    try {
      for (const name of components) {
        rel = rel === '' ? name : `${rel}/${name}`;
        const known = this.take(rel);
        if (known !== undefined) {
          this.release(held);
          held = known;
          continue;
        }
        const next = this.openChild(held, name, rel, create);
        if (next === null) return null;
        const child = new HeldDir(next);
        child.refs = 1;
        this.dirs.set(rel, child);
        this.release(held);
        held = child;
      }
      const found = held;
      held = null as unknown as HeldDir;
      return found;
    } finally {
      if (held !== null) this.release(held);
    }
  }

  /** Opens (or, with `create`, makes and opens) `name` in `parent`; null when missing. */
  private openChild(parent: HeldDir, name: string, rel: string, create: boolean): number | null {
    try {
      return fs.openSync(this.at(parent.fd, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    } catch (error) {
      const code = errno(error);
      if (code === 'ELOOP' || code === 'ENOTDIR') throw new NotADirectory(rel);
      if (code !== 'ENOENT') throw error;
      if (!create) return null;
    }
    try {
      fs.mkdirSync(this.at(parent.fd, name), 0o755);
    } catch (made) {
      if (errno(made) !== 'EEXIST') throw made;
    }
    parent.dirty = true;
    try {
      return fs.openSync(this.at(parent.fd, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    } catch (again) {
      if (errno(again) === 'ELOOP' || errno(again) === 'ENOTDIR') throw new NotADirectory(rel);
      throw again;
    }
  }

  /**
   * The SHA-256 of the regular file `name` in the directory `dir`, when it is one (never through a
   * symlink, never blocking on a FIFO) of exactly `size` bytes; null otherwise (absent, another
   * size, a symlink, a special file, unreadable): it then has to be fetched.
   */
  async digest(dir: HeldDir, name: string, size: number, signal?: AbortSignal): Promise<string | null> {
    if (size <= SYNC_HASH_MAX) return this.digestSmall(dir, name, size);
    let file: FileHandle;
    try {
      file = await fs.promises.open(this.at(dir.fd, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    } catch {
      return null;
    }
    try {
      const st = await file.stat();
      if (!st.isFile() || st.size !== size) return null;
      const hash = createHash('sha256');
      const buffer = Buffer.allocUnsafe(Math.min(HASH_CHUNK, Math.max(size, 1)));
      let read = 0;
      for (;;) {
        if (signal?.aborted) return null;
        const { bytesRead } = await file.read(buffer, 0, buffer.length, read);
        if (bytesRead === 0) break;
        hash.update(buffer.subarray(0, bytesRead));
        read += bytesRead;
      }
      return read === size ? hash.digest('hex') : null;
    } catch {
      return null;
    } finally {
      await file.close().catch(() => undefined);
    }
  }

  /** digest() for a small file, with synchronous calls (SYNC_HASH_MAX says why). */
  private digestSmall(dir: HeldDir, name: string, size: number): string | null {
    let fd: number;
    try {
      fd = fs.openSync(this.at(dir.fd, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    } catch {
      return null;
    }
    try {
      const st = fs.fstatSync(fd);
      if (!st.isFile() || st.size !== size) return null;
      // One byte more than expected tells a file that grew since the fstat.
      const buffer = Buffer.allocUnsafe(size + 1);
      let read = 0;
      for (;;) {
        const n = fs.readSync(fd, buffer, read, buffer.length - read, read);
        if (n === 0) break;
        read += n;
        if (read === buffer.length) break;
      }
      return read === size ? createHash('sha256').update(buffer.subarray(0, size)).digest('hex') : null;
    } catch {
      return null;
    } finally {
      fs.closeSync(fd);
    }
  }

  /**
   * An exclusive new temporary file in `dir` (O_CREAT|O_EXCL: never an existing name, never a
   * symlink), named `.rp-mirror.<12 hex>.part`: short whatever the name it becomes. Removed on every
   * way out but SIGKILL; one a killed run left is a local file like any other (--delete removes it).
   */
  async temp(dir: HeldDir): Promise<{ name: string; file: FileHandle }> {
    const name = `.rp-mirror.${randomBytes(6).toString('hex')}.part`;
    const file = await fs.promises.open(this.at(dir.fd, name), 'wx', 0o644);
    return { name, file };
  }

  /** Gives the temporary file `temp` the name `name` in `dir`: rename replaces a symlink there, never writes through it. */
  place(dir: HeldDir, temp: string, name: string): void {
    fs.renameSync(this.at(dir.fd, temp), this.at(dir.fd, name));
    dir.dirty = true;
  }

  /** Removes one of mirror's own temporary names; one already gone is fine. */
  discard(dir: HeldDir, temp: string): void {
    try {
      fs.unlinkSync(this.at(dir.fd, temp));
    } catch {
      // already renamed into place, or never made
    }
  }

  /**
   * Every entry beneath the root that `keep` does not name (by relative path), directories entered
   * only through a descriptor and never through a symlink: files, symlinks and special files are
   * removed when `remove` (the link itself, never what it points to), else only counted; a
   * directory left empty that `keep` names nothing in is removed too. Returns how many entries
   * that was (directories not counted).
   */
  prune(keep: ReadonlySet<string>, keptDirs: ReadonlySet<string>, remove: boolean): number {
    const visit = (dir: HeldDir, rel: string): number => {
      let count = 0;
      for (const entry of fs.readdirSync(`${PROC_FD}/${dir.fd}`, { withFileTypes: true })) {
        const path = rel === '' ? entry.name : `${rel}/${entry.name}`;
        if (entry.isDirectory()) {
          let child: HeldDir | null;
          try {
            child = this.dir(path.split('/'), false);
          } catch (error) {
            if (error instanceof NotADirectory) continue; // swapped meanwhile: left alone
            throw error;
          }
          if (child === null) continue;
          try {
            count += visit(child, path);
          } finally {
            this.release(child);
          }
          if (remove && !keptDirs.has(path)) {
            try {
              fs.rmdirSync(this.at(dir.fd, entry.name));
            } catch {
              continue; // not empty (something appeared), or gone: left as it is
            }
            dir.dirty = true;
            this.forget(path);
          }
          continue;
        }
        if (keep.has(path)) continue;
        count += 1;
        if (remove) {
          fs.unlinkSync(this.at(dir.fd, entry.name));
          dir.dirty = true;
        }
      }
      return count;
    };
    const root = this.dir([], false)!;
    try {
      return visit(root, '');
    } finally {
      this.release(root);
    }
  }

  /** Closes and forgets a removed directory and everything held beneath it (none is in use). */
  private forget(path: string): void {
    for (const [rel, held] of [...this.dirs]) {
      if (rel !== path && !rel.startsWith(`${path}/`)) continue;
      this.dirs.delete(rel);
      fs.closeSync(held.fd);
    }
  }

  /** fsyncs every directory whose entries changed, then closes every descriptor. */
  close(): void {
    for (const [rel, held] of [...this.dirs]) this.drop(rel, held);
  }
}
