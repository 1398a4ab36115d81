// The bench's one chart: every read row (each case of bench/run.mjs's CASES, in order, whatever
// rows it holds) with a bar per server, so this server's figure sits beside each peer's in the same
// run. Small bodies are drawn in requests per second, bodies of 1 MiB and more in MB/s; each row's
// bars are scaled to that row's best, and every bar carries its number. Plain SVG, no dependency.
//
//   node bench/chart.mjs RESULTS.json OUT.svg     redraws the chart of a saved run
//   (npm run bench -- --out DIR writes DIR/results.json and DIR/bench.svg itself)
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const MiB = 1024 * 1024;
const esc = (s) => String(s).replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
const fmt = (v) => (v >= 100 ? Math.round(v).toLocaleString('en-US') : v >= 10 ? v.toFixed(1) : v.toFixed(2));
const PALETTE = ['#0969da', '#8250df', '#bf8700', '#1a7f37', '#cf222e', '#57606a', '#9a6700', '#0550ae'];

/**
 * The chart's rows from a run's summary: one per case that any server measured, in the cases'
 * order. `cases` entries are `{ id, name, size? }`; a case with no size is drawn in MB/s.
 */
export function chartRows(summary, servers, cases) {
  return cases
    .map((c) => {
      const unit = c.size === undefined || c.size >= MiB ? 'MB/s' : 'req/s';
      const values = servers.map((s) => {
        const r = summary.reads[`${s.id}/${c.id}`];
        const v = unit === 'MB/s' ? r?.mbps?.median : r?.rps?.median;
        return Number.isFinite(v) ? v : null;
      });
      return { label: `${c.name} read`, unit, values };
    })
    .filter((row) => row.values.some((v) => v !== null));
}

/** The SVG of `rows` (from chartRows) for `servers` (`{ id, label }`, the bars of each row). */
export function renderChartSvg(rows, servers, caption) {
  const W = 820;
  const left = 190;
  const barW = W - left - 110;
  const barH = 14;
  const rowH = servers.length * (barH + 3) + 26;
  const legendH = 24;
  const H = 56 + legendH + rows.length * rowH + 10;
  const ours = servers.findIndex((s) => s.id === 'ours');
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12" fill="#24292f">`,
    `<title>${esc(caption)}</title>`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="12" y="22" font-size="14" font-weight="bold">${esc(caption)}</text>`,
    `<text x="12" y="40" fill="#57606a">each row scaled to its best; higher is better; medians across rounds</text>`,
  ];
  let x = 12;
  servers.forEach((s, i) => {
    if (i > 0) x += esc(servers[i - 1].label).length * 7 + 34;
    out.push(`<rect x="${x}" y="52" width="12" height="12" fill="${PALETTE[i % PALETTE.length]}"/>`);
    out.push(`<text x="${x + 16}" y="62"${i === ours ? ' font-weight="bold"' : ''}>${esc(s.label)}</text>`);
  });
  rows.forEach((row, r) => {
    const top = 56 + legendH + r * rowH;
    const best = Math.max(...row.values.filter((v) => v !== null));
    out.push(`<text x="12" y="${top + 14}" font-weight="bold">${esc(row.label)}</text>`);
    out.push(`<text x="12" y="${top + 30}" fill="#57606a">${esc(row.unit)}</text>`);
    row.values.forEach((v, i) => {
      const y = top + 4 + i * (barH + 3);
      const w = v === null ? 0 : Math.max(1, Math.round((v / best) * barW));
      out.push(`<rect x="${left}" y="${y}" width="${w}" height="${barH}" fill="${PALETTE[i % PALETTE.length]}"${i === ours ? ' stroke="#24292f"' : ''}/>`);
      out.push(`<text x="${left + w + 6}" y="${y + barH - 3}"${i === ours ? ' font-weight="bold"' : ''}>${v === null ? 'not run' : fmt(v)}</text>`);
    });
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** The chart of a saved run (bench/results.json's shape). */
export function chartOfResults(results, cases) {
  const when = results.date ? results.date.slice(0, 10) : 'a saved run';
  const caption = `npm run bench${results.quick ? ' --quick' : ''}, ${when}, ${results.machine?.cores ?? '?'} cores, Node ${results.machine?.node ?? '?'}: reads, this server beside each peer`;
  return renderChartSvg(chartRows(results.summary, results.servers, cases), results.servers, caption);
}

/** The cases of a saved run, from its summary's keys, when the caller has no CASES of its own. */
export function casesOfResults(results) {
  const NAMES = { '1k': ['1 KiB', 1024], '64k': ['64 KiB', 64 * 1024], '4m': ['4 MiB', 4 * MiB] };
  const ids = [...new Set(Object.keys(results.summary.reads).map((k) => k.split('/')[1]))];
  return ids.map((id) => ({ id, name: NAMES[id]?.[0] ?? id, size: NAMES[id]?.[1] }));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [from, to] = process.argv.slice(2);
  if (!from || !to) {
    process.stderr.write('usage: node bench/chart.mjs RESULTS.json OUT.svg\n');
    process.exit(2);
  }
  const results = JSON.parse(readFileSync(from, 'utf8'));
  writeFileSync(to, chartOfResults(results, casesOfResults(results)));
}
