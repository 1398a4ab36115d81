// From the raw measurements of bench/run.mjs to statistics (median, min, max across rounds), the
// ratios issue 17 names (each taken within one round, then summarised), and the Markdown report.

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
export const stat = (xs) => {
  const v = xs.filter((x) => Number.isFinite(x));
  return v.length ? { median: median(v), min: Math.min(...v), max: Math.max(...v), n: v.length } : null;
};
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

// Targets are issue 17's (which replaced issue 12's), verbatim in meaning; `ok` decides met / not
// met on the median.
export const TARGETS = [
  { id: 'read1k_vs_contract', what: '1 KiB read: ours / the Fastify contract floor (req/s)', target: '≥ 0.85×', ok: (v) => v >= 0.85 },
  { id: 'read4m_vs_nginx', what: '4 MiB read of an unchanged file: ours / nginx (MB/s)', target: '≥ 0.80×', ok: (v) => v >= 0.8 },
  {
    id: 'read64m_vs_sha256',
    what: '64 MiB read of an unchanged file (streamed, hashed as it is sent): ours MB/s / single-core SHA-256 MB/s',
    target: '≥ 0.80×',
    ok: (v) => v >= 0.8,
  },
  {
    id: 'size_cycle_distinct_vs_same',
    what: '450 files of distinct sizes (600–1,049 KiB) read in a cycle on 4 connections / the same cycle over 450 files of one size (MB/s)',
    target: '≥ 0.70×',
    ok: (v) => v >= 0.7,
  },
  { id: 'start_vs_fastify', what: 'start to ready: ours / a bare Fastify listener (issue 25)', target: '≤ 1.3×', ok: (v) => v <= 1.3 },
  {
    id: 'unconfined_start_vs_fastify',
    what: 'start to ready: ours with `--no-landlock` / a bare Fastify listener (issue 25)',
    target: '≤ 1.15×',
    ok: (v) => v <= 1.15,
  },
  { id: 'rss_minus_fastify_mib', what: 'idle RSS: ours − a bare Fastify listener (MiB)', target: '≤ +15 MiB', ok: (v) => v <= 15, unit: 'MiB' },
  {
    id: 'listing_first_vs_sha256sum',
    what: 'listing N × 4 KiB in directories of 100, first, timed by curl: ours / `find | xargs sha256sum` (time)',
    target: '≤ 0.50×',
    ok: (v) => v <= 0.5,
  },
  {
    id: 'listing_repeat_vs_sha256sum',
    what: 'listing, repeat of the unchanged tree, timed by curl: ours / `sha256sum` (time)',
    target: '≤ 0.25×',
    ok: (v) => v <= 0.25,
  },
  {
    id: 'access_log_cost',
    what: '1 KiB read: ours with its defaults (access log on) / `--no-access-log` (req/s, issue 41)',
    target: '≥ 0.95×',
    ok: (v) => v >= 0.95,
  },
  { id: 'access_log_cost_busy', what: 'the same with a busy loop holding the other core', target: '≥ 0.95×', ok: (v) => v >= 0.95 },
  {
    id: 'big_listing_first_vs_sha256sum',
    what: 'listing BIG files of 65 B in DIRS directories, first, timed by curl: ours / `find | xargs sha256sum` in the same round (time; issue 38)',
    target: '≤ 0.50×',
    ok: (v) => v <= 0.5,
  },
  {
    id: 'big_listing_repeat_vs_sha256sum',
    what: 'the same listing, repeat of the unchanged tree, timed by curl: ours / `sha256sum` (time; issue 38)',
    target: '≤ 0.40×',
    ok: (v) => v <= 0.4,
  },
  {
    id: 'redeem_vs_read',
    what: '1 KiB redeem / 1 KiB operator read, time per request, same server (issue 29; stretch 1.1×)',
    target: '≤ 1.3×',
    ok: (v) => v <= 1.3,
  },
];

