// The CLI's logger: JSON lines on stderr, errors reduced to what cannot carry a token.
import { writeSync } from 'node:fs';
import { pino, type Logger, type LoggerOptions } from 'pino';
import { redactHandles } from '../redact.js';
import { ACCESS_LOG_BUFFER_BYTES, ACCESS_LOG_FLUSH_MS } from '../limits.js';
import type { AccessLogger, CompletedLine } from '../http/admission.js';

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

/** pino's level numbers, by the names the access log is written at. */
const LEVEL = { debug: 20, info: 30 } as const;

/**
 * The access log's writer: pino's line shape (`level`, `time`, `pid`, the bindings, the fields,
 * `msg`) built by hand into the buffered stream. An access line is all this process writes per
 * request, so it skips pino's generic serialisation: its fields are plain data, built by admission
 * (the target already redacted), never an error or a caller's object.
 */
export class AccessLog implements AccessLogger {
  constructor(
    private readonly dest: { write(line: string): unknown },
    /** `,"pid":N` and every binding, as JSON members. */
    private readonly members: string,
    private readonly threshold: number,
  ) {}

  isLevelEnabled(level: string): boolean {
    return (LEVEL[level as keyof typeof LEVEL] ?? 0) >= this.threshold;
  }

  info(fields: object, msg: string): void {
    this.write(LEVEL.info, fields, msg);
  }

  debug(fields: object, msg: string): void {
    this.write(LEVEL.debug, fields, msg);
  }

  /** The access line, built straight from its fields: the same text info() writes for them. */
  completed(level: keyof typeof LEVEL, f: CompletedLine): void {
    const n = LEVEL[level];
    if (n < this.threshold) return;
    this.dest.write(
      `${this.head(n)},"reqId":${JSON.stringify(f.reqId)},"req":{"method":${JSON.stringify(f.method)},` +
        `"url":${JSON.stringify(f.url)}},"res":{"statusCode":${jsonNumber(f.statusCode)}},"responseTime":${jsonNumber(f.responseTime)},` +
        `"bytes":${jsonNumber(f.bytes)},"msg":"request completed"}\n`,
    );
  }

  child(bindings: Record<string, unknown>): AccessLog {
    return new AccessLog(this.dest, `${this.members}${jsonMembers(bindings)}`, this.threshold);
  }

  private write(level: number, fields: object, msg: string): void {
    if (level < this.threshold) return;
    this.dest.write(`${this.head(level)}${jsonMembers(fields)},"msg":${JSON.stringify(msg)}}\n`);
  }

  /** pino's opening members, in its order: level, time, pid and the bindings. */
  private head(level: number): string {
    return `{"level":${level},"time":${Date.now()}${this.members}`;
  }
}

/** A number as JSON writes it (a non-finite one is null). */
function jsonNumber(n: number): string {
  return Number.isFinite(n) ? String(n) : 'null';
}

/** An object's members as JSON text after a comma (`,"a":1,"b":2`), or nothing for an empty one. */
function jsonMembers(value: object): string {
  const text = JSON.stringify(value);
  return text.length > 2 ? `,${text.slice(1, -1)}` : '';
}

export interface StderrLogs {
  /** Every line but the access log's: written at once, after whatever access lines are buffered. */
  logger: Logger;
  /** The access log: buffered, written when the buffer fills, at least every ACCESS_LOG_FLUSH_MS, and at exit. */
  access: AccessLog;
  /** Writes what is buffered, synchronously (for exit). */
  flushSync(): void;
}

/**
 * Access lines waiting to be written: written together once ACCESS_LOG_BUFFER_BYTES are waiting,
 * ACCESS_LOG_FLUSH_MS after the first of them, or when flushed (before any other line, at exit).
 * Not sonic-boom's minLength buffer: it measures its whole buffer's byte length on every write,
 * which cost ten times this per request.
 */
class LineBuffer {
  private lines: string[] = [];
  private size = 0;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(private readonly fd: number) {}

  write(line: string): void {
    if (this.closed) return;
    this.lines.push(line);
    this.size += line.length;
    if (this.size >= ACCESS_LOG_BUFFER_BYTES) this.flush();
    else if (this.timer === null) this.timer = setTimeout(() => this.flush(), ACCESS_LOG_FLUSH_MS).unref();
  }

  /** Writes what is waiting, synchronously: a caller's own line then follows it in order. */
  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.lines.length === 0) return;
    const text = Buffer.from(this.lines.join(''), 'utf8');
    this.lines = [];
    this.size = 0;
    let at = 0;
    while (at < text.length) {
      try {
        at += writeSync(this.fd, text, at);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        // stderr a non-blocking pipe that is full: wait for the reader, as pino's stream does.
        if (code === 'EAGAIN') Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
        else {
          // stderr closed (EPIPE) or gone: nothing can be said about it anywhere, now or later.
          this.closed = true;
          return;
        }
      }
    }
  }
}

/**
 * The serve process's two loggers on one stderr stream. Access lines (one per request) are
 * buffered, as nginx's `access_log … buffer=` does, so a request costs no `write` of its own; any
 * other line writes the buffer out ahead of itself, so stderr stays in order. A process that is killed
 * (SIGKILL, OOM) loses at most the last ACCESS_LOG_FLUSH_MS of access lines; the trace, written
 * per event, is the record.
 */
export function stderrLogs(): StderrLogs {
  const buffered = new LineBuffer(2);
  const flushSync = () => buffered.flush();
  const logger = pino(
    {
      ...options(),
      hooks: {
        logMethod(args, method) {
          buffered.flush();
          method.apply(this, args);
        },
      },
    },
    pino.destination(2),
  );
  // The same level as the other lines (RESOURCE_PLANE_LOG_LEVEL, checked at start): `silent` writes none.
  const level = options().level ?? 'info';
  const threshold = level === 'silent' ? Infinity : (pino.levels.values[level] ?? LEVEL.info);
  const access = new AccessLog(buffered, `,"pid":${process.pid}`, threshold);
  process.on('exit', flushSync);
  return { logger, access, flushSync };
}
