// The `resource-plane` command (its bin, main.ts, loads this once the compile cache is on): argv → a session (serve), the grants a launch would have
// (explain-scope), the two-capsule demo, and small operator client verbs. Diagnostics from the
// manifest print as `error[CODE]: …` / `  hint: …` and exit 2; a usage mistake prints one line
// pointing at the command's --help and exits 2; ls and get exit by what failed (docs/cli.md,
// *Exit status*: 3 unreachable, 4 refused, 5 unverified, 6 too large, 7 local); others exit 1.
import { Command, CommanderError, Option } from 'commander';
import { packageVersion } from '../version.js';
import { ENVIRONMENT, fail, PROGRAM, shortErrors } from './common.js';
import { EXIT } from './exit.js';
import * as demo from './verbs/demo.js';
import * as explainScope from './verbs/explain-scope.js';
import * as get from './verbs/get.js';
import * as ls from './verbs/ls.js';
import * as mirror from './verbs/mirror.js';
import * as records from './verbs/records.js';
import * as serve from './verbs/serve.js';

/** The verbs, in the order the help lists them; each file in cli/verbs/ defines one. */
const VERBS = [serve, explainScope, demo, records, ls, get, mirror];

export function program(): Command {
  const cmd = new Command(PROGRAM)
    .description('The hardened file server of a capsule: operator plane, peer plane, audit trace.')
    .version(packageVersion(), '-v, --version', 'print the version and exit')
    // -V too, as before -v existed (and as curl and nginx spell it); not shown in the help.
    .addOption(new Option('-V').hideHelp())
    .showHelpAfterError(false)
    .exitOverride();
  cmd.on('option:V', () => {
    process.stdout.write(`${packageVersion()}\n`);
    throw new CommanderError(0, 'commander.version', packageVersion());
  });
  shortErrors(cmd, null);
  cmd.addHelpText(
    'after',
    `
Examples:
  ${PROGRAM} serve --workdir ./cap                  serve ./cap with ./cap/murmur.yaml
  ${PROGRAM} serve --workdir ./cap --control stdio  the same, as an MCP server on stdio
  ${PROGRAM} explain-scope --workdir ./cap          what that launch would grant
  ${PROGRAM} ls http://127.0.0.1:41234              list the operator plane
  ${PROGRAM} get http://127.0.0.1:41234 report.md   download one file, etag verified
  ${PROGRAM} mirror http://127.0.0.1:41234 ./out    take the whole export, verified
${ENVIRONMENT}

Run '${PROGRAM} <command> --help' for a command's options.`,
  );

  for (const verb of VERBS) verb.register(cmd);
  return cmd;
}

/** Runs the command line of this process; main.ts calls it once the compile cache is on. */
export async function main(): Promise<void> {
  // A command whose work is still pending when nothing is left to run has stalled: it must not end
  // with status 0 as if it had succeeded.
  let finished = false;
  process.once('beforeExit', () => {
    if (finished) return;
    process.stderr.write('error: the command stopped before it finished (an internal error); nothing was completed\n');
    process.exit(EXIT.internal);
  });
  try {
    await program().parseAsync(process.argv);
    finished = true;
  } catch (error) {
    if (error instanceof CommanderError) process.exit(error.exitCode === 0 ? EXIT.done : EXIT.usage);
    fail(error);
  }
}
