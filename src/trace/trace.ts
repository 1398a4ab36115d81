// The append-only audit trace (trace.jsonl, SPEC section 8). One JSON object per line, each line
// one write(2) on an O_APPEND descriptor so concurrent lines never interleave. An append is all or
// nothing: a write the disk cut short is rolled back to the start of its line (ftruncate), so every
// line parses whatever the disk did, and the next append, once there is room, starts a line. Every line passes the
// redaction boundary here: any `mh1.<seg>.<seg>` in it becomes `<handle:<id>>`, whoever built it.
// A write that fails rejects, and callers send no file bytes unless their event was written.
import { createHash, randomFillSync } from 'node:crypto';
import { closeSync, constants, fstatSync, fsync, ftruncateSync, mkdirSync, openSync, write, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { redactHandles } from '../redact.js';
import { sessionEnd, type TraceEvent, type TraceFields } from './events.js';
import { TRACE_FIELD_MAX_CHARS } from '../limits.js';

export type { TraceFields } from './events.js';

/**
 * Fields whose text a caller chooses: a path, an asserted audience, a peer, a reason a peer
 * supplied, and a mint's audience (derived from the name on the recipient's card, up to 64 KiB).
 */
const CALLER_FIELDS = new Set(['path', 'audience_asserted', 'audience', 'peer', 'reason']);

/**
 * A caller-chosen string as the trace stores it: up to TRACE_FIELD_MAX_CHARS characters, then a
 * marker with the original length and a short hash of the whole value, so a client cannot grow the
 * trace faster than it grows its own requests, and two long values can still be told apart.
 * Tokens are redacted first, so a cut never leaves part of one behind.
 */
export function boundedField(value: string): string {
  const text = redactHandles(value);
  if (text.length <= TRACE_FIELD_MAX_CHARS) return text;
  const digest = createHash('sha256').update(text, 'utf8').digest('hex').slice(0, 16);
  return `${text.slice(0, TRACE_FIELD_MAX_CHARS)}…[${text.length} chars, sha256:${digest}]`;
}

export class TraceWriteError extends Error {
  constructor(cause: unknown) {
    super(`the trace could not be written (${(cause as NodeJS.ErrnoException)?.code ?? 'unknown error'})`);
    this.name = 'TraceWriteError';
  }
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));
/** Random bytes fetched in bulk: one getrandom per 409 ids rather than per id. */
const pool = Buffer.alloc(4096);
let poolAt = pool.length;
let lastMs = -1;
let counter = 0;

/**
 * `evt_` + a UUIDv7 as 32 lowercase hex (RFC 9562): 48 bits of Unix ms, version 7, a 12-bit
 * counter (method 1, seeded at random each millisecond) so ids made in one millisecond still sort
 * in creation order, the variant, and 62 random bits.
 */
