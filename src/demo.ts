// `resource-plane demo` (what `npm start` runs): copies the example capsules to a scratch
// directory, so the checkout is never written, and serves the reporter's operator plane.
import { cpSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, stderrLogger } from './launch.js';

const examples = join(dirname(fileURLToPath(import.meta.url)), '..', 'examples');

export async function runDemo(out: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), 'resource-plane-demo-'));
  cpSync(join(examples, 'reporter'), join(scratch, 'reporter'), { recursive: true });
  const logger = stderrLogger();
  const reporter = await launch({ workdir: join(scratch, 'reporter'), containment: 'sealed', trace: join(scratch, 'reporter.trace.jsonl'), logger });
  out(`reporter capsule serving ${reporter.server.url} (workdir ${join(scratch, 'reporter')})`);
  out('');
  out('try:');
  out(`  curl -s ${reporter.server.url}/resources/files | jq`);
  out(`  curl -si ${reporter.server.url}/resources/files/report.md`);
  out(`  curl -si --path-as-is ${reporter.server.url}/resources/files/../private.txt   # refused: outside_root`);
  out('');
  out(`trace: ${reporter.session.trace.path}`);
  out('Ctrl-C to stop.');
  const stop = async () => {
    await reporter.stop();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop());
  process.on('SIGTERM', () => void stop());
}
