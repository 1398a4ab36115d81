// The only module that loads the addon (native/), and what every call into it shares: the error
// a rejection becomes, with a stable `code`. Each module beside this one types and wraps the slice
// of the binding its native/bind_*.cc registers: export.ts (bind_workdir, bind_exports, bind_stream), landing.ts,
// landlock.ts, sockets.ts; for-tests.ts holds what only tests and the bench call.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
// node-gyp-build picks the prebuild (or a local build/Release). RESOURCE_PLANE_ADDON, an absolute
// path to another build of native/, is loaded instead: `npm run test:asan` uses it to run the suite
// against an ASan/UBSan build (fuzz/asan/test-asan.sh). Whoever sets a process's environment can
// already preload code into it, so this grants nothing new.
const addonOverride = process.env.RESOURCE_PLANE_ADDON;
/** The loaded addon, untyped: each module of src/addon types the slice of it that it uses. */
export const addon: unknown = addonOverride ? require(addonOverride) : require('node-gyp-build')(packageRoot);

/** Every code the addon can reject with; src/codes.ts (NATIVE_TO_CODE) maps each one to a wire code. */
export type NativeCode =
  | 'NOT_FOUND'
  | 'OUTSIDE_ROOT'
  | 'SYMLINK_REFUSED'
  | 'NOT_A_REGULAR_FILE'
  | 'TOO_LARGE'
  | 'UNSAFE_INBOX'
  | 'CANCELLED'
  | 'TIME_BUDGET'
  | 'FILE_CHANGED'
  | 'IO_ERROR';

/** The codes as the addon itself lists them (read from its code table, not restated here). */
export const NATIVE_CODES: readonly string[] = Object.freeze([...(addon as { codes: string[] }).codes]);

export class NativeError extends Error {
  readonly code: NativeCode;
  readonly detail: string;
  readonly errno: number;
  constructor(code: NativeCode, detail: string, errno: number) {
    super(detail ? `${code}: ${detail}` : code);
    this.name = 'NativeError';
    this.code = code;
    this.detail = detail;
    this.errno = errno;
  }
}

export function nativeError(raw: unknown): NativeError {
  const e = raw as { code?: string; detail?: string; errno?: number; message?: string };
  const code = (NATIVE_CODES.includes(e.code ?? '') ? e.code : 'IO_ERROR') as NativeCode;
  return new NativeError(code, e.detail ?? e.message ?? '', e.errno ?? 0);
}

/** Rejections from the pool carry no JS stack; re-raised as NativeError with the caller's. */
export async function call<T>(op: Promise<T>): Promise<T> {
  try {
    return await op;
  } catch (raw) {
    throw nativeError(raw);
  }
}