// Ratios without a target of their own; `expect` is what the targets imply, for reading.
const INFO = [
  { id: 'contract1k_vs_ceiling', what: "1 KiB read: Fastify contract floor / node:http from memory (the contract's own cost)", expect: '' },
  {
    id: 'read1k_vs_ceiling',
    what: "1 KiB read: ours / node:http from memory (issue 12's old target, 0.70×)",
    expect: '≈ 0.85 × the line above if the 1 KiB target is met',
  },
  { id: 'read1k_vs_nginx', what: '1 KiB read: ours / nginx', expect: '' },
  { id: 'read1k_vs_fastify_static', what: '1 KiB read: ours / @fastify/static', expect: '' },
  { id: 'read1k_vs_readfile_sha256', what: '1 KiB read: ours / readFile+sha256', expect: '' },
  { id: 'read64k_vs_contract', what: '64 KiB read: ours / Fastify contract floor', expect: '' },
  { id: 'read64k_vs_nginx', what: '64 KiB read: ours / nginx', expect: '' },
  { id: 'read4m_vs_contract', what: '4 MiB read: ours / Fastify contract floor (which hashes every byte)', expect: '' },
  { id: 'read4m_vs_sha256', what: '4 MiB read: ours MB/s / single-core SHA-256 MB/s', expect: '' },
  { id: 'read4m_vs_ceiling', what: '4 MiB read: ours / node:http from memory', expect: '' },
  { id: 'ceiling1k_vs_nginx', what: '1 KiB read: node:http from memory / nginx (how far Node itself is)', expect: '' },
  {
    id: 'listing_repeat_node_client_vs_sha256sum',
    what: 'listing repeat, timed by a node:http client instead of curl: ours / `sha256sum`',
    expect: '≈ the curl figure',
  },
  { id: 'start_vs_bare', what: 'start to ready: ours / bare node:http listener', expect: '' },
  { id: 'fastify_start_vs_bare', what: "start to ready: bare Fastify / bare node:http listener (Fastify's own cost)", expect: '' },
  { id: 'read64m_vs_nginx', what: '64 MiB read: ours / nginx (MB/s)', expect: '' },
  {
    id: 'rewritten_vs_nginx',
    what: '1 MiB file rewritten in place while read, 4 connections: ours / nginx (MB/s of whole bodies; ours serves snapshots, nginx whatever it reads)',
    expect: '',
  },
  { id: 'rss_minus_bare_mib', what: 'idle RSS: ours − bare node:http listener (MiB)', expect: '', unit: 'MiB' },
];

