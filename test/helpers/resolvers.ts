// The one list of resolver modes the tests replay against: the walk always, openat2 where this
// kernel has it. A test about the two resolvers *together* asks for both with `bothResolvers`,
// which skips it loudly, with the reason, where there is only one to compare. `heldDirectory` is
// the workdir descriptor a resolver call starts from, closed with the test.
import type { TestContext } from 'vitest';
import * as native from '../../src/addon/export.js';
import { defer } from './cleanup.js';

export const OPENAT2_AVAILABLE = native.openat2Available();

export const RESOLVERS: native.ResolverKind[] = OPENAT2_AVAILABLE ? ['openat2', 'walk'] : ['walk'];

/** Both resolvers, or a skip of the running test that says why (never a silent set of one). */
export function bothResolvers(ctx: TestContext): ['openat2', 'walk'] {
  if (!OPENAT2_AVAILABLE) {
    const note = 'openat2 is unavailable on this kernel, so there is no second resolver to compare the walk with';
    console.warn(`\n*** ${ctx.task.name}: skipped: ${note}\n`);
    ctx.skip(note);
  }
  return ['openat2', 'walk'];
}

export interface HeldDirectory {
  fd: number;
  /** Closes the descriptor now; the deferred close then does nothing. */
  close(): void;
}

/** A descriptor on `dir` (native.openDirectory), closed when the running test finishes or by `close()`. */
export async function heldDirectory(dir: string): Promise<HeldDirectory> {
  const fd = await native.openDirectory(dir);
  let open = true;
  const close = () => {
    if (open) native.closeFd(fd);
    open = false;
  };
  defer(close);
  return { fd, close };
}
