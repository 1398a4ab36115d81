// The mirror rows of `npm run bench` (issue 38, item 5), kept in their own module: bench/run.mjs calls
// mirrorRound once per round against the listing tree (N files of 4 KiB in directories of 100,
// served by `resource-plane serve` with default options) and adds summariseMirror/renderMirror to
// its report. Per round:
//   - `mirror` into an empty directory: its time and files/s, next to `get` in a shell loop (one
//     process per file, as a script without mirror would do it) over the first GET_LOOP_FILES
//     files, as files/s (a loop over all N would take minutes of process starts);
//   - a second `mirror` with nothing changed: its time next to one listing timed by curl (the floor:
//     mirror has to take the listing, then hash what it holds), and the GETs it sent (must be 0);
//   - a `mirror` after one file changed (same size, other bytes): its time and the GETs the server
//     counted in its trace (must be exactly 1). The file is put back afterwards (its bytes, so the
//     listing rows' digests still hold; its ctime is new, and run.mjs's next listing round comes
//     well past the digest cache's 2 s racy margin).
// Every mirror time is the whole command, Node's start-up included (about 0.3-1 s here): on a small
// tree that is most of it.
// Every mirrored directory is compared with the tree's digests; a wrong byte fails the bench.
// Standalone, for a quick look: `node bench/mirror.mjs [--files N]` (default 500) builds its own
// tree and runs one round.
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** How many files the `get` loop fetches (each a process start). */
export const GET_LOOP_FILES = 50;

/** Runs a command to its end; resolves with its wall time in seconds, its status and output. */
function timed(command, args, opts = {}) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (status) => resolve({ s: (performance.now() - t0) / 1000, status, stdout, stderr }));
  });
}

/** The file GETs a serve's trace holds so far. */
function readsIn(tracePath) {
  return readFileSync(tracePath, 'utf8')
    .split('\n')
    .filter((l) => l.includes('"event_type":"resource_read"')).length;
}

/** Every mirrored file against the tree's digests (rel path → sha256 hex); throws on the first wrong one. */
function checkMirrored(dir, digests) {
  for (const [rel, sha] of digests) {
    const got = createHash('sha256')
      .update(readFileSync(join(dir, rel)))
      .digest('hex');
    if (got !== sha) throw new Error(`mirror: ${rel} in ${dir} does not hold the listed bytes`);
  }
}

/** One listing timed by curl's own time_total (connect to last byte). */
function curlListingTime(url) {
  const r = spawnSync('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code} %{time_total}', `${url}/resources/files`], { encoding: 'utf8' });
  const [code, total] = (r.stdout ?? '').trim().split(' ');
  if (code !== '200') throw new Error(`listing answered ${code}: ${r.stderr}`);
  return Number(total);
}

/**
 * One round of the mirror rows. `serve` starts `resource-plane serve --workdir <workdir>` and
 * resolves with { url, trace, stop() }; `digests` maps each file's path under the root to its sha256.
 */
export async function mirrorRound({ round, cli, root, digests, scratch, serve }) {
  const server = await serve();
  const base = join(scratch, `mirror-${round}`);
  mkdirSync(base);
  try {
    const dst = join(base, 'dst');
    const first = await timed(process.execPath, [cli, 'mirror', server.url, dst, '--json']);
    if (first.status !== 0) throw new Error(`mirror into an empty directory exited ${first.status}: ${first.stderr}`);
    checkMirrored(dst, digests);

    // `get` in a shell loop, one process per file, over the first GET_LOOP_FILES files.
    const loopDir = join(base, 'loop');
    mkdirSync(loopDir);
    const some = [...digests.keys()].slice(0, GET_LOOP_FILES);
    const script = 'cli=$1; url=$2; out=$3; shift 3; for p in "$@"; do "$NODE" "$cli" get "$url" "$p" -o "$out/" --force >/dev/null 2>&1 || exit 1; done';
    const loop = await timed('sh', ['-c', script, 'sh', cli, server.url, `${loopDir}/`, ...some], { env: { ...process.env, NODE: process.execPath } });
    if (loop.status !== 0) throw new Error(`the get loop failed (${loop.status}): ${loop.stderr}`);

    const listingS = curlListingTime(server.url);
    const readsBefore = readsIn(server.trace);
    const again = await timed(process.execPath, [cli, 'mirror', server.url, dst, '--json']);
    if (again.status !== 0) throw new Error(`mirror with nothing changed exited ${again.status}: ${again.stderr}`);
    const unchangedGets = readsIn(server.trace) - readsBefore;

    // One file changed: same size, other bytes; put back afterwards.
    const [rel, sha] = [...digests][Math.floor(digests.size / 2)];
    const path = join(root, rel);
    const original = readFileSync(path);
    const changed = Buffer.from(original);
    changed[0] ^= 0xff;
    writeFileSync(path, changed);
    let oneChanged;
    let oneChangedGets;
    try {
      const before = readsIn(server.trace);
      oneChanged = await timed(process.execPath, [cli, 'mirror', server.url, dst, '--json']);
      oneChangedGets = readsIn(server.trace) - before;
      if (oneChanged.status !== 0) throw new Error(`mirror with one file changed exited ${oneChanged.status}: ${oneChanged.stderr}`);
      if (
        createHash('sha256')
          .update(readFileSync(join(dst, rel)))
          .digest('hex') === sha
      )
        throw new Error('mirror with one file changed left the old bytes');
    } finally {
      writeFileSync(path, original);
    }
    return {
      round,
      files: digests.size,
      empty_s: first.s,
      empty_files_per_s: digests.size / first.s,
      get_loop_files: some.length,
      get_loop_s: loop.s,
      get_loop_files_per_s: some.length / loop.s,
      listing_s: listingS,
      unchanged_s: again.s,
      unchanged_gets: unchangedGets,
      one_changed_s: oneChanged.s,
      one_changed_gets: oneChangedGets,
    };
  } finally {
    rmSync(base, { recursive: true, force: true });
    await server.stop();
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const stat = (xs) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });

