// The confinement report: what the process restricted itself to (Landlock), or why it did not,
// as `session_start.confinement` records it, and which rights a Landlock ABI leaves unhandled. Pure
// data; src/launch/confine-plan.ts plans the ruleset and src/launch/confine-apply.ts applies it.

/** `session_start.confinement`. Every key is always present; null means "not restricted". */
export interface Confinement {
  /** true only when every thread of this process is inside the Landlock domain described here. */
  applied: boolean;
  /** The kernel's Landlock ABI, or null where none was detected (or none was asked for). */
  landlock_abi: number | null;
  /** Why nothing (or not everything) was applied; null when applied. */
  reason: string | null;
  /** Hierarchies (directories) and files the process may read, and nothing else. */
  read: string[];
  /** Files the process may execute (only what re-executing itself needs). */
  execute: string[];
  /** Files and directories the process may write: the trace file and the workdir's peer-in. */
  write: string[];
  /** TCP ports it may bind (0: an ephemeral port); null where the ABI has no network rules. */
  bind_ports: number[] | null;
  /** TCP ports it may connect to; null where outbound TCP is not restricted (see notes). */
  connect_ports: number[] | null;
  /** Landlock scopes: IPC the process cannot reach outside its domain. */
  scoped: string[];
  /**
   * The rights the running ABI does not handle, so no rule here governs them: `refer` below ABI 2
   * (linking or renaming into another directory is then refused outright), the others allowed
   * everywhere (truncate below 3, bind_tcp/connect_tcp below 4, ioctl_dev below 5, the scopes
   * abstract_unix_socket/signal below 6). null when nothing was applied.
   */
  unhandled: string[] | null;
  /** Optional rules left out, as `path: why` (the access they would have granted is denied). */
  skipped: string[];
  /** Anything a reader of the record should know about the ruleset's limits. */
  notes: string[];
}

/** A report of no confinement, saying why. */
export function notConfined(reason: string, landlockAbi: number | null = null): Confinement {
  return {
    applied: false,
    landlock_abi: landlockAbi,
    reason,
    read: [],
    execute: [],
    write: [],
    bind_ports: null,
    connect_ports: null,
    scoped: [],
    unhandled: null,
    skipped: [],
    notes: [],
  };
}

/** Each right Landlock added after ABI 1, with the ABI that first handles it. */
const HANDLED_SINCE: readonly (readonly [string, number])[] = [
  ['refer', 2], // linking or renaming a file into another directory (on ABI 1: always refused)
  ['truncate', 3],
  ['bind_tcp', 4],
  ['connect_tcp', 4],
  ['ioctl_dev', 5],
  ['abstract_unix_socket', 6], // scopes: IPC out of the domain
  ['signal', 6],
];

/** The rights a ruleset on Landlock ABI `abi` cannot handle, oldest first. */
export function unhandledRights(abi: number): string[] {
  return HANDLED_SINCE.filter(([, since]) => abi < since).map(([name]) => name);
}

/** What a session launched through the library API (or the demo) records: it confines nothing. */
export const IN_PROCESS_LAUNCH: Confinement = Object.freeze(
  notConfined('launched in-process (library API or demo): only `resource-plane serve` confines itself'),
) as Confinement;
