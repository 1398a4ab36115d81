// `ls`: a capsule's operator plane, listed (the client is cli/client.ts).
import type { Command } from 'commander';
import { collect, fail, parseMaxBytes, PROGRAM, shortErrors } from '../common.js';

/** The `ls` verb, on the command `cmd`. */
export function register(cmd: Command): void {
  const ls = cmd
    .command('ls')
    .description("list a capsule's operator plane")
    .argument('<url>', 'the capsule URL, e.g. http://127.0.0.1:41234, or unix:/path/to/operator.sock')
    .option('--json', 'print the listing as the server sent it, as one line of JSON')
    .option('--max-bytes <bytes>', 'the largest listing body read, e.g. 256Mi (default 64Mi)')
    .option('-H, --header <line>', "a request header, 'Name: value' (repeatable; never logged), e.g. what a host app's auth hook asks for", collect, [])
    .addHelpText(
      'after',
      `
Every text the server sends is shown with control and format characters escaped; a listing whose
numbers are not numbers is refused, and so is one larger than --max-bytes.

Examples:
  ${PROGRAM} ls http://127.0.0.1:41234
  ${PROGRAM} ls unix:/run/cap/operator.sock --json`,
    )
    .action(async (url: string, flags: { json?: boolean; maxBytes?: string; header: string[] }) => {
      const { list, parseHeaders } = await import('../client.js');
      const run = async () => list(url, { json: flags.json === true, maxBytes: parseMaxBytes(flags.maxBytes), headers: parseHeaders(flags.header) });
      process.stdout.write(await run().catch((error) => fail(error, 'ls')));
    });
  shortErrors(ls, 'ls');
}
