// What every verb of the command shares: the program's name, how a failure is printed and which
// status it exits with (docs/cli.md, *Exit status*), the flag parsers more than one verb uses,
// commander's one-line usage errors, and how a client verb is stopped by a signal.
import { type Command, Option } from 'commander';
import { UsageError } from '../codes.js';
import { ManifestError } from '../manifest/diagnostics.js';
import { FLAG_BYTE_FORMS, parseFlagByteCount } from '../manifest/grammars.js';
import * as native from '../addon/export.js';
import { LOG_LEVELS } from './early-log.js';
import { ClientError, EXIT, signalStatus } from './exit.js';

export const PROGRAM = 'resource-plane';

export const ENVIRONMENT = `
Environment:
  RESOURCE_PLANE_LOG_LEVEL    ${LOG_LEVELS.join('|')} (default info)
  RESOURCE_PLANE_RECORDS_DIR  where traces go by default (default ~/.murmur/records)
  RESOURCE_PLANE_RESOLVER     openat2|walk: force the path resolver (default openat2 if available)`;

/** `(see resource-plane serve --help)`: where a usage error sends the reader. */
export function helpPointer(command: string | null): string {
  return `(see ${PROGRAM}${command ? ` ${command}` : ''} --help)`;
}

/** A byte-count flag: the SI and IEC forms (grammars.ts, FLAG_BYTE_COUNT); a refusal lists them. */
export function parseBytesFlag(flag: string, value: string): number {
  const n = parseFlagByteCount(value);
  if (n === null) throw new UsageError(`${flag} must be ${FLAG_BYTE_FORMS} (got '${value}')`);
  return n;
}

/** A client's `--max-bytes`. */
export function parseMaxBytes(value: string | undefined): number | undefined {
  return value === undefined ? undefined : parseBytesFlag('--max-bytes', value);
}

/** Prints what went wrong and exits; `command` is the subcommand a usage error points to. */
export function fail(error: unknown, command: string | null = null): never {
  if (error instanceof ClientError) {
    process.stderr.write(`error: ${error.message}${error.kind === 'usage' && command ? ` ${helpPointer(command)}` : ''}\n`);
    process.exit(error.exitStatus);
  }
  if (error instanceof ManifestError) {
    process.stderr.write(`${error.render()}\n`);
    process.exit(EXIT.usage);
  }
  if (error instanceof UsageError) {
    process.stderr.write(`error: ${error.message} ${helpPointer(command)}\n`);
    process.exit(EXIT.usage);
  }
  process.stderr.write(`error: ${(error as Error)?.message ?? String(error)}\n`);
  process.exit(EXIT.internal);
}

/** Checked before a logger exists: pino's own message for a bad level speaks to a programmer. */
export function checkLogLevel(): void {
  const level = process.env.RESOURCE_PLANE_LOG_LEVEL;
  if (level !== undefined && !LOG_LEVELS.includes(level)) {
    throw new UsageError(`RESOURCE_PLANE_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')} (got '${level}')`);
  }
}

export function checkResolverChoice(): void {
  const problem = native.resolverChoiceProblem();
  if (problem !== null) throw new UsageError(problem);
}

/** The signals after which a command stops; 128 + the number is the exit status of one so stopped. */
export const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/**
 * Runs a client verb that an interrupt, a stop or a hang-up (the terminal closed) can stop: the
 * verb is handed a signal, removes what it was writing, and the process exits as that signal would
 * have (130 for Ctrl-C), saying `interrupted`.
 */
export async function stoppable<T>(verb: string, run: (signal: AbortSignal) => Promise<T>, said: string): Promise<T> {
  const abort = new AbortController();
  let stoppedBy: (typeof STOP_SIGNALS)[number] = 'SIGINT';
  const handlers = STOP_SIGNALS.map((signal) => {
    const handler = () => {
      stoppedBy = signal;
      abort.abort();
    };
    process.once(signal, handler);
    return [signal, handler] as const;
  });
  const r = await run(abort.signal).catch((error) => {
    if (abort.signal.aborted) {
      process.stderr.write(`error: ${said}\n`);
      process.exit(signalStatus(stoppedBy));
    }
    return fail(error, verb);
  });
  for (const [signal, handler] of handlers) process.off(signal, handler);
  return r;
}

/** A usage error from commander: one line, and where the help is. */
export function shortErrors(cmd: Command, name: string | null): Command {
  return cmd.configureOutput({
    // Commander may add a second line ("(Did you mean --workdir?)"): kept on the one line, where
    // it reads as the rest of the sentence.
    outputError: (text, print) =>
      print(
        `${text
          .trim()
          .replace(/\s*\n\s*/g, ' ')
          .replace('(Did you mean', '(did you mean')} ${helpPointer(name)}\n`,
      ),
  });
}

/**
 * A required option, checked after commander's unknown-option check rather than before it (where
 * `requiredOption` is checked): `serve --workdri cap` is then told `unknown option '--workdri' (did
 * you mean --workdir?)` instead of only that --workdir is missing. The message is commander's own.
 */
export function requiredAfterUnknown(cmd: Command, flags: string, description: string): Command {
  const option = new Option(flags, description);
  return cmd.addOption(option).hook('preAction', (command) => {
    if (command.getOptionValue(option.attributeName()) === undefined) {
      command.error(`error: required option '${option.flags}' not specified`, { code: 'commander.missingMandatoryOptionValue' });
    }
  });
}

/** Commander's collector for a repeatable option. */
export function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export function humanBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${units[u]}`;
}
