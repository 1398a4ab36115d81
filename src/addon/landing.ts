// Landing a redeemed file in the workdir's inbox (native/bind_landing.cc).
import { addon, call } from './load.js';
import type { WorkdirRef } from './export.js';

/** The addon's handle on one landing: it owns the descriptors; JS only asks it to act. */
interface LandingHandle {
  write(chunk: Buffer): Promise<void>;
  commit(finalName: string): Promise<void>;
  abort(): Promise<void>;
  close(): Promise<void>;
}

const binding = addon as { landingOpen(call: { workdirFd: WorkdirRef; inbox: string }): Promise<LandingHandle> };

/**
 * Landing bytes in the workdir's inbox (SPEC section 6): an exclusive temporary file created
 * beneath the workdir descriptor inside `inbox` (one component; a symlinked or non-directory inbox
 * is UNSAFE_INBOX), written, then committed (fsync, rename into place, fsync the inbox) or
 * aborted. The addon owns both descriptors; this object never exposes one. Operations run one at
 * a time, in call order. `close()` ends a landing (an uncommitted temporary file is removed); a
 * landing that is dropped without it is closed the same way when it is garbage-collected.
 */
export class Landing {
  readonly #handle: LandingHandle;
  /** The previous operation: each one starts after it settles, so calls never overlap. */
  #tail: Promise<unknown> = Promise.resolve();

  private constructor(handle: LandingHandle) {
    this.#handle = handle;
  }

  /** Creates the inbox if missing and an exclusive temporary file inside it. */
  static async open(workdirFd: WorkdirRef, inbox: string): Promise<Landing> {
    return new Landing(await call(binding.landingOpen({ workdirFd, inbox })));
  }

  #next<T>(op: () => Promise<T>): Promise<T> {
    const run = this.#tail.then(() => call(op()));
    this.#tail = run.catch(() => undefined);
    return run;
  }

  /** Appends all of `chunk`; the buffer must not change until the promise settles. */
  write(chunk: Buffer): Promise<void> {
    return this.#next(() => this.#handle.write(chunk));
  }

  /** fsync, rename to `finalName` (one component) inside the inbox, fsync the inbox. */
  commit(finalName: string): Promise<void> {
    return this.#next(() => this.#handle.commit(finalName));
  }

  /**
   * Undoes the landing and closes it: before commit the temporary file goes; after commit the
   * landed file goes, if that name still holds the file this landing wrote.
   */
  abort(): Promise<void> {
    return this.#next(() => this.#handle.abort());
  }

  /** Closes the landing; an uncommitted temporary file is removed, a committed file stays. */
  close(): Promise<void> {
    return this.#next(() => this.#handle.close());
  }
}
