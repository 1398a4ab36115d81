// The whole-export listing rows of `npm run bench` (issue 38, item 5): 200,000 files of 65 bytes in
// 500 directories (--quick: 2,000 in 5), listed by `resource-plane serve` as a user runs it (default
// options, Landlock on, a fresh process each round), first and repeat, timed by curl, next to
// `find | xargs -0 sha256sum` on the same tree in the same round (before and after the listings).
// Every listing's body is checked: every path, size and digest. Kept apart from run.mjs so the
// tree, its checks and its round are one place.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { track } from './children.mjs';

export const BIG_FILE_SIZE = 65;

/**
 * Writes the tree under `dir`/out with its murmur.yaml: `files` files of BIG_FILE_SIZE bytes, each
 * distinct, spread over `dirs` directories. Returns what the rounds need.
 */
export function makeBigListingTree(dir, files, dirs) {
  const root = join(dir, 'out');
  mkdirSync(root, { recursive: true });
  writeFileSync(join(dir, 'murmur.yaml'), 'name: big-listing\nversion: "0.1.0"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 1Mi\n');
  const digests = new Map();
  const perDir = Math.ceil(files / dirs);
  const block = randomBytes(files * BIG_FILE_SIZE);
  for (let i = 0; i < files; i++) {
    const d = `d${String(Math.floor(i / perDir)).padStart(3, '0')}`;
    if (i % perDir === 0) mkdirSync(join(root, d));
    const rel = `${d}/f${String(i).padStart(6, '0')}.txt`;
    const bytes = block.subarray(i * BIG_FILE_SIZE, (i + 1) * BIG_FILE_SIZE);
    writeFileSync(join(root, rel), bytes);
    digests.set(rel, createHash('sha256').update(bytes).digest('hex'));
  }
  return { dir, root, files, digests };
}

/**
 * `find | xargs -0 sha256sum` over `tree` ({ root, files, digests }): seconds, after checking its line
 * count and one digest. The bench's peer for every listing row.
 */
export function timeSha256sum(tree) {
  return new Promise((res, rej) => {
    const t = performance.now();
    const child = track('sh', ['-c', 'find "$1" -type f -print0 | xargs -0 sha256sum', 'sh', tree.root], { stdout: 'pipe' });
    let lines = 0;
    let sample = null;
    let tail = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk) => {
      const parts = (tail + chunk).split('\n');
      tail = parts.pop();
      lines += parts.length;
      sample ??= parts[0];
    });
    child.on('exit', (code) => {
      const s = (performance.now() - t) / 1000;
      if (code !== 0) return rej(new Error(`find | xargs sha256sum exited ${code}`));
      if (lines !== tree.files) return rej(new Error(`sha256sum printed ${lines} lines, want ${tree.files}`));
      const [hex, path] = sample.split(/ [ *]/);
      if (tree.digests.get(path.slice(tree.root.length + 1)) !== hex) return rej(new Error(`sha256sum disagrees on ${path}`));
      res(s);
    });
  });
}

/** Every entry there, in the contract's order (UTF-8 byte order of the path), with its size and digest. */
function checkBigListing(tree, body) {
  const { entries } = JSON.parse(body);
  if (entries.length !== tree.files) throw new Error(`the big listing has ${entries.length} entries, want ${tree.files}`);
  let previous = null;
  for (const e of entries) {
    if (tree.digests.get(e.path) !== e.sha256 || e.size_bytes !== BIG_FILE_SIZE) throw new Error(`the big listing's entry ${e.path} is wrong`);
    if (previous !== null && Buffer.compare(Buffer.from(previous), Buffer.from(e.path)) >= 0) throw new Error(`the big listing is out of order at ${e.path}`);
    previous = e.path;
  }
}

/** One listing timed by curl (time_total: connect to last byte), its body checked after. */
function curlBig(curl, url, tree, bodyFile) {
  return new Promise((res, rej) => {
    const child = track(curl, ['-s', '-o', bodyFile, '-w', '%{http_code} %{time_total}', '--max-time', '600', `${url}/resources/files`], { stdout: 'pipe' });
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
    });
    child.on('error', rej);
    child.on('exit', (code) => {
      const [status, total] = out.trim().split(' ');
      if (code !== 0) return rej(new Error(`curl exited ${code} (${out})`));
      const body = readFileSync(bodyFile);
      if (status !== '200') return rej(new Error(`the big listing answered ${status}: ${body.toString().slice(0, 200)}`));
      try {
        checkBigListing(tree, body);
      } catch (e) {
        return rej(e);
      }
      res(Number(total));
    });
  });
}

/**
 * One round: sha256sum, a fresh server, its first listing and `repeats` more, sha256sum again.
 * `start(label, args)` starts a server as run.mjs does and `stop(child)` stops it (exit status).
 */
export async function bigListingRound({ r, tree, cli, curl, start, stop, repeats, bodyFile, odd }) {
  const sums = await timeSha256sum(tree);
  const server = await start('ours (big listing)', [cli, 'serve', '--workdir', tree.dir]);
  try {
    const first = await curlBig(curl, server.url, tree, bodyFile);
    const again = [];
    for (let i = 0; i < repeats; i++) again.push(await curlBig(curl, server.url, tree, bodyFile));
    const sums2 = await timeSha256sum(tree);
    return { round: r, sha256sum_s: [sums, sums2], first_s: first, repeat_s: again };
  } finally {
    const code = await stop(server.child);
    if (code !== 0) odd.push(`big listing server exited with ${code} on SIGTERM`);
  }
}
