// Served capsules for the properties of round two (time, change between requests, concurrency,
// redaction): launched the way the in-process API launches one (src/launch/launch.ts), with what
// the shared fixture does not offer: a clock the test controls (Session.now) and every log line the
// listener writes captured in memory (the CLI's own pino logger, level trace, its stream swapped).
// A pair is a capsule that shares and a peer whose agent card gives the audience (and which may
// fetch back from the first).
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import { launch, type Launched } from '../../src/launch/launch.js';
import { stderrLogger } from '../../src/cli/logger.js';
import { parseManifest } from '../../src/manifest/model.js';
import type { ResolverKind } from '../../src/addon/export.js';
import type { Containment } from '../../src/wire.js';

/** A clock the test sets; the session reads it wherever it mints or verifies a handle. */
export class TestClock {
  t: number;
  constructor(start = Date.now()) {
    this.t = start;
  }
  readonly now = (): number => this.t;
}

/** The CLI's logger (src/cli/logger.ts: its serializers, its redaction) writing into `lines`. */
export function capturedLogger(lines: string[]): Logger {
  const logger = stderrLogger();
  logger.level = 'trace';
  // pino writes through the stream held at this symbol; child loggers inherit it.
  (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] = { write: (s: string) => void lines.push(s) };
  return logger;
}

export interface Served {
  launched: Launched;
  url: string;
  port: number;
  /** `127.0.0.1:<port>`, what a peer passes to reach it. */
  address: string;
  /** `<name>@localhost:<port>`: what its card yields. */
  audience: string;
  tracePath: string;
  workdir: string;
  logs: string[];
  trace(): string;
  close(): Promise<void>;
}

export interface ServeOptions {
  workdir: string;
  yaml: string;
  traceDir: string;
  clock?: TestClock;
  containment?: Containment;
  resolver?: ResolverKind;
  memoryBudgetBytes?: number;
  /** fetch-peer-file's cap (default 10 MiB). */
  fetchMaxBytes?: number;
}

export async function serveCapsule(opts: ServeOptions): Promise<Served> {
  mkdirSync(opts.traceDir, { recursive: true });
  const tracePath = join(opts.traceDir, `trace-${randomBytes(6).toString('hex')}.jsonl`);
  const logs: string[] = [];
  const launched = await launch({
    workdir: opts.workdir,
    manifest: parseManifest(opts.yaml),
    tracePath,
    containment: opts.containment,
    resolver: opts.resolver,
    memoryBudgetBytes: opts.memoryBudgetBytes,
    ...(opts.fetchMaxBytes !== undefined ? { fetchMaxBytes: opts.fetchMaxBytes } : {}),
    logger: capturedLogger(logs),
    ...(opts.clock ? { now: opts.clock.now } : {}),
  });
  const url = launched.server.url;
  const port = Number(new URL(url).port);
  return {
    launched,
    url,
    port,
    address: `127.0.0.1:${port}`,
    audience: `${launched.session.manifest.name}@localhost:${port}`.toLowerCase(),
    tracePath,
    workdir: opts.workdir,
    logs,
    trace: () => readFileSync(tracePath, 'utf8'),
    close: async () => void (await launched.stop()),
  };
}
