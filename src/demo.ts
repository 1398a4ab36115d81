// `resource-plane demo` (what `npm start` runs): two capsules from examples/, copied to a scratch
// directory so the checkout is never written. The reporter shares a file with the reader through a
// handle, the reader fetches it, every step is printed, and both keep serving until Ctrl-C.
import { createHash } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, stderrLogger, type Launched } from './launch/launch.js';
import { fetchPeerFile } from './tools/fetch-peer-file.js';
import { shareFile } from './tools/share-file.js';

const examples = join(dirname(fileURLToPath(import.meta.url)), '..', 'examples');

export async function runDemo(out: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): Promise<Launched[]> {
  const scratch = mkdtempSync(join(tmpdir(), 'resource-plane-demo-'));
  const logger = stderrLogger();
  logger.level = process.env.RESOURCE_PLANE_LOG_LEVEL ?? 'warn';
  const start = async (name: string) => {
    cpSync(join(examples, name), join(scratch, name), { recursive: true });
    return launch({ workdir: join(scratch, name), containment: 'sealed', tracePath: join(scratch, `${name}.trace.jsonl`), logger });
  };
  const reporter = await start('reporter');
  const reader = await start('reader');
  const running = [reporter, reader];
  const stop = async () => {
    await Promise.all(running.map((r) => r.stop()));
    process.exit(0);
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => void stop());

  const readerAddr = new URL(reader.server.advertisedUrl).host;
  const reporterAddr = new URL(reporter.server.advertisedUrl).host;
  out(`1. reporter capsule serving ${reporter.server.url}  (workdir ${reporter.session.workdir})`);
  out(`   reader capsule serving   ${reader.server.url}  (workdir ${reader.session.workdir})`);
  out(`2. reporter runs share-file {path: "report.md", peer: "${readerAddr}", ttl: "10m"}`);
  const minted = await shareFile(reporter.session, { path: 'report.md', peer: readerAddr, ttl: '10m' });
  out(`   minted handle ${minted.handle_id} for audience ${minted.audience}, expires ${new Date(minted.expires_at_ms).toISOString()}`);
  out('   (the token itself travels in the agent\'s message; it is never printed, logged or traced)');
  out(`3. reader runs fetch-peer-file {peer: "${reporterAddr}", handle: <handle ${minted.handle_id}>}`);
  const landed = await fetchPeerFile(reader.session, { peer: reporterAddr, handle: minted.handle });
  out(`   stored ${landed.bytes} bytes at ${landed.path} (sha256 ${landed.sha256})`);
  const original = createHash('sha256').update(readFileSync(join(reporter.session.workdir, 'out', 'report.md'))).digest('hex');
  out(`4. sha256 of reporter's out/report.md: ${original}  ${original === landed.sha256 ? 'MATCH' : 'MISMATCH'}`);
  out('');
  out('Both capsules keep serving. Try:');
  const r = reporter.server.url;
  out(`  curl -s ${r}/resources/files`);
  out(`  curl -si ${r}/resources/files/notes/findings.txt`);
  out(`  curl -si --path-as-is ${r}/resources/files/../private.txt      # 403 outside_root`);
  out(`  curl -si -X PUT ${r}/resources/files/report.md                  # 405: there is no write verb`);
  out(`  curl -si ${r}/resources/peer/not-a-handle -H 'x-murmur-audience: reader@${readerAddr}'   # 400 malformed_handle`);
  out(`  node dist/cli.js ls ${r}`);
  out(`traces: ${reporter.session.trace.path}`);
  out(`        ${reader.session.trace.path}`);
  out('Ctrl-C to stop.');
  return running;
}
