// `get`: one file, downloaded and saved only once its etag is verified (cli/download.ts; the wire is cli/client.ts).
import type { SingleBar } from 'cli-progress';
import type { Command } from 'commander';
import type { Progress } from '../download.js';
import { collect, fail, humanBytes, parseMaxBytes, PROGRAM, shortErrors, stoppable } from '../common.js';

/** A progress bar on stderr, only when stderr is a terminal: never in a pipe, a log or a test. */
async function terminalProgress(stream: NodeJS.WriteStream = process.stderr): Promise<Progress | null> {
  if (!stream.isTTY) return null;
  // Loaded here: only `get` on a terminal draws one.
  const { Presets, SingleBar } = (await import('cli-progress')).default;
  let bar: SingleBar | null = null;
  return {
    start(total) {
      bar = new SingleBar(
        {
          stream,
          format: total === null ? '{received} received' : '{bar} {percentage}% | {received} of {size} | eta {eta_formatted}',
          hideCursor: true,
          clearOnComplete: true,
          barsize: 30,
          fps: 10,
        },
        Presets.shades_classic,
      );
      bar.start(total ?? 0, 0, { received: humanBytes(0), size: humanBytes(total ?? 0) });
    },
    update(received) {
      bar?.update(received, { received: humanBytes(received) });
    },
    stop() {
      bar?.stop();
    },
  };
}

/** The `get` verb, on the command `cmd`. */
export function register(cmd: Command): void {
  const get = cmd
    .command('get')
    .description('download one file, verifying its etag against the bytes before saving')
    .argument('<url>', 'the capsule URL, or unix:/path/to/operator.sock')
    .argument('<path>', 'the path relative to the export root')
    .option(
      '-o, --output <file>',
      "where to save it: a file, a directory (ending in '/' or existing) to save into under the file's name, or '-' for stdout (default: its name, here)",
    )
    .option('--force', 'replace an existing file')
    .option('--max-bytes <bytes>', 'the largest file saved, e.g. 4Gi (default 1Gi)')
    .option('-H, --header <line>', "a request header, 'Name: value' (repeatable; never logged)", collect, [])
    .addHelpText(
      'after',
      `
The body streams into a temporary file beside the target and is moved into place only once its
SHA-256 matches the etag; an existing target is refused before anything is downloaded (a directory
is never replaced, even with --force), and so is a body longer than its content-length or than
--max-bytes. A progress bar is drawn on stderr when stderr is a terminal.

Examples:
  ${PROGRAM} get http://127.0.0.1:41234 report.md
  ${PROGRAM} get http://127.0.0.1:41234 sub/report.md -o downloads/
  ${PROGRAM} get http://127.0.0.1:41234 'sub dir/data.csv' -o data.csv --force
  ${PROGRAM} get unix:/run/cap/operator.sock report.md -o - | less`,
    )
    .action(async (url: string, path: string, flags: { output?: string; force?: boolean; maxBytes?: string; header: string[] }) => {
      const [{ get: download }, { parseHeaders }] = await Promise.all([import('../download.js'), import('../client.js')]);
      let maxBytes: number | undefined;
      let headers: Record<string, string> = {};
      try {
        maxBytes = parseMaxBytes(flags.maxBytes);
        headers = parseHeaders(flags.header);
      } catch (error) {
        fail(error, 'get');
      }
      const r = await stoppable(
        'get',
        async (signal) => download(url, path, { output: flags.output, force: flags.force, maxBytes, headers, progress: await terminalProgress(), signal }),
        'interrupted; nothing was saved',
      );
      if (r.savedTo) process.stderr.write(`saved ${r.bytes} bytes to ${r.savedTo} (sha256 ${r.sha256}, etag verified)\n`);
    });
  shortErrors(get, 'get');
}