export function newEventId(): string {
  let ms = Date.now();
  if (ms > lastMs) {
    lastMs = ms;
    counter = -1;
  } else {
    ms = lastMs;
  }
  if (poolAt + 10 > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  const r = poolAt;
  poolAt += 10;
  if (counter < 0)
    counter = ((pool[r]! << 8) | pool[r + 1]!) & 0x7ff; // half the range left to count up
  else if (++counter > 0xfff) {
    // The counter ran out within one millisecond: borrow the next one, as RFC 9562 allows.
    lastMs = ms = lastMs + 1;
    counter = 0;
  }
  let out = 'evt_';
  for (let shift = 40; shift >= 0; shift -= 8) out += HEX[Math.floor(ms / 2 ** shift) & 0xff];
  out += HEX[0x70 | (counter >> 8)]! + HEX[counter & 0xff]!;
  out += HEX[0x80 | (pool[r + 2]! & 0x3f)];
  for (let i = 3; i < 10; i++) out += HEX[pool[r + i]!];
  return out;
}

export class Trace {
  readonly path: string;
  readonly sessionId: string;
  private fd: number;
  /**
   * A regular file takes each line with a synchronous write(2) (page cache; no pool round trip per
   * request). Anything else (a FIFO, a device) could block, so its lines go through the pool.
   */
  private readonly syncWrites: boolean;
  private parentId: string | null = null;
  /** Where a cut-short line began, while its rollback has not succeeded yet: nothing is appended after it. */
  private tornAt: number | null = null;
  private pending = new Set<Promise<void>>();
  /** Lines written, by event type: what `session_end` reports. */
  readonly counts: Record<string, number> = {};

  private constructor(path: string, sessionId: string, fd: number) {
    this.path = path;
    this.sessionId = sessionId;
    this.fd = fd;
    this.syncWrites = fstatSync(fd).isFile();
  }

  /** Opens (creating if needed) the trace for appending. Directories are created 0700. */
  static open(path: string, sessionId: string): Trace {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    // libuv adds O_CLOEXEC to every open. O_NOFOLLOW: a planted link must not redirect the record.
    const flags = constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW;
    return new Trace(path, sessionId, openSync(path, flags, 0o600));
  }

  /**
   * Writes `session_start` (its event id becomes every later event's parent_id). Synchronous so
   * that a launch that cannot record its own start fails before it serves anything.
   */
  start(event: TraceEvent<'session_start'>): string {
    const id = newEventId();
    const line = this.render('session_start', id, null, event.fields);
    const buf = Buffer.from(line);
    if (this.syncWrites) {
      this.appendLine(buf);
    } else {
      try {
        let off = 0;
        // A pipe or device takes what it takes; there is nothing to roll back on one.
        while (off < buf.length) off += writeSync(this.fd, buf.subarray(off));
      } catch (error) {
        throw new TraceWriteError(error);
      }
    }
    this.parentId = id;
    return id;
  }

  /** Appends one event (built by trace/events.ts); resolves once the line is written, rejects with TraceWriteError. */
  record(event: TraceEvent): Promise<void> {
    return this.append(event.type, event.fields);
  }

  private append(eventType: string, fields: TraceFields): Promise<void> {
    if (this.parentId === null) return Promise.reject(new TraceWriteError(new Error('session_start not written')));
    const buf = Buffer.from(this.render(eventType, newEventId(), this.parentId, fields));
    if (this.syncWrites) {
      try {
        this.appendLine(buf);
      } catch (error) {
        return Promise.reject(error);
      }
      this.counts[eventType] = (this.counts[eventType] ?? 0) + 1;
      return Promise.resolve();
    }
    const op = new Promise<void>((resolve, reject) => {
      write(this.fd, buf, 0, buf.length, null, (error, written) => {
        if (error) reject(new TraceWriteError(error));
        else if (written !== buf.length) reject(new TraceWriteError(new Error('short write')));
        else {
          this.counts[eventType] = (this.counts[eventType] ?? 0) + 1;
          resolve();
        }
      });
    });
    this.pending.add(op);
    const forget = () => this.pending.delete(op);
    op.then(forget, forget);
    return op;
  }

  /**
   * Appends one whole line to a regular file with one write(2), or nothing: a write the disk cut
   * short (a full filesystem takes the last bytes of a page, then ENOSPC) is rolled back to where
   * the line began. The line is then lost, and the caller fails its request closed; if even the
   * rollback fails, the next append tries it again first and appends nothing until it succeeds.
   * Throws TraceWriteError.
   */
  private appendLine(buf: Buffer): void {
    if (this.fd < 0) throw new TraceWriteError(Object.assign(new Error('trace closed'), { code: 'EBADF' }));
    this.rollBack();
    let written: number;
    try {
      written = writeSync(this.fd, buf);
    } catch (error) {
      throw new TraceWriteError(error); // write(2) failed having written nothing
    }
    if (written === buf.length) return;
    try {
      // O_APPEND put the line at the end, and this process is the only writer: it began `written`
      // bytes before the end.
      this.tornAt = fstatSync(this.fd).size - written;
    } catch (error) {
      throw new TraceWriteError(error);
    }
    this.rollBack();
    throw new TraceWriteError(Object.assign(new Error(`the disk took ${written} of ${buf.length} bytes`), { code: 'ENOSPC' }));
  }

  /** Truncates a cut-short line away, if one is left; throws TraceWriteError while it cannot. */
  private rollBack(): void {
    if (this.tornAt === null) return;
    try {
      ftruncateSync(this.fd, this.tornAt);
    } catch (error) {
      throw new TraceWriteError(error);
    }
    this.tornAt = null;
  }

  /**
   * Writes `session_end` (after every line still in flight, so it is the last), then closes. A
   * trace that cannot take the line is closed all the same: the session is ending either way.
   */
  async end(reason: string): Promise<void> {
    await Promise.allSettled([...this.pending]);
    if (this.fd >= 0 && this.parentId !== null) {
      await this.record(sessionEnd({ reason, counts: { ...this.counts } })).catch(() => undefined);
    }
    await this.close();
  }

  /** Waits for in-flight lines, flushes to disk and closes. Idempotent. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.pending]);
    if (this.fd < 0) return;
    const fd = this.fd;
    this.fd = -1;
    await new Promise<void>((resolve) => fsync(fd, () => resolve()));
    closeSync(fd);
  }

  private render(eventType: string, id: string, parentId: string | null, fields: TraceFields): string {
    const event = {
      event_type: eventType,
      event_id: id,
      parent_id: parentId,
      session_id: this.sessionId,
      timestamp: Date.now(),
      ...fields,
    };
    for (const key of CALLER_FIELDS) {
      const v = (event as Record<string, unknown>)[key];
      if (typeof v === 'string') (event as Record<string, unknown>)[key] = boundedField(v);
    }
    // undefined would silently drop a key; the schema wants explicit nulls. A flat event (every
    // request's) is fixed up in place: a replacer function puts JSON.stringify on its slow path.
    const flat = event as Record<string, unknown>;
    let nested = false;
    for (const key in flat) {
      const v = flat[key];
      if (v === undefined) flat[key] = null;
      else if (typeof v === 'object' && v !== null) nested = true;
    }
    const json = nested ? JSON.stringify(event, (_k, v) => (v === undefined ? null : v)) : JSON.stringify(event);
    // Token characters never need JSON escaping, so redacting the rendered line is exact.
    return `${redactHandles(json)}\n`;
  }
}
