// What the confinement report and ruleset say beyond the basics of test/launch/landlock-serve.test.ts:
// the rights each Landlock ABI leaves unhandled (derived for ABIs 1..7, and recorded by a real
// confined serve), and the process's own /proc/<pid> in the ruleset, which `--metrics` needs:
// prom-client reads /proc/self/{status,limits,stat,fd/}, and under a ruleset without them the
// process gauges read 0 and process_max_fds is missing.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { planConfinement } from '../../src/launch/confine-plan.js';
import { unhandledRights, type Confinement } from '../../src/session/confinement.js';
import { parseManifest } from '../../src/manifest/model.js';
import { landlockAbi } from '../../src/addon/landlock.js';
import { reap } from '../helpers/cleanup.js';
import { startServe } from '../helpers/cli.js';
import { rawGet, readTrace } from '../helpers/http.js';
import { scratch } from '../helpers/tree.js';

const ABI = landlockAbi().abi;
const YAML = 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n';

describe('unhandledRights', () => {
  it('names each right an ABI does not handle: refer < 2, truncate < 3, TCP < 4, ioctl_dev < 5, scopes < 6', () => {
    const all = ['refer', 'truncate', 'bind_tcp', 'connect_tcp', 'ioctl_dev', 'abstract_unix_socket', 'signal'];
    expect(unhandledRights(1)).toEqual(all);
    expect(unhandledRights(2)).toEqual(all.slice(1));
    expect(unhandledRights(3)).toEqual(all.slice(2));
    expect(unhandledRights(4)).toEqual(['ioctl_dev', 'abstract_unix_socket', 'signal']);
    expect(unhandledRights(5)).toEqual(['abstract_unix_socket', 'signal']);
    expect(unhandledRights(6)).toEqual([]);
    expect(unhandledRights(7)).toEqual([]);
  });
});

describe('the plan', () => {
  it("reads the running process's own /proc/<pid> (the real directory: /proc/self is a per-caller link)", () => {
    const workdir = scratch();
    const plan = planConfinement({ workdir, tracePath: join(scratch(), 't.jsonl'), manifest: parseManifest('name: cap\nversion: "1"\n'), listenPort: 0 });
    const own = plan.rules.filter((r) => r.path.startsWith('/proc'));
    expect(own).toEqual([{ path: `/proc/${process.pid}`, access: ['read_file', 'read_dir'], directory: true, optional: false, role: 'read' }]);
  });
});

/** One `name value` sample of a Prometheus text exposition, or undefined when the series is absent. */
function sample(text: string, name: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

describe.skipIf(ABI === 0)('a confined serve', () => {
  it('records the rights its ABI leaves unhandled, and --metrics reports its real memory and descriptors', async () => {
    const workdir = scratch(['out/a.txt: a']);
    writeFileSync(join(workdir, 'murmur.yaml'), YAML);
    const trace = join(scratch(), 'trace.jsonl');
    const s = await startServe(['--workdir', workdir, '--trace', trace, '--metrics']);
    reap(s.child);
    const confinement = readTrace(trace)[0]!.confinement as Confinement;
    expect(confinement).toMatchObject({ applied: true, landlock_abi: ABI, unhandled: unhandledRights(ABI) });
    // The re-exec kept the PID, so the rule names the directory of the process that serves.
    expect(confinement.read).toContain(`/proc/${s.child.pid}`);

    const res = await rawGet(s.ready.url, '/metrics');
    expect(res.status).toBe(200);
    const text = res.body.toString();
    expect(sample(text, 'process_resident_memory_bytes')).toBeGreaterThan(0);
    expect(sample(text, 'process_open_fds')).toBeGreaterThan(0);
    expect(sample(text, 'process_max_fds')).toBeGreaterThan(0);
    // process.memoryUsage() reads /proc/self/stat: without it the heap gauges read 0 too.
    expect(sample(text, 'nodejs_heap_size_used_bytes')).toBeGreaterThan(0);
  });
});
