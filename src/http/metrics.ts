// Prometheus metrics, only when asked for (`serve --metrics`): prom-client is loaded then and not
// before, so a server without metrics pays nothing for it. Counts what was answered, never what was
// asked for: no path, handle or audience appears in a label.
import type { Registry } from 'prom-client';

export interface Metrics {
  registry: Registry;
  /** One answered request of a plane, by outcome (a catalogued code or `ok`), with the bytes sent. */
  answered(plane: 'files' | 'peer', kind: 'list' | 'read' | 'redeem', outcome: string, bytes: number): void;
}

export interface MetricsSources {
  /** Bytes held by reads in flight. */
  memoryInUse(): number;
}

export async function createMetrics(sources: MetricsSources): Promise<Metrics> {
  const client = await import('prom-client');
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry, prefix: 'resource_plane_' });
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
  return {
    registry,
    answered(plane, kind, outcome, sent) {
      requests.inc({ plane, kind, outcome });
      if (sent > 0) bytes.inc({ plane }, sent);
    },
  };
}
