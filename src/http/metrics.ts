// Prometheus metrics, only when asked for (`serve --metrics`, `--metrics-listen`, or createMetrics for
// the plugin): prom-client is loaded then and not before, so a server without metrics pays nothing
// for it. The process and runtime metrics keep prom-client's standard names (process_*, nodejs_*),
// so existing dashboards work; ours are resource_plane_*. Counts what was answered, never what was
// asked for: no path, handle or audience appears in a label.
import type { Registry } from 'prom-client';
import * as native from '../addon/export.js';

export interface Metrics {
  registry: Registry;
  /** One answered request of a plane, by outcome (a catalogued code or `ok`), with the bytes sent. */
  answered(plane: 'files' | 'peer', kind: 'list' | 'read' | 'redeem', outcome: string, bytes: number): void;
  /** How long one such request took, from the plane taking it until its response closed. */
  took(plane: 'files' | 'peer', outcome: string, seconds: number): void;
}

export interface MetricsSources {
  /** Bytes held by reads in flight (a session's `memory.inUse`). */
  memoryInUse(): number;
}

/** Buckets of the request-duration histogram, in seconds: a cached 1 KiB read to a slow large body. */
export const DURATION_BUCKETS = Object.freeze([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]);

/**
 * A registry with the process's default metrics and the planes' own. Pass the result to the
 * plugin's `metrics` option and serve `metrics.registry.metrics()` where your scraper looks.
 */
export async function createMetrics(sources: MetricsSources): Promise<Metrics> {
  const client = await import('prom-client');
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry });
  const requests = new client.Counter({
    name: 'resource_plane_requests_total',
    help: 'Requests answered by a plane, by plane, kind and outcome (ok or a catalogued code)',
    labelNames: ['plane', 'kind', 'outcome'] as const,
    registers: [registry],
  });
  const bytes = new client.Counter({
    name: 'resource_plane_sent_bytes_total',
    help: 'File bytes sent by a plane',
    labelNames: ['plane'] as const,
    registers: [registry],
  });
  new client.Gauge({
    name: 'resource_plane_memory_budget_in_use_bytes',
    help: 'Bytes held by reads and redeems in flight',
    registers: [registry],
    collect() {
      this.set(sources.memoryInUse());
    },
  });
  // The digest cache is the process's one (native/digest_cache.h): read at each scrape. Its counts
  // only grow, so they are counters, set to the addon's totals when collected.
  const cacheTotal = (name: string, help: string, pick: (s: native.DigestCacheStats) => number) =>
    new client.Counter({
      name,
      help,
      registers: [registry],
      collect() {
        this.reset();
        this.inc(pick(native.digestCacheStats()));
      },
    });
  const cacheGauge = (name: string, help: string, pick: (s: native.DigestCacheStats) => number) =>
    new client.Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(pick(native.digestCacheStats()));
      },
    });
  cacheTotal(
    'resource_plane_digest_cache_hits_total',
    'Whole-file digests answered from the digest cache instead of hashing (listings and large reads)',
    (s) => s.hits,
  );
  cacheTotal('resource_plane_digest_cache_hashes_total', 'Files hashed whole by listings and large reads (in or beside the digest cache)', (s) => s.hashes);
  cacheTotal('resource_plane_digest_cache_stores_total', 'Digests stored in the digest cache', (s) => s.stores);
  cacheTotal(
    'resource_plane_digest_cache_evictions_total',
    'Digests evicted from the digest cache to stay within its capacity (--digest-cache-entries)',
    (s) => s.evictions,
  );
  cacheGauge('resource_plane_digest_cache_entries', 'Digests the digest cache holds', (s) => s.entries);
  cacheGauge('resource_plane_digest_cache_capacity_entries', 'Most digests the digest cache keeps (--digest-cache-entries)', (s) => s.capacity);
  cacheGauge('resource_plane_digest_cache_bytes', 'Memory the digest cache holds, beside the memory budget', (s) => s.bytes);
  const duration = new client.Histogram({
    name: 'resource_plane_request_duration_seconds',
    help: 'Seconds from a plane taking a request until its response closed (sent, cut or abandoned), by plane and outcome',
    labelNames: ['plane', 'outcome'] as const,
    buckets: [...DURATION_BUCKETS],
    registers: [registry],
  });
  return {
    registry,
    answered(plane, kind, outcome, sent) {
      requests.inc({ plane, kind, outcome });
      if (sent > 0) bytes.inc({ plane }, sent);
    },
    took(plane, outcome, seconds) {
      duration.observe({ plane, outcome }, seconds);
    },
  };
}
