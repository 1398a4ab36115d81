// Every exit status of the command, in one table: docs/cli.md's *Exit status* is tested against it
// (test/audits/exit-status.test.ts). `ls`, `get` and `mirror` tell their failures apart as curl
// does; the server verbs use 0, 1 and 2. A leaf, so the command can judge an error without
// loading the client.
import { constants } from 'node:os';

export const EXIT = Object.freeze({
  done: 0,
  /** An internal error: a bug, or a failure with no better status. */
  internal: 1,
  /** A bad flag or argument, a URL that is not a base URL, a malformed `-H`, a manifest error. */
  usage: 2,
  /** The server cannot be reached, timed out, or broke off mid-body. */
  unreachable: 3,
  /** The server answered with a status other than 200. */
  refused: 4,
  /** The answer failed verification (its etag, its listing, a listed name or digest). */
  unverified: 5,
  /** Over `--max-bytes`. */
  too_large: 6,
  /** A local problem: the target exists, is a directory, or cannot be written. */
  local: 7,
});

/** The ways a client verb fails, each its own status. */
export type ClientFailure = Exclude<keyof typeof EXIT, 'done' | 'internal'>;

/** The status of each client failure (EXIT's, for the kinds a client verb can fail with). */
export const EXIT_STATUS: Readonly<Record<ClientFailure, number>> = EXIT;

/** What the process exits with when a stop signal ended it, as a shell reports it (130 for SIGINT). */
export function signalStatus(signal: NodeJS.Signals): number {
  return 128 + constants.signals[signal];
}

export class ClientError extends Error {
  constructor(
    message: string,
    readonly kind: ClientFailure,
  ) {
    super(message);
    this.name = 'ClientError';
  }

  get exitStatus(): number {
    return EXIT_STATUS[this.kind];
  }
}
