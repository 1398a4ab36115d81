// Every bound of the server, in one table: times, counts and sizes against a client, a peer or a
// capsule that would exhaust the host, and the defaults of the options that set them. The README's
// *Limits* table is held against this file (test/audits/limits.test.ts), so a bound cannot change
// without its row. The size thresholds of the export path are the addon's (native/limits.h, each with
// its reason), re-exported here as ADDON_LIMITS; nothing restates one.
export { LIMITS as ADDON_LIMITS, DEFAULT_DIGEST_CACHE_ENTRIES } from './addon/export.js';

// ── The listener ──────────────────────────────────────────────────────────────────────────────────

/**
 * The listener's limits against slow and many clients. Every one of them ends a connection that is
 * not making progress, so a crowd of idle or trickling clients cannot hold the server; oversized
 * request lines and headers are refused by Node's parser (431) before routing.
 */
export const LIMITS = Object.freeze({
  /** The whole header block must arrive within this. */
  headersTimeoutMs: 10_000,
  /** The whole request must arrive within this. */
  requestTimeoutMs: 30_000,
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: 5_000,
  /** A connection on which nothing moves (a client that does not drain its response) is cut after this. */
  idleTimeoutMs: 20_000,
  /** Request line plus headers. */
  maxHeaderBytes: 16 * 1024,
  /** Connections beyond this are closed as they arrive. */
  maxConnections: 1024,
});

/** Pipelined requests one connection may have waiting before it is cut. */
export const MAX_QUEUED_PER_CONNECTION = 64;

/** How long shutdown lets responses being sent finish; then every connection is cut. */
export const DRAIN_TIMEOUT_MS = 10_000;

/** Everything in flight is given the drain's bound and this much more after SIGINT, SIGTERM or the control channel closing. */
export const SHUTDOWN_GRACE_MS = 5_000;

// ── Memory and listings ───────────────────────────────────────────────────────────────────────────

/** Bytes held for clients at once (`--memory-budget`): bodies, snapshots, listings, idle buffers. */
export const DEFAULT_MEMORY_BUDGET_BYTES = 256 * 1024 * 1024;
/** How long a request waits for its share before it is refused. */
export const DEFAULT_BUDGET_WAIT_MS = 2_000;
/** Idle pooled buffers give their pages back once no buffer was taken for this long. */
export const POOL_IDLE_MS = 5_000;

/**
 * The largest snapshot a read may hold without a budget; with one, a quarter of it (so a few
 * changing files cannot take all of it).
 */
export const DEFAULT_SNAPSHOT_MAX_BYTES = 64 * 1024 * 1024;

/** How long one listing may run before it answers io_error saying so (`--listing-budget`). */
export const DEFAULT_LISTING_BUDGET_MS = 30_000;
/** Listings of one root running at once; each holds a pool thread while it hashes. */
export const MAX_CONCURRENT_LISTINGS = 2;

/** The most entries the digest cache may be given (`--digest-cache-entries`): 2^24, ~1.6 GiB at ~100 bytes each. */
export const MAX_DIGEST_CACHE_ENTRIES = 2 ** 24;

/** How often a stalled send under a lease asks whether a writer waits for it. */
export const LEASE_POLL_MS = 50;

// ── The trace and the logs ────────────────────────────────────────────────────────────────────────

/** Characters of a caller-chosen field kept in the trace; the rest is summarised by a marker. */
export const TRACE_FIELD_MAX_CHARS = 512;

/** Traced refusals a client may burst. */
export const REFUSAL_BURST = 1000;
/** Traced refusals a client earns per second after the burst. */
export const REFUSALS_PER_SECOND = 100;
/** Traced refusals all clients together may burst. */
export const SERVER_REFUSAL_BURST = 2000;
/** Traced refusals all clients together earn per second (`--refusal-trace-rate`): the trace's fixed rate of refusal lines. */
export const SERVER_REFUSALS_PER_SECOND = 200;
/** How often summaries of suppressed refusals are written. */
export const SUMMARY_INTERVAL_MS = 10_000;
/** Clients summarised by address per interval (those with most suppressed); the rest share one line. */
export const NAMED_SUMMARIES = 16;
/** Clients tracked at once; the oldest is forgotten (it starts again with a full bucket). */
export const MAX_TRACKED_CLIENTS = 4096;

/** How long an access line may wait in the buffer before it is written. */
export const ACCESS_LOG_FLUSH_MS = 1000;
/** Buffered access lines are written once this many bytes are waiting (about 120 lines). */
export const ACCESS_LOG_BUFFER_BYTES = 32 * 1024;

// ── The handle key ────────────────────────────────────────────────────────────────────────────────

/**
 * The most MACs one unlock of the instance key computes: what bounds how long the key is readable
 * at a time (docs/security.md gives the measured window).
 */
export const MAC_BATCH_MAX = 32;

// ── Inputs read from the capsule and from peers ───────────────────────────────────────────────────

/** A manifest is a few KiB; anything near this is not one. */
export const MANIFEST_MAX_BYTES = 1024 * 1024;

/** The largest file fetch-peer-file lands unless the launch says otherwise (`--fetch-max-bytes`). */
export const DEFAULT_FETCH_MAX_BYTES = 10 * 1024 * 1024;
export const FETCH_CONNECT_TIMEOUT_MS = 5_000;
export const FETCH_TOTAL_TIMEOUT_MS = 60_000;

/** An agent card is a few hundred bytes; anything near this is not a card. */
export const CARD_MAX_BYTES = 64 * 1024;
export const CARD_CONNECT_TIMEOUT_MS = 5_000;
export const CARD_TOTAL_TIMEOUT_MS = 10_000;

// ── The command-line client ───────────────────────────────────────────────────────────────────────

/** The listing body `ls` reads at most, unless --max-bytes says otherwise (about 300,000 entries). */
export const LIST_MAX_BYTES = 64 * 1024 * 1024;
/** The file `get` saves at most, unless --max-bytes says otherwise. */
export const GET_MAX_BYTES = 1024 * 1024 * 1024;
/** `mirror`'s connections (and files in flight) at once, unless --jobs says otherwise. */
export const DEFAULT_JOBS = 4;
/** The most `--jobs` may ask for. */
export const MAX_JOBS = 64;
/** `mirror`'s GETs of a file whose etag is not its listed digest, before it is reported as changed. */
export const CHANGED_ATTEMPTS = 3;
/**
 * Directory descriptors `mirror` keeps open beyond those in use: a tree of many directories must
 * not run the process out of descriptors (a soft limit of 1,024 is common), and reopening one
 * costs a walk of opens from the root.
 */
export const MAX_IDLE_DIRS = 64;
