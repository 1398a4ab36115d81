// The bench's chart (bench/chart.mjs): generic over the rows (a case added to the bench is a row
// of the chart with no change here), and the chart docs/performance.md shows is the one the
// committed run draws (node bench/chart.mjs bench/results.json docs/bench/bench.svg).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
type Chart = {
  chartRows: (
    summary: unknown,
    servers: Array<{ id: string; label: string }>,
    cases: Array<{ id: string; name: string; size?: number }>,
  ) => Array<{ label: string; unit: string; values: Array<number | null> }>;
  renderChartSvg: (rows: unknown, servers: unknown, caption: string) => string;
  chartOfResults: (results: unknown, cases: unknown) => string;
  casesOfResults: (results: unknown) => unknown;
};
const load = async () => (await import(pathToFileURL(join(ROOT, 'bench/chart.mjs')).href)) as Chart;

const stat = (median: number) => ({ median, min: median, max: median, n: 1 });

describe('the bench chart', () => {
  it('draws a row per case, in order, with a bar per server, whatever the cases are', async () => {
    const { chartRows, renderChartSvg } = await load();
    const servers = [
      { id: 'nginx', label: 'nginx' },
      { id: 'ours', label: 'ours' },
    ];
    const cases = [
      { id: '1k', name: '1 KiB', size: 1024 },
      { id: 'writer1m', name: '1 MiB under an in-place writer', size: 1024 * 1024 },
    ];
    const summary = {
      reads: {
        'nginx/1k': { rps: stat(20000), mbps: stat(20) },
        'ours/1k': { rps: stat(5000), mbps: stat(5) },
        'ours/writer1m': { rps: stat(100), mbps: stat(104.5) },
      },
    };
    const rows = chartRows(summary, servers, cases);
    expect(rows).toEqual([
      { label: '1 KiB read', unit: 'req/s', values: [20000, 5000] },
      { label: '1 MiB under an in-place writer read', unit: 'MB/s', values: [null, 104.5] },
    ]);
    const svg = renderChartSvg(rows, servers, 'caption');
    expect(svg).toMatch(/^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    expect(svg).toContain('>20,000<');
    expect(svg).toContain('>not run<');
    expect(svg).toContain('>1 MiB under an in-place writer read<');
  });

  it('the committed chart is what the committed run draws', async () => {
    const { chartOfResults, casesOfResults } = await load();
    const results = JSON.parse(readFileSync(join(ROOT, 'bench/results.json'), 'utf8')) as unknown;
    expect(readFileSync(join(ROOT, 'docs/bench/bench.svg'), 'utf8')).toBe(chartOfResults(results, casesOfResults(results)));
  });
});
