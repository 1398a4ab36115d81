// `demo`: the example capsules at work (what `npm start` runs; the tour itself is cli/demo.ts).
import type { Command } from 'commander';
import { checkLogLevel, checkResolverChoice, fail, shortErrors } from '../common.js';

/** The `demo` verb, on the command `cmd`. */
export function register(cmd: Command): void {
  const demo = cmd
    .command('demo')
    .description('start the example capsules and show the planes at work (what npm start runs)')
    .action(async () => {
      try {
        checkLogLevel();
        checkResolverChoice();
      } catch (error) {
        fail(error, 'demo');
      }
      const { runDemo } = await import('../demo.js');
      await runDemo().catch((error) => fail(error, 'demo'));
    });
  shortErrors(demo, 'demo');
}
