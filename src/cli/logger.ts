// The CLI's logger: JSON lines on stderr, errors reduced to what cannot carry a token.
import { pino, type Logger, type LoggerOptions } from 'pino';
import { redactHandles } from '../redact.js';
import { ACCESS_LOG_BUFFER_BYTES, ACCESS_LOG_FLUSH_MS } from '../limits.js';


function options(): LoggerOptions {
  return {
    level: process.env.RESOURCE_PLANE_LOG_LEVEL ?? 'info',
    base: { pid: process.pid },
    // An error is logged by type, code and redacted message only: Node errors can carry raw
    // request bytes (rawPacket), URLs and paths, any of which may hold a handle token.
    serializers: {
      err: (e: unknown) => {
        const err = e as { name?: unknown; code?: unknown; message?: unknown } | null;
        return { type: String(err?.name ?? typeof e), code: err?.code ?? null, message: redactHandles(String(err?.message ?? e)) };
      },
    },
  };
}

/** One line per call, written at once (one `write` each). */
export function stderrLogger(): Logger {
  return pino(options(), pino.destination(2));
}

export interface StderrLogs {
  /** Every line but the access log's: written at once, after whatever access lines are buffered. */
  logger: Logger;
  /** The access log: buffered, written when the buffer fills, at least every ACCESS_LOG_FLUSH_MS, and at exit. */
  access: Logger;
  /** Writes what is buffered, synchronously (for exit). */
  flushSync(): void;
}

/**
 * The serve process's two loggers on one stderr stream. Access lines (one per request) are
 * buffered, as nginx's `access_log … buffer=` does, so a request costs no `write` of its own; any
 * other line writes the buffer out behind it, so stderr stays in order. A process that is killed
 * (SIGKILL, OOM) loses at most the last ACCESS_LOG_FLUSH_MS of access lines; the trace, written
 * per event, is the record.
 */
export function stderrLogs(): StderrLogs {
  const dest = pino.destination({ dest: 2, sync: true, minLength: ACCESS_LOG_BUFFER_BYTES, periodicFlush: ACCESS_LOG_FLUSH_MS });
  const flushSync = () => {
    try {
      dest.flushSync();
    } catch {
      // stderr closed (EPIPE): nothing can be said about it anywhere.
    }
  };
  const logger = pino(
    {
      ...options(),
      hooks: {
        logMethod(args, method) {
          method.apply(this, args);
          dest.flush();
        },
      },
    },
    dest,
  );
  const access = pino(options(), dest);
  process.on('exit', flushSync);
  return { logger, access, flushSync };
}
