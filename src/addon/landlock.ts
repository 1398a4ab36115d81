// Confinement (Landlock) and the re-exec (native/bind_landlock.cc). Synchronous, and meant for the
// JS main thread: a Landlock domain binds the thread that asks for it (and what that thread creates
// afterwards), never the pool threads that already exist. See src/launch/confine-apply.ts for how
// a launch makes that cover every thread.
import { addon } from './load.js';

/** Every code a confinement call can answer with, as the addon lists them. */
export type LandlockCode =
  | 'LANDLOCK_UNSUPPORTED'
  | 'LANDLOCK_DISABLED'
  | 'NOT_MAIN_THREAD'
  | 'RULE_PATH_UNAVAILABLE'
  | 'RULESET_FAILED'
  | 'NO_NEW_PRIVS_FAILED'
  | 'RESTRICT_FAILED'
  | 'EXEC_FAILED';

/** Filesystem access rights by their Landlock names (LANDLOCK_ACCESS_FS_<NAME>, lower-cased). */
export type LandlockFsRight =
  | 'execute'
  | 'write_file'
  | 'read_file'
  | 'read_dir'
  | 'remove_dir'
  | 'remove_file'
  | 'make_char'
  | 'make_dir'
  | 'make_reg'
  | 'make_sock'
  | 'make_fifo'
  | 'make_block'
  | 'make_sym'
  | 'refer'
  | 'truncate'
  | 'ioctl_dev';

export interface LandlockStatus {
  ok: boolean;
  /** 'OK' or a LandlockCode. */
  code: 'OK' | LandlockCode;
  errno: number;
  detail: string;
}

/**
 * One path-beneath rule. `path` must be absolute and free of symlinks (it is opened refusing
 * every one); `directory` says what it must be. An `optional` rule whose path cannot be opened
 * is skipped and reported; a required one fails the call before anything is restricted.
 */
export interface LandlockPathRule {
  path: string;
  access: LandlockFsRight[];
  directory: boolean;
  optional: boolean;
}

export interface LandlockPlan {
  paths: LandlockPathRule[];
  /** TCP ports the process may bind (0: an ephemeral port); applied where the ABI has network rules. */
  bindPorts: number[];
  /** false leaves outbound TCP unrestricted. */
  restrictConnect: boolean;
  connectPorts: number[];
}

export interface LandlockApplied extends LandlockStatus {
  abi: number;
  handledFs: LandlockFsRight[];
  handledNet: ('bind_tcp' | 'connect_tcp')[];
  scoped: ('abstract_unix_socket' | 'signal')[];
  /** Optional rules left out because their path could not be opened (index into plan.paths). */
  skipped: { index: number; errno: number; detail: string }[];
}

const binding = addon as {
  landlockCodes: string[];
  landlockAbi(): LandlockStatus & { abi: number };
  landlockRestrictSelf(plan: LandlockPlan): LandlockApplied;
  replaceProcessImage(call: { path: string; argv: string[]; env: string[]; keep: number[] }): LandlockStatus;
};

export const LANDLOCK_CODES: readonly string[] = Object.freeze([...binding.landlockCodes]);

/** The Landlock ABI the kernel offers; `abi` 0 with a code where it offers none. */
export function landlockAbi(): LandlockStatus & { abi: number } {
  return binding.landlockAbi();
}

/**
 * Builds the ruleset, sets no_new_privs and restricts the calling thread, which must be the main
 * thread. On success that thread is confined for good; threads that already exist are not.
 */
export function landlockRestrictSelf(plan: LandlockPlan): LandlockApplied {
  return binding.landlockRestrictSelf(plan);
}

/**
 * execve from the main thread: the new image starts with that one thread (and its Landlock
 * domain). Returns only if execve failed.
 */
export function replaceProcessImage(path: string, argv: string[], env: string[], keep: number[] = []): LandlockStatus {
  return binding.replaceProcessImage({ path, argv, env, keep });
}

// ── sockets (native/sockets.h): the first stage's listeners, activation, sd_notify ──────────────
