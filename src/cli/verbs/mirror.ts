// `mirror`: a directory made equal to the export, verified (the work is cli/mirror.ts).
import type { Command } from 'commander';
import type { MirrorProgress } from '../mirror.js';
import { UsageError } from '../../codes.js';
import { MAX_JOBS } from '../../limits.js';
import { collect, fail, parseBytesFlag, parseMaxBytes, PROGRAM, shortErrors, stoppable } from '../common.js';

/** mirror's bar: files done of those listed, on stderr, only when stderr is a terminal. */
async function terminalFileProgress(stream: NodeJS.WriteStream = process.stderr): Promise<MirrorProgress | null> {
  if (!stream.isTTY) return null;
  const { Presets, SingleBar } = (await import('cli-progress')).default;
  const bar = new SingleBar(
    { stream, format: '{bar} {value} of {total} files | eta {eta_formatted}', hideCursor: true, clearOnComplete: true, barsize: 30, fps: 10 },
    Presets.shades_classic,
  );
  let done = 0;
  return {
    start: (total) => bar.start(total, 0),
    tick: () => bar.update((done += 1)),
    stop: () => bar.stop(),
  };
}

/** `--jobs`: a whole number of connections. */
function parseJobs(value: string | undefined, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = /^[0-9]{1,3}$/.test(value) ? Number(value) : NaN;
  if (!(n >= 1 && n <= max)) throw new UsageError(`--jobs must be a whole number from 1 to ${max} (got '${value}')`);
  return n;
}

/** The `mirror` verb, on the command `cmd`. */
export function register(cmd: Command): void {
  const mirrorCmd = cmd
    .command('mirror')
    .description('make a directory equal to the export: one listing, a verified GET only for what differs')
    .argument('<url>', 'the capsule URL, or unix:/path/to/operator.sock')
    .argument('<dir>', 'the local directory (created if missing)')
    .option('--delete', 'remove local files (and emptied directories) the export does not have; never without it')
    .option('--jobs <n>', 'connections at once (default 4)')
    .option('--json', 'print the summary as one line of JSON')
    .option('--max-bytes <bytes>', 'the largest file saved, e.g. 4Gi (default 1Gi)')
    .option('--listing-max-bytes <bytes>', 'the largest listing read, e.g. 256Mi (default 64Mi)')
    .option('-H, --header <line>', "a request header, 'Name: value' (repeatable; never logged)", collect, [])
    .addHelpText(
      'after',
      `
One listing, then a GET only for each file whose listed sha256 differs from what DIR holds. Each
body is saved only when its etag is the listed digest and its bytes hash to it: written to a
temporary file in DIR, fsync'd, then renamed into place. A file that changes between the listing
and its GET is asked for again (3 times in all), then reported, never saved. Names are the
server's text: one that is absolute or holds '..' is refused, and nothing is written through a
symlink in DIR. A progress bar is drawn on stderr when stderr is a terminal; one summary line
goes to stdout. Ctrl-C leaves no partial file; the next run takes up from what is already right.

Examples:
  ${PROGRAM} mirror http://127.0.0.1:41234 ./export
  ${PROGRAM} mirror unix:/run/cap/operator.sock ./export --delete --jobs 8
  ${PROGRAM} mirror http://127.0.0.1:8080/cap ./export -H 'Authorization: Bearer …' --json`,
    )
    .action(
      async (
        url: string,
        dir: string,
        flags: { delete?: boolean; jobs?: string; json?: boolean; maxBytes?: string; listingMaxBytes?: string; header: string[] },
      ) => {
        const { parseHeaders } = await import('../client.js');
        const { mirror, mirrorExitStatus, renderSummary } = await import('../mirror.js');
        const { printable } = await import('../client.js');
        let opts: Parameters<typeof mirror>[2] = {};
        try {
          opts = {
            delete: flags.delete === true,
            jobs: parseJobs(flags.jobs, MAX_JOBS),
            maxBytes: parseMaxBytes(flags.maxBytes),
            listingMaxBytes: flags.listingMaxBytes === undefined ? undefined : parseBytesFlag('--listing-max-bytes', flags.listingMaxBytes),
            headers: parseHeaders(flags.header),
          };
        } catch (error) {
          fail(error, 'mirror');
        }
        const summary = await stoppable(
          'mirror',
          async (signal) => mirror(url, dir, { ...opts, progress: await terminalFileProgress(), signal }),
          'interrupted; files already placed are verified, and no partial file was left',
        );
        for (const f of summary.failures) process.stderr.write(`error: ${printable(f.path)}: ${f.message}\n`);
        process.stdout.write(renderSummary(summary, flags.json === true, flags.delete === true));
        const status = mirrorExitStatus(summary);
        if (status !== 0) process.exit(status);
      },
    );
  shortErrors(mirrorCmd, 'mirror');
}
