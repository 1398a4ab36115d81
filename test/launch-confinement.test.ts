// What the confinement report says beyond the basics of test/landlock-serve.test.ts: the rights
// each Landlock ABI leaves unhandled, derived for ABIs 1..7 and recorded by a real confined serve.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { unhandledRights, type Confinement } from '../src/launch/confinement.js';
import { landlockAbi } from '../src/native.js';
import { reap } from './helpers/cleanup.js';
import { startServe } from './helpers/cli.js';
import { readTrace } from './helpers/http.js';
import { scratch } from './helpers/tree.js';

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

describe.skipIf(ABI === 0)('a confined serve', () => {
  it('records the rights its ABI leaves unhandled in session_start', async () => {
    const workdir = scratch(['out/a.txt: a']);
    writeFileSync(join(workdir, 'murmur.yaml'), YAML);
    const trace = join(scratch(), 'trace.jsonl');
    const s = await startServe(['--workdir', workdir, '--trace', trace]);
    reap(s.child);
    const confinement = readTrace(trace)[0]!.confinement as Confinement;
    expect(confinement).toMatchObject({ applied: true, landlock_abi: ABI, unhandled: unhandledRights(ABI) });
  });
});