export function summarise(raw, serverIds, cases) {
  const reads = {};
  for (const id of serverIds) {
    for (const c of cases) {
      const ms = raw.reads[`${id}/${c.id}`] ?? [];
      reads[`${id}/${c.id}`] = {
        rps: stat(ms.map((m) => m.rps)),
        mbps: stat(ms.map((m) => m.mbps)),
        p99_ms: stat(ms.map((m) => m.p99_ms)),
        errors: ms.reduce((a, m) => a + m.errors, 0),
      };
    }
  }
  const rounds = raw.sha256.length - 1; // one extra SHA-256 measure at the end
  const perRound = (fn) => {
    const out = [];
    for (let r = 0; r < rounds; r++) {
      try {
        const v = fn(r);
        if (Number.isFinite(v)) out.push(v);
      } catch {
        /* a server that is absent (nginx skipped) gives no ratio */
      }
    }
    return out;
  };
  const rd = (id, c, r) => raw.reads[`${id}/${c}`][r];
  const listFor = (r) => raw.listing.find((l) => l.round === r);
  const sums = (r) => mean(listFor(r).sha256sum_s);
  const bigFor = (r) => (raw.big_listing ?? []).find((l) => l.round === r);
  const bigSums = (r) => mean(bigFor(r).sha256sum_s);
  const startOf = (kind, r) => raw.start.filter((s) => s.kind === kind && s.round === r);

  const ready = (kind, r) => median(startOf(kind, r).map((s) => s.ready_ms));
  const rss = (kind, r) => median(startOf(kind, r).map((s) => s.rss_mib));
  const ratios = {
    read1k_vs_contract: perRound((r) => rd('ours', '1k', r).rps / rd('fastify_contract', '1k', r).rps),
    contract1k_vs_ceiling: perRound((r) => rd('fastify_contract', '1k', r).rps / rd('node_memory', '1k', r).rps),
    read64k_vs_contract: perRound((r) => rd('ours', '64k', r).rps / rd('fastify_contract', '64k', r).rps),
    read4m_vs_contract: perRound((r) => rd('ours', '4m', r).mbps / rd('fastify_contract', '4m', r).mbps),
    listing_repeat_node_client_vs_sha256sum: perRound((r) => listFor(r).node_client_repeat_s / sums(r)),
    start_vs_fastify: perRound((r) => ready('ours', r) / ready('fastify', r)),
    unconfined_start_vs_fastify: perRound((r) => ready('unconfined', r) / ready('fastify', r)),
    fastify_start_vs_bare: perRound((r) => ready('fastify', r) / ready('bare', r)),
    rss_minus_fastify_mib: perRound((r) => rss('ours', r) - rss('fastify', r)),
    read1k_vs_ceiling: perRound((r) => rd('ours', '1k', r).rps / rd('node_memory', '1k', r).rps),
    read1k_vs_nginx: perRound((r) => rd('ours', '1k', r).rps / rd('nginx', '1k', r).rps),
    read1k_vs_fastify_static: perRound((r) => rd('ours', '1k', r).rps / rd('fastify_static', '1k', r).rps),
    read1k_vs_readfile_sha256: perRound((r) => rd('ours', '1k', r).rps / rd('readfile_sha256', '1k', r).rps),
    read64k_vs_ceiling: perRound((r) => rd('ours', '64k', r).rps / rd('node_memory', '64k', r).rps),
    read64k_vs_nginx: perRound((r) => rd('ours', '64k', r).rps / rd('nginx', '64k', r).rps),
    read4m_vs_ceiling: perRound((r) => rd('ours', '4m', r).mbps / rd('node_memory', '4m', r).mbps),
    read4m_vs_nginx: perRound((r) => rd('ours', '4m', r).mbps / rd('nginx', '4m', r).mbps),
    read4m_vs_fastify_static: perRound((r) => rd('ours', '4m', r).mbps / rd('fastify_static', '4m', r).mbps),
    read4m_vs_readfile_sha256: perRound((r) => rd('ours', '4m', r).mbps / rd('readfile_sha256', '4m', r).mbps),
    read4m_vs_sha256: perRound((r) => rd('ours', '4m', r).mbps / raw.sha256[r]),
    ceiling1k_vs_nginx: perRound((r) => rd('node_memory', '1k', r).rps / rd('nginx', '1k', r).rps),
    listing_first_vs_sha256sum: perRound((r) => listFor(r).first_s / sums(r)),
    listing_repeat_vs_sha256sum: perRound((r) => median(listFor(r).repeat_s) / sums(r)),
    big_listing_first_vs_sha256sum: perRound((r) => bigFor(r).first_s / bigSums(r)),
    big_listing_repeat_vs_sha256sum: perRound((r) => median(bigFor(r).repeat_s) / bigSums(r)),
    redeem_vs_read: perRound((r) => raw.peer[r].read.rps / raw.peer[r].redeem.rps),
    access_log_cost: perRound((r) => rd('ours', '1k', r).rps / rd('ours_no_access_log', '1k', r).rps),
    access_log_cost_busy: perRound((r) => raw.busy[r].ours.rps / raw.busy[r].ours_no_access_log.rps),
    start_vs_bare: perRound((r) => ready('ours', r) / ready('bare', r)),
    rss_minus_bare_mib: perRound((r) => rss('ours', r) - rss('bare', r)),
    read64m_vs_sha256: perRound((r) => raw.streamed[r].ours_64m.mbps / raw.sha256[r]),
    read64m_vs_nginx: perRound((r) => raw.streamed[r].ours_64m.mbps / raw.streamed[r].nginx_64m.mbps),
    size_cycle_distinct_vs_same: perRound((r) => raw.streamed[r].cycle_distinct.mbps / raw.streamed[r].cycle_same.mbps),
    rewritten_vs_nginx: perRound((r) => raw.rewritten[r]?.ours?.mbps / raw.rewritten[r]?.nginx?.mbps),
  };
  const ratioStats = Object.fromEntries(Object.entries(ratios).map(([k, v]) => [k, stat(v)]));
  const targets = TARGETS.map((t) => {
    const s = ratioStats[t.id];
    const every = ratios[t.id] ?? [];
    return {
      id: t.id,
      what: t.what,
      target: t.target,
      unit: t.unit,
      measured: s,
      met: s ? t.ok(s.median) : null,
      met_in_rounds: every.filter(t.ok).length,
      rounds: every.length,
    };
  });
  return {
    reads,
    peer: {
      read: { rps: stat(raw.peer.map((p) => p.read.rps)), p99_ms: stat(raw.peer.map((p) => p.read.p99_ms)) },
      redeem: { rps: stat(raw.peer.map((p) => p.redeem.rps)), p99_ms: stat(raw.peer.map((p) => p.redeem.p99_ms)) },
    },
    sha256_mbps: stat(raw.sha256),
    rewritten: Object.fromEntries(
      ['ours', 'nginx'].map((id) => [
        id,
        {
          share: stat((raw.rewritten ?? []).map((w) => w[id]?.share)),
          mbps: stat((raw.rewritten ?? []).map((w) => w[id]?.mbps)),
          mismatched: (raw.rewritten ?? []).reduce((a, w) => a + (w[id]?.mismatched ?? 0), 0),
        },
      ]),
    ),
    listing: {
      sha256sum_s: stat(raw.listing.flatMap((l) => l.sha256sum_s)),
      first_s: stat(raw.listing.map((l) => l.first_s)),
      repeat_s: stat(raw.listing.flatMap((l) => l.repeat_s)),
      node_client_repeat_s: stat(raw.listing.map((l) => l.node_client_repeat_s)),
      tree_age_s: stat(raw.listing.map((l) => l.tree_age_s)),
    },
    big_listing: {
      sha256sum_s: stat((raw.big_listing ?? []).flatMap((l) => l.sha256sum_s)),
      first_s: stat((raw.big_listing ?? []).map((l) => l.first_s)),
      repeat_s: stat((raw.big_listing ?? []).flatMap((l) => l.repeat_s)),
    },
    start: {
      bare_ready_ms: stat(raw.start.filter((s) => s.kind === 'bare').map((s) => s.ready_ms)),
      ours_ready_ms: stat(raw.start.filter((s) => s.kind === 'ours').map((s) => s.ready_ms)),
      fastify_ready_ms: stat(raw.start.filter((s) => s.kind === 'fastify').map((s) => s.ready_ms)),
      fastify_rss_mib: stat(raw.start.filter((s) => s.kind === 'fastify').map((s) => s.rss_mib)),
      unconfined_ready_ms: stat(raw.start.filter((s) => s.kind === 'unconfined').map((s) => s.ready_ms)),
      bare_rss_mib: stat(raw.start.filter((s) => s.kind === 'bare').map((s) => s.rss_mib)),
      ours_rss_mib: stat(raw.start.filter((s) => s.kind === 'ours').map((s) => s.rss_mib)),
    },
    ratios: ratioStats,
    targets,
  };
}

