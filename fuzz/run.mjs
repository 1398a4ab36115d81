#!/usr/bin/env node
// `npm run fuzz`: long runs of the property harness in test/fuzz. Loops `vitest run test/fuzz` with a
// fresh seed each time and every property's run count multiplied by FUZZ_SCALE, one test file at a
// time in one worker (the machine is shared), until FUZZ_MINUTES have passed. Every property run's
// seed lands in fuzz/logs/<stamp>.jsonl; a failing iteration's whole output is kept beside it, and
// its replay command (FUZZ_PROPERTY=… FUZZ_SEED=… FUZZ_PATH=… npx vitest run <file>) is printed.
//
//   FUZZ_MINUTES   wall-clock budget (default 10); the iteration under way finishes
//   FUZZ_SCALE     runs per iteration, as a multiple of the bounded run in `npm test` (default 10)
//   FUZZ_PROPERTY  only this property (the others are skipped)
//   FUZZ_SKIP      not these properties (comma-separated), e.g. one that fails on an open bug
//   FUZZ_SHRINK_SECONDS  how long a failure may shrink (default here 30: an iteration is not held up)
//
// On the shared 2-core machine run it as `nice -n 10 npm run fuzz`.
//   FUZZ_FILES     which test files (default test/fuzz)
import { spawn } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const minutes = Number(process.env.FUZZ_MINUTES ?? 10);
const scale = Number(process.env.FUZZ_SCALE ?? 10);
if (!(minutes > 0) || !(scale > 0)) {
  console.error('FUZZ_MINUTES and FUZZ_SCALE must be positive numbers');
  process.exit(2);
}
const files = (process.env.FUZZ_FILES ?? 'test/fuzz').split(/\s+/).filter(Boolean);
const logs = join(repo, 'fuzz', 'logs');
mkdirSync(logs, { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, '-');
const log = join(logs, `${stamp}.jsonl`);
writeFileSync(log, '');
const deadline = Date.now() + minutes * 60_000;

function runOnce(seed) {
  return new Promise((resolve) => {
    const child = spawn('npx', ['vitest', 'run', ...files, '--maxWorkers=1', '--no-file-parallelism'], {
      cwd: repo,
      env: { FUZZ_SHRINK_SECONDS: '30', ...process.env, FUZZ_SEED: String(seed), FUZZ_SCALE: String(scale), FUZZ_LOG: log, FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const stop = () => child.kill('SIGINT');
    process.once('SIGINT', stop);
    child.on('close', (code) => {
      process.off('SIGINT', stop);
      resolve({ code, out });
    });
  });
}

let iteration = 0;
let failures = 0;
console.log(`fuzzing ${files.join(' ')} for ${minutes} min at ${scale}x the bounded run; seeds in ${log}`);
while (Date.now() < deadline) {
  const seed = (Date.now() ^ Math.floor(Math.random() * 0x100000000)) | 0;
  iteration += 1;
  const started = Date.now();
  const { code, out } = await runOnce(seed);
  const secs = Math.round((Date.now() - started) / 1000);
  if (code === 0) {
    console.log(`#${iteration} seed ${seed}: ok (${secs}s)`);
    continue;
  }
  failures += 1;
  const saved = join(logs, `${stamp}-failure-${seed}.txt`);
  writeFileSync(saved, out);
  console.log(`#${iteration} seed ${seed}: FAILED (${secs}s), output in ${saved}`);
  for (const line of new Set(out.split('\n').filter((l) => l.startsWith('replay: ')))) console.log(`  ${line}`);
  appendFileSync(log, `${JSON.stringify({ iteration, seed, failed: true, output: saved })}\n`);
}

// Totals per property from the seed log.
const totals = new Map();
for (const line of readFileSync(log, 'utf8').split('\n')) {
  if (!line) continue;
  const r = JSON.parse(line);
  if (!r.property) continue;
  const t = totals.get(r.property) ?? { runs: 0, ms: 0, failed: 0 };
  t.runs += r.runs;
  t.ms += r.ms;
  t.failed += r.failed ? 1 : 0;
  totals.set(r.property, t);
}
console.log(`\n${iteration} iterations, ${failures} failed`);
for (const [name, t] of [...totals].sort()) {
  console.log(
    `  ${name.padEnd(20)} ${String(t.runs).padStart(8)} runs  ${(t.ms / 60_000).toFixed(1).padStart(6)} min${t.failed ? `  ${t.failed} failed` : ''}`,
  );
}
process.exit(failures === 0 ? 0 : 1);
