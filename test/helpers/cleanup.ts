// Cleanup through vitest's own hooks. What a test creates it hands to `defer`, which registers an
// onTestFinished hook: it runs when the test ends however it ends (pass, fail, or a dynamic
// `ctx.skip()` such as a race that hit its cap), the last deferred first, and a hook that throws
// fails the test without stopping the others. A resource a whole describe block shares is created
// in `beforeAll` and released by the teardown that `beforeAll` returns (or by `afterAll`).
import type { ChildProcess } from 'node:child_process';
import { onTestFinished } from 'vitest';

/** Runs `fn` when the running test finishes. Only inside a test: vitest refuses it elsewhere. */
export function defer(fn: () => unknown): void {
  onTestFinished(async () => {
    await fn();
  });
}

/** Kills `child` (SIGKILL, by its own pid) when the running test finishes, if it is still running. */
export function reap<C extends ChildProcess>(child: C): C {
  defer(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return child;
}