// ---- Markdown ----

const num = (v) => {
  if (v === undefined || v === null || !Number.isFinite(v)) return '–';
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString('en-US');
  if (a >= 100) return Math.round(v).toString();
  if (a >= 10) return v.toFixed(1);
  if (a >= 0.1) return v.toFixed(2);
  return v.toFixed(3);
};
const cell = (s, suffix = '') => {
  if (!s) return '–';
  if (s.n === 1) return `${num(s.median)}${suffix}`;
  return `${num(s.median)}${suffix} [${num(s.min)}–${num(s.max)}]`;
};
const signed = (s, unit) => {
  if (!s) return '–';
  const f = (v) => `${v >= 0 ? '+' : ''}${num(v)}`;
  return s.n === 1 ? `${f(s.median)} ${unit}` : `${f(s.median)} ${unit} [${f(s.min)}–${f(s.max)}]`;
};
// A pipe inside a cell (even inside backticks) ends the cell in GitHub's Markdown: escape it.
const esc = (text) => String(text).replace(/\|/g, '\\|');
const table = (header, rows, numeric = true) =>
  [
    `| ${header.map(esc).join(' | ')} |`,
    `|${header.map((_, i) => (i === 0 || !numeric ? '---' : '---:')).join('|')}|`,
    ...rows.map((r) => `| ${r.map(esc).join(' | ')} |`),
  ].join('\n');

