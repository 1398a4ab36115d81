// The one capsule fixture: a workdir (given, or a fresh temp tree), a session over it with its
// trace in a records directory outside the workdir, and its listener on an ephemeral 127.0.0.1
// port, launched the way the in-process API launches one (src/launch/launch.ts). `capsule`
// belongs to the running test and is closed when the test finishes; `openCapsule` belongs to the
// caller (a `beforeAll` that shares it with a describe block closes it in its teardown).
// `offlineCapsule` is a session with no listener (src/session/open-session.ts), for a capsule
// that only calls out.
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { launch, type Launched } from '../../src/launch/launch.js';
import { openSession, type SessionOptions } from '../../src/session/open-session.js';
import { parseManifest } from '../../src/manifest/model.js';
import type { ResolverKind } from '../../src/addon/export.js';
import type { RunningServer } from '../../src/http/listener.js';
import type { Session } from '../../src/session/session.js';
import type { Containment } from '../../src/wire.js';
import { defer } from './cleanup.js';
import { makeTree, removeTree, scratch, tempDir } from './tree.js';

export interface CapsuleOptions {
  /** The whole murmur.yaml. */
  yaml: string;
  /** The workdir to open; when absent a fresh temp directory, removed when the capsule closes. */
  workdir?: string;
  /** Tree-DSL lines (test/helpers/tree.ts) built into the workdir before the session opens. */
  tree?: string[];
  /** The directory the trace file goes in; when absent a fresh one, removed when the capsule closes. */
  traceDir?: string;
  /** Passed to the launch, whose default applies when absent. */
  containment?: Containment;
  resolver?: ResolverKind;
  memoryBudgetBytes?: SessionOptions['memoryBudgetBytes'];
  listingBudgetMs?: SessionOptions['listingBudgetMs'];
  fetchMaxBytes?: SessionOptions['fetchMaxBytes'];
  digestCacheEntries?: SessionOptions['digestCacheEntries'];
  /** `HOST:PORT` or `unix:PATH`: the operator plane on its own listener. */
  operatorListen?: string;
  /** The listener's logger (none when absent). */
  logger?: Logger | false;
}

export interface CapsuleSession {
  session: Session;
  workdir: string;
  tracePath: string;
  /** Closes the listener (if any) and the session, then removes the directories the fixture made. Idempotent. */
  close(): Promise<void>;
}

export interface Capsule extends CapsuleSession {
  /** `http://127.0.0.1:<port>`: where the listener is bound. */
  url: string;
  /** `127.0.0.1:<port>`: what a peer passes to reach this capsule. */
  address: string;
  /** `<name>@localhost:<port>`, lowercased: what its agent card yields and what it asserts. */
  audience: string;
  server: RunningServer;
  /** The operator plane's own listener, when `operatorListen` was given. */
  operator: RunningServer | null;
  /**
   * Launched.stop: the listener and the session stop (`session_end` with `reason`), the
   * directories stay (the trace can still be read); `close()` then only removes them. Idempotent.
   */
  stop(reason?: string): Promise<unknown>;
}

/** A capsule the caller closes. */
export async function openCapsule(opts: CapsuleOptions): Promise<Capsule> {
  const dirs = prepare(opts);
  let launched: Launched;
  try {
    launched = await launch({
      workdir: dirs.workdir,
      manifest: parseManifest(opts.yaml),
      containment: opts.containment,
      tracePath: dirs.tracePath,
      resolver: opts.resolver,
      memoryBudgetBytes: opts.memoryBudgetBytes,
      listingBudgetMs: opts.listingBudgetMs,
      fetchMaxBytes: opts.fetchMaxBytes,
      digestCacheEntries: opts.digestCacheEntries,
      operatorListen: opts.operatorListen,
      logger: opts.logger,
    });
  } catch (error) {
    dirs.remove();
    throw error;
  }
  const port = new URL(launched.server.url).port;
  return {
    session: launched.session,
    workdir: dirs.workdir,
    tracePath: dirs.tracePath,
    url: launched.server.url,
    address: `127.0.0.1:${port}`,
    audience: `${launched.session.manifest.name}@localhost:${port}`.toLowerCase(),
    server: launched.server,
    operator: launched.operator,
    stop: launched.stop,
    close: once(async () => {
      try {
        await launched.stop();
      } finally {
        dirs.remove();
      }
    }),
  };
}

