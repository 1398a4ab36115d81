// `resource-plane demo` (what `npm start` runs): two capsules from examples/ (shipped in the
// package), copied to a scratch directory so the checkout or the install is never written. The
// reporter's operator plane listens on a unix socket apart from its peer listener (the recommended
// deployment); the reporter shares a file with the reader through a handle, the reader fetches it,
// every step is printed, and both keep serving until Ctrl-C. The scratch directory is removed on
// every way out: a signal, an error, or the process ending. The traces are not in it: they go to
// the records directory like any session's, and stay there (`resource-plane records` lists them).
import { createHash } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, type Launched } from '../launch/launch.js';
import { stderrLogger } from './logger.js';
import { fetchPeerFile } from '../tools/fetch-peer-file.js';
import { shareFile } from '../tools/share-file.js';

// This file is dist/cli/demo.js once built: examples/ is two levels up, at the package root.
const examples = fileURLToPath(new URL('../../examples', import.meta.url));

export async function runDemo(out: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): Promise<Launched[]> {
  const scratch = mkdtempSync(join(tmpdir(), 'resource-plane-demo-'));
  const removeScratch = () => rmSync(scratch, { recursive: true, force: true });
  process.once('exit', removeScratch);
  const running: Launched[] = [];
  const stop = async (code: number) => {
    await Promise.allSettled(running.map((r) => r.stop()));
    removeScratch();
    process.exit(code);
  };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(signal, () => void stop(0));
  try {
    const logger = stderrLogger();
    logger.level = process.env.RESOURCE_PLANE_LOG_LEVEL ?? 'warn';
    const start = async (name: string, operatorListen?: string) => {
      cpSync(join(examples, name), join(scratch, name), { recursive: true });
      const launched = await launch({
        workdir: join(scratch, name),
        containment: 'sealed',
        logger,
        operatorListen,
      });
      running.push(launched);
      return launched;
    };
    const reporter = await start('reporter', `unix:${join(scratch, 'reporter-operator.sock')}`);
    const reader = await start('reader');

    const readerAddr = new URL(reader.server.advertisedUrl).host;
    const reporterAddr = new URL(reporter.server.advertisedUrl).host;
    const operator = reporter.operator!.url;
    out(`1. reporter capsule serving ${reporter.server.url}  (workdir ${reporter.session.workdir})`);
    out(`   reporter operator plane  ${operator}  (its own listener: peers cannot list the export)`);
    out(`   reader capsule serving   ${reader.server.url}  (workdir ${reader.session.workdir})`);
    out(`2. reporter runs share-file {path: "report.md", peer: "${readerAddr}", ttl: "10m"}`);
    const minted = await shareFile(reporter.session, { path: 'report.md', peer: readerAddr, ttl: '10m' });
    out(`   minted handle ${minted.handle_id} for audience ${minted.audience}, expires ${new Date(minted.expires_at_ms).toISOString()}`);
    out("   (the token itself travels in the agent's message; it is never printed, logged or traced)");
    out(`3. reader runs fetch-peer-file {peer: "${reporterAddr}", handle: <handle ${minted.handle_id}>}`);
    const landed = await fetchPeerFile(reader.session, { peer: reporterAddr, handle: minted.handle });
    out(`   stored ${landed.bytes} bytes at ${landed.path} (sha256 ${landed.sha256})`);
    const original = createHash('sha256')
      .update(readFileSync(join(reporter.session.workdir, 'out', 'report.md')))
      .digest('hex');
    out(`4. sha256 of reporter's out/report.md: ${original}  ${original === landed.sha256 ? 'MATCH' : 'MISMATCH'}`);
    out('');
    out('Both capsules keep serving. Try:');
    const r = reporter.server.url;
    const sock = operator.slice('unix:'.length);
    out(`  resource-plane ls ${operator}`);
    out(`  resource-plane get ${operator} notes/findings.txt -o -`);
    out(`  curl -s --unix-socket ${sock} http://localhost/resources/files`);
    out(`  curl -si --path-as-is --unix-socket ${sock} http://localhost/resources/files/../private.txt   # 403 outside_root`);
    out(`  curl -si -X PUT --unix-socket ${sock} http://localhost/resources/files/report.md               # 405: no write verb`);
    out(`  curl -si ${r}/resources/files                                   # 404: not on the peer listener`);
    out(`  curl -si ${r}/resources/peer/not-a-handle -H 'x-murmur-audience: reader@${readerAddr}'   # 400 malformed_handle`);
    out(`  curl -s ${r}/.well-known/agent-card.json`);
    out('  (in a checkout, `resource-plane` is `node dist/cli/main.js`)');
    out(`traces: ${reporter.session.trace.path}`);
    out(`        ${reader.session.trace.path}`);
    out("        (kept when the demo stops, like any session's: resource-plane records lists them)");
    out(`scratch: ${scratch} (the workdirs; removed when the demo stops)`);
    out('Ctrl-C to stop.');
    return running;
  } catch (error) {
    await Promise.allSettled(running.map((r) => r.stop()));
    removeScratch();
    throw error;
  }
}
