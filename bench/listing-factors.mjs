// `node bench/listing-factors.mjs [ROUNDS]`: why one listing figure can differ from another (issue
// 17: the bench said 0.14 s / 0.082 s for 10,000 x 4 KiB, first / repeat, while curl from outside
// saw 0.43-0.59 s / 0.29-0.30 s). One factor changed at a time against a baseline, each a fresh
// `resource-plane serve --workdir TREE` (default options, Landlock on) timed by curl (first
// listing, then the median of 3 repeats), next to `find | xargs -0 sha256sum` on the same tree
// just before; configurations interleaved, ROUNDS times (default 2):
//   - baseline: a tree on ext4 (the bench's scratch) whose newest change is > 2.5 s old;
//   - fresh tree: the same files with their ctime set to now (utimes) just before the server
//     starts, so every file is within the digest cache's 2 s racy margin;
//   - node:http client instead of curl;
//   - no Landlock (`--no-landlock`);
//   - one core (`taskset -c 0` on the server: the walker and its helper share it, as when the other
//     core is busy on a shared 2-core machine);
//   - tmpfs (/dev/shm): the digest cache is off there by design.
// Prints a Markdown table; not part of `npm run bench` (it takes a few minutes).
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { atExit, fetchOnce, firstJsonLine, sleep, stop, track } from './children.mjs';
import { ensureTool } from './tools.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, '..', 'dist', 'cli', 'main.js');
const ROUNDS = Number(process.argv[2] ?? 2);
const FILES = 10_000;
const say = (m) => process.stderr.write(`listing-factors: ${m}\n`);
const curl = ensureTool('curl', 'curl').path;
if (!curl) {
  say('curl is needed');
  process.exit(1);
}
if (!existsSync(CLI)) {
  say('run `npm run build` first');
  process.exit(1);
}

function makeTree(base) {
  const dir = mkdtempSync(join(base, 'rp-listing-'));
  atExit(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'out'));
  writeFileSync(join(dir, 'murmur.yaml'), 'name: listing\nversion: "0.1.0"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 1Mi\n');
  const block = randomBytes(FILES * 4096);
  for (let i = 0; i < FILES; i++) {
    const d = join(dir, 'out', `d${String(Math.floor(i / 100)).padStart(3, '0')}`);
    if (i % 100 === 0) mkdirSync(d);
    writeFileSync(join(d, `f${String(i).padStart(5, '0')}.bin`), block.subarray(i * 4096, (i + 1) * 4096));
  }
  return dir;
}

const fsType = (p) => spawnSync('stat', ['-f', '-c', '%T', p], { encoding: 'utf8' }).stdout.trim();
const ext4 = makeTree(tmpdir());
const shm = existsSync('/dev/shm') ? makeTree('/dev/shm') : null;
const env = { ...process.env, RESOURCE_PLANE_RECORDS_DIR: join(ext4, 'records') };

function sums(tree) {
  const t = performance.now();
  const r = spawnSync('sh', ['-c', 'find "$1" -type f -print0 | xargs -0 sha256sum >/dev/null', 'sh', join(tree, 'out')]);
  if (r.status !== 0) throw new Error('sha256sum failed');
  return (performance.now() - t) / 1000;
}
function byCurl(url) {
  const r = spawnSync(curl, ['-s', '-o', '/dev/null', '-w', '%{http_code} %{time_total}', url], { encoding: 'utf8' });
  const [status, total] = r.stdout.split(' ');
  if (status !== '200') throw new Error(`listing answered ${status}`);
  return Number(total);
}
async function byNode(url) {
  const t = performance.now();
  const r = await fetchOnce(url);
  if (r.status !== 200 || JSON.parse(r.body).entries.length !== FILES) throw new Error(`listing answered ${r.status}`);
  return (performance.now() - t) / 1000;
}
function touchAll(tree) {
  const now = new Date();
  for (const d of readdirSync(join(tree, 'out'))) for (const f of readdirSync(join(tree, 'out', d))) utimesSync(join(tree, 'out', d, f), now, now);
}

const CONFIGS = [
  { id: 'baseline', what: 'baseline: ext4, tree > 2.5 s old, curl, Landlock on, 2 cores' },
  { id: 'fresh', what: 'fresh tree: every ctime within the 2 s racy margin', fresh: true },
  { id: 'node', what: 'node:http client instead of curl', client: byNode },
  { id: 'nolandlock', what: '`--no-landlock`', args: ['--no-landlock'] },
  { id: 'onecore', what: 'server on one core (`taskset -c 0`)', taskset: true },
  ...(shm ? [{ id: 'tmpfs', what: `tmpfs (/dev/shm, ${fsType(shm)}): digest cache off by design`, tree: shm }] : []),
];
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const results = Object.fromEntries(CONFIGS.map((c) => [c.id, []]));

await sleep(3000); // both trees older than the racy margin
for (let r = 0; r < ROUNDS; r++) {
  const order = CONFIGS.slice(r % CONFIGS.length).concat(CONFIGS.slice(0, r % CONFIGS.length));
  for (const c of order) {
    const tree = c.tree ?? ext4;
    const s = sums(tree);
    if (c.fresh) touchAll(tree);
    const args = [CLI, 'serve', '--workdir', tree, ...(c.args ?? [])];
    const t0 = performance.now();
    const child = c.taskset ? track('taskset', ['-c', '0', process.execPath, ...args], { env }) : track(process.execPath, args, { env });
    const { line } = await firstJsonLine(child, c.id, t0);
    const url = `${line.url}/resources/files`;
    const client = c.client ?? byCurl;
    try {
      const first = await client(url);
      const reps = [];
      for (let i = 0; i < 3; i++) reps.push(await client(url));
      results[c.id].push({ sums: s, first, repeat: median(reps) });
      say(`round ${r + 1} ${c.id}: sha256sum ${s.toFixed(3)} s, first ${first.toFixed(3)} s, repeat ${median(reps).toFixed(3)} s`);
    } finally {
      await stop(child);
    }
    if (c.fresh) await sleep(3000); // let the tree settle again for the others
  }
}
const f = (x) => x.toFixed(x < 0.1 ? 3 : 2);
const range = (xs) => (xs.length > 1 ? `${f(median(xs))} [${f(Math.min(...xs))}–${f(Math.max(...xs))}]` : f(xs[0]));
process.stdout.write(
  `\n| configuration (${FILES.toLocaleString('en-US')} × 4 KiB) | sha256sum s | first s | repeat s | first / sha256sum | repeat / sha256sum |\n|---|---:|---:|---:|---:|---:|\n`,
);
for (const c of CONFIGS) {
  const rs = results[c.id];
  process.stdout.write(
    `| ${c.what} | ${range(rs.map((x) => x.sums))} | ${range(rs.map((x) => x.first))} | ${range(rs.map((x) => x.repeat))} | ${range(rs.map((x) => x.first / x.sums))} | ${range(rs.map((x) => x.repeat / x.sums))} |\n`,
  );
}