/** A capsule closed when the running test finishes (or earlier, by `close()`). */
export async function capsule(opts: CapsuleOptions): Promise<Capsule> {
  const c = await openCapsule(opts);
  defer(() => c.close());
  return c;
}

/** A session with no listener that advertises `advertise`, closed when the running test finishes. */
export async function offlineCapsule(opts: CapsuleOptions & { advertise: string }): Promise<CapsuleSession> {
  const dirs = prepare(opts);
  let session: Session;
  try {
    session = await openSession({
      workdir: dirs.workdir,
      manifest: parseManifest(opts.yaml),
      containment: opts.containment,
      tracePath: dirs.tracePath,
      resolver: opts.resolver,
      memoryBudgetBytes: opts.memoryBudgetBytes,
      listingBudgetMs: opts.listingBudgetMs,
      advertisedUrl: opts.advertise,
    });
  } catch (error) {
    dirs.remove();
    throw error;
  }
  const c: CapsuleSession = {
    session,
    workdir: dirs.workdir,
    tracePath: dirs.tracePath,
    close: once(async () => {
      try {
        await session.close();
      } finally {
        dirs.remove();
      }
    }),
  };
  defer(() => c.close());
  return c;
}

/** A manifest declaring `exports.files` over `root` (or no plane at all, with `root: null`). */
export function filesManifest(root: string | null, maxBytes?: number): string {
  const head = 'name: plane-test\nversion: "1.0"\n';
  if (root === null) return head;
  return `${head}exports:\n  files:\n    root: ${JSON.stringify(root)}\n    mode: read-only\n${maxBytes === undefined ? '' : `    max_bytes: ${maxBytes}\n`}`;
}

/** The manifest of a capsule named `cap` that exports `out/` read-only: what a launch test serves. */
export const CAP_YAML = 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n';

/** A workdir holding `tree` and CAP_YAML as its murmur.yaml, removed when the running test finishes. */
export function capsuleDir(tree: string[] = ['out/a.txt: a']): string {
  const workdir = scratch(tree);
  writeFileSync(join(workdir, 'murmur.yaml'), CAP_YAML);
  return workdir;
}

/**
 * For a launch that must leave nothing behind: CAP_YAML outside the workdir, a workdir that does
 * not exist yet (two levels down), and a records directory of its own.
 */
export function unmadeCapsule(): { records: string; manifest: string; workdir: string } {
  const base = scratch();
  const manifest = join(base, 'murmur.yaml');
  writeFileSync(manifest, CAP_YAML);
  return { records: scratch(), manifest, workdir: join(base, 'new', 'cap') };
}

/** The workdir (built from `tree`) and the trace path, and how to remove what was made for them. */
function prepare(opts: CapsuleOptions): { workdir: string; tracePath: string; remove(): void } {
  const made: string[] = [];
  const fresh = (prefix: string) => {
    const dir = tempDir(prefix);
    made.push(dir);
    return dir;
  };
  const remove = () => made.splice(0).reverse().forEach(removeTree);
  try {
    const workdir = opts.workdir ?? fresh('rp-capsule-');
    if (opts.tree) makeTree(workdir, opts.tree);
    const tracePath = join(opts.traceDir ?? fresh('rp-records-'), `trace-${randomBytes(6).toString('hex')}.jsonl`);
    return { workdir, tracePath, remove };
  } catch (error) {
    remove();
    throw error;
  }
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  return () => (done ??= fn());
}