/** The rows' figures across rounds: median [min–max]. */
export function summariseMirror(rows) {
  return {
    files: rows[0]?.files ?? 0,
    empty_s: stat(rows.map((r) => r.empty_s)),
    empty_files_per_s: stat(rows.map((r) => r.empty_files_per_s)),
    get_loop_files_per_s: stat(rows.map((r) => r.get_loop_files_per_s)),
    mirror_vs_get_loop: stat(rows.map((r) => r.empty_files_per_s / r.get_loop_files_per_s)),
    listing_s: stat(rows.map((r) => r.listing_s)),
    unchanged_s: stat(rows.map((r) => r.unchanged_s)),
    unchanged_vs_listing: stat(rows.map((r) => r.unchanged_s / r.listing_s)),
    unchanged_gets: rows.map((r) => r.unchanged_gets),
    one_changed_s: stat(rows.map((r) => r.one_changed_s)),
    one_changed_gets: rows.map((r) => r.one_changed_gets),
  };
}

/** The rows as a markdown table (lines), for the report. */
export function renderMirror(m) {
  const cell = (x, digits = 2) => `${x.median.toFixed(digits)} [${x.min.toFixed(digits)}–${x.max.toFixed(digits)}]`;
  const n = m.files.toLocaleString('en-US');
  return [
    '### Taking the whole export (`mirror`)',
    '',
    '| what | median [min–max] |',
    '|---|---|',
    [`\`mirror\` of ${n} × 4 KiB into an empty directory (s)`, cell(m.empty_s)],
    ['… files/s', cell(m.empty_files_per_s, 0)],
    [`\`get\` in a shell loop, one process per file (${GET_LOOP_FILES} files), files/s`, cell(m.get_loop_files_per_s, 1)],
    ['`mirror` / `get` loop (files/s)', `${cell(m.mirror_vs_get_loop, 1)}×`],
    ['one listing, timed by curl (s)', cell(m.listing_s)],
    ['second `mirror`, nothing changed (s)', cell(m.unchanged_s)],
    ['… / one listing (time)', `${cell(m.unchanged_vs_listing, 2)}×`],
    ['… GETs the server counted (want 0)', m.unchanged_gets.join(', ')],
    ['`mirror` after one file changed (s)', cell(m.one_changed_s)],
    ['… GETs the server counted (want 1)', m.one_changed_gets.join(', ')],
  ].map((r) => (Array.isArray(r) ? `| ${r[0]} | ${r[1]} |` : r));
}

// ---- standalone: node bench/mirror.mjs [--files N] ----
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--files');
  const files = i > 0 ? Number(process.argv[i + 1]) : 500;
  if (!Number.isInteger(files) || files < 1) throw new Error('--files takes a whole number');
  const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'cli', 'main.js');
  const scratch = mkdtempSync(join(process.env.BENCH_TMPDIR ?? tmpdir(), 'rp-bench-mirror-'));
  const children = new Set();
  process.on('exit', () => {
    for (const c of children) c.kill('SIGKILL');
    rmSync(scratch, { recursive: true, force: true });
  });
  try {
    const workdir = join(scratch, 'listing');
    const root = join(workdir, 'out');
    mkdirSync(root, { recursive: true });
    writeFileSync(
      join(workdir, 'murmur.yaml'),
      'name: listing\nversion: "0.1.0"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 1Mi\n',
    );
    const digests = new Map();
    for (let f = 0; f < files; f++) {
      const dir = `d${String(Math.floor(f / 100)).padStart(3, '0')}`;
      if (f % 100 === 0) mkdirSync(join(root, dir));
      const rel = `${dir}/f${String(f).padStart(5, '0')}.bin`;
      const bytes = randomBytes(4096);
      writeFileSync(join(root, rel), bytes);
      digests.set(rel, createHash('sha256').update(bytes).digest('hex'));
    }
    const serve = () =>
      new Promise((resolve, reject) => {
        const trace = join(scratch, `trace-${Date.now()}.jsonl`);
        const child = spawn(process.execPath, [cli, 'serve', '--workdir', workdir, '--trace', trace], { stdio: ['ignore', 'pipe', 'ignore'] });
        children.add(child);
        let out = '';
        child.stdout.on('data', (d) => {
          out += d;
          if (!out.includes('\n')) return;
          const ready = JSON.parse(out.slice(0, out.indexOf('\n')));
          resolve({
            url: ready.url,
            trace: ready.trace,
            stop: () =>
              new Promise((r) => {
                child.once('exit', r);
                child.kill('SIGTERM');
              }),
          });
        });
        child.on('exit', (code) => reject(new Error(`serve exited ${code} before listening`)));
      });
    const row = await mirrorRound({ round: 0, cli, root, digests, scratch, serve });
    process.stdout.write(`${renderMirror(summariseMirror([row])).join('\n')}\n`);
  } catch (error) {
    process.stderr.write(`bench/mirror: ${error?.stack ?? error}\n`);
    process.exitCode = 1;
  }
}