export function renderReport(meta, s, servers, cases) {
  const m = meta.machine;
  const out = [];
  out.push('');
  out.push(`## Benchmark results, ${meta.date.slice(0, 16).replace('T', ' ')} UTC${meta.quick ? ' (--quick: a smoke run, not a measurement)' : ''}`);
  out.push('');
  out.push(
    `- machine: ${m.cores} cores (${m.cpu}), ${m.memory_gib} GiB, Linux ${m.kernel}, Node ${m.node}; load average ${m.loadavg_before.join(' / ')} before, ${m.loadavg_after.join(' / ')} after`,
  );
  out.push(
    `- load: ${meta.loadgen}; ${meta.rounds} round(s), ${meta.seconds_per_case} s per case per round after a ${meta.warmup_seconds} s warm-up, servers interleaved within each round (order rotated per round)`,
  );
  out.push(
    `- nginx: ${meta.nginx ?? 'skipped'}; ours: \`serve --containment sealed\`, trace on; cells are median [min–max] across rounds; MB/s = 10^6 body bytes/s of 2xx answers; run took ${meta.duration_s} s`,
  );
  out.push('');
  out.push('### Reads');
  out.push('');
  const readRows = [];
  for (const c of cases) {
    readRows.push([`${c.name} req/s`, ...servers.map((sv) => cell(s.reads[`${sv.id}/${c.id}`].rps))]);
    if (c.size >= 64 * 1024) readRows.push([`${c.name} MB/s`, ...servers.map((sv) => cell(s.reads[`${sv.id}/${c.id}`].mbps))]);
    readRows.push([`${c.name} p99 ms`, ...servers.map((sv) => cell(s.reads[`${sv.id}/${c.id}`].p99_ms))]);
  }
  out.push(table(['case', ...servers.map((sv) => sv.label)], readRows));
  out.push('');
  out.push('### Peer plane, limits, listing, start-up');
  out.push('');
  out.push(
    table(
      ['measure', 'value'],
      [
        ['1 KiB operator read, ours with `--control stdio` (req/s; p99 ms)', `${cell(s.peer.read.rps)}; ${cell(s.peer.read.p99_ms)}`],
        ['1 KiB redeem, same server, handle from share-file over MCP (req/s; p99 ms)', `${cell(s.peer.redeem.rps)}; ${cell(s.peer.redeem.p99_ms)}`],
        ['SHA-256, node:crypto, one core, 64 MiB buffer (MB/s)', cell(s.sha256_mbps)],
        [
          '1 MiB file rewritten in place by another process, 4 connections: ours, share of reads served whole; MB/s; bodies unlike their etag',
          `${cell(s.rewritten.ours.share)}; ${cell(s.rewritten.ours.mbps)}; ${s.rewritten.ours.mismatched}`,
        ],
        ['the same file and writer, nginx: share served whole; MB/s', `${cell(s.rewritten.nginx.share)}; ${cell(s.rewritten.nginx.mbps)}`],
        [`\`find … -print0 | xargs -0 sha256sum\`, ${meta.listing_files.toLocaleString('en-US')} × 4 KiB (s)`, cell(s.listing.sha256sum_s)],
        [
          `age of the listing tree (newest change) at the first listing; its filesystem (\`stat -f\`)`,
          `${cell(s.listing.tree_age_s, ' s')}; ${meta.listing_fs}`,
        ],
        ['ours (`serve`, default options, Landlock on), first listing after start, timed by curl (s)', cell(s.listing.first_s)],
        ['ours, repeat listing, timed by curl (s)', cell(s.listing.repeat_s)],
        ['ours, repeat listing, timed by a node:http client (s)', cell(s.listing.node_client_repeat_s)],
        [
          `\`find … -print0 | xargs -0 sha256sum\`, ${(meta.big_listing_files ?? 0).toLocaleString('en-US')} × 65 B in ${meta.big_listing_dirs} directories (s)`,
          cell(s.big_listing?.sha256sum_s),
        ],
        ['ours, first listing of that tree after start, timed by curl (s)', cell(s.big_listing?.first_s)],
        ['ours, repeat listing of that tree, timed by curl (s)', cell(s.big_listing?.repeat_s)],
        [
          'start to ready: bare node:http / bare Fastify / ours / ours with `--no-landlock` (ms)',
          `${cell(s.start.bare_ready_ms)} / ${cell(s.start.fastify_ready_ms)} / ${cell(s.start.ours_ready_ms)} / ${cell(s.start.unconfined_ready_ms)}`,
        ],
        [
          'idle RSS after one request: bare node:http / bare Fastify / ours (MiB)',
          `${cell(s.start.bare_rss_mib)} / ${cell(s.start.fastify_rss_mib)} / ${cell(s.start.ours_rss_mib)}`,
        ],
      ],
      false,
    ),
  );
  out.push('');
  out.push('### Against the targets (issues 23, 25, 29, 38)');
  out.push('');
  out.push(
    table(
      ['ratio', 'measured', 'target', 'status'],
      s.targets
        .map((t) => [
          t.what
            .replace('N ×', `${meta.listing_files.toLocaleString('en-US')} ×`)
            .replace('BIG', (meta.big_listing_files ?? 0).toLocaleString('en-US'))
            .replace('DIRS', String(meta.big_listing_dirs)),
          t.unit ? signed(t.measured, t.unit) : cell(t.measured, '×'),
          t.target,
          t.met === null
            ? 'not measured'
            : `${t.met ? '**met**' : '**not met**'}${t.rounds > 1 && t.met_in_rounds !== (t.met ? t.rounds : 0) ? ` (in ${t.met_in_rounds} of ${t.rounds} rounds)` : ''}`,
        ])
        .concat([['peak RSS under 64 never-reading 8 MiB clients', 'not measured here (`npm run stress`)', 'held by the memory budget', '–']]),
      false,
    ),
  );
  out.push('');
  out.push('### Other ratios (no target of their own)');
  out.push('');
  out.push(
    table(
      ['ratio', 'measured', 'what the targets imply'],
      INFO.map((i) => [i.what, i.unit ? signed(s.ratios[i.id], i.unit) : cell(s.ratios[i.id], '×'), i.expect || '–']),
      false,
    ),
  );
  out.push('');
  for (const n of meta.notes) out.push(`note: ${n}`);
  for (const o of meta.odd) out.push(`odd: ${o}`);
  out.push('');
  return out.join('\n');
}
