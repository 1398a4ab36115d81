// The shipped systemd unit (examples/systemd/resource-plane@.service): its sandbox scores an
// exposure of 2.0 or lower ("OK", or better: "SAFE") in systemd's own offline analysis, and it does not break the
// server it sandboxes: every system call a confined `serve` makes while it starts, lists, reads and
// stops is one the unit's SystemCallFilter allows (as systemd expands its groups), and every socket
// it opens is of a family RestrictAddressFamilies allows. No systemd needs to run: the analysis is
// offline, and the server runs under strace(1). Each part is skipped where its tool is missing
// (CI installs systemd-analyze; strace is optional).
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { defer, reap } from '../helpers/cleanup.js';
import { CLI } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';

const UNIT = fileURLToPath(new URL('../../examples/systemd/resource-plane@.service', import.meta.url));
const has = (tool: string, args: string[]) => spawnSync(tool, args).status === 0;
const hasAnalyze = has('systemd-analyze', ['--version']);
const hasStrace = has('strace', ['-V']);

/** The values of one directive, every line of it, in order. */
function directive(name: string): string[] {
  return readFileSync(UNIT, 'utf8')
    .replace(/\\\n/g, ' ')
    .split('\n')
    .filter((line) => line.startsWith(`${name}=`))
    .map((line) => line.slice(name.length + 1).trim());
}

/** Every group systemd knows and its members (syscalls and other groups), from `systemd-analyze syscall-filter`. */
function syscallGroups(): Map<string, string[]> {
  const groups = new Map<string, string[]>();
  let current: string[] | null = null;
  for (const line of execFileSync('systemd-analyze', ['syscall-filter'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).split('\n')) {
    const group = /^(@[\w-]+)$/.exec(line);
    if (group) groups.set(group[1]!, (current = []));
    else if (/^\S/.test(line) || line === '') current = line === '' ? current : null;
    else if (current && /^ {4}[@\w]/.test(line)) current.push(line.trim());
  }
  return groups;
}

/** What the unit's SystemCallFilter lines allow: allow lists unite, `~` lists then take away. */
function allowedSyscalls(): Set<string> {
  const groups = syscallGroups();
  const expand = (item: string, seen = new Set<string>()): string[] => {
    if (!item.startsWith('@')) return [item];
    if (seen.has(item)) return [];
    seen.add(item);
    const members = groups.get(item);
    if (!members) throw new Error(`systemd knows no group ${item}`);
    return members.flatMap((m) => expand(m, seen));
  };
  const allowed = new Set<string>();
  const denied = new Set<string>();
  for (const value of directive('SystemCallFilter')) {
    const deny = value.startsWith('~');
    for (const item of value.replace(/^~/, '').split(/\s+/).filter(Boolean)) {
      for (const call of expand(item)) (deny ? denied : allowed).add(call);
    }
  }
  for (const call of denied) allowed.delete(call);
  return allowed;
}

describe('the systemd unit', () => {
  it.skipIf(!hasAnalyze)('scores an exposure of at most 2.0 ("OK") in systemd-analyze security --offline', () => {
    const r = spawnSync('systemd-analyze', ['security', '--offline=true', UNIT], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const overall = /Overall exposure level for resource-plane@\w*\.service: (\d+\.\d) (\w+)/.exec(r.stdout);
    expect(overall, r.stdout).not.toBeNull();
    expect(Number(overall![1])).toBeLessThanOrEqual(2.0);
    expect(['OK', 'SAFE']).toContain(overall![2]);
    // The layers a careful deployer expects are each in place, not only a low total.
    for (const setting of [
      'NoNewPrivileges=',
      'ProtectSystem=',
      'ProtectHome=',
      'PrivateTmp=',
      'PrivateDevices=',
      'RestrictAddressFamilies=~AF_PACKET',
      'SystemCallArchitectures=',
      'ProtectProc=',
      'UMask=',
    ]) {
      expect(r.stdout, setting).toMatch(new RegExp(`^✓ ${setting.replace(/[.*+?^${}()|[\]\\~]/g, '\\$&')}`, 'm'));
    }
  });

  it('keeps MemoryDenyWriteExecute off, saying why (V8 compiles to machine code at run time)', () => {
    expect(directive('MemoryDenyWriteExecute')).toEqual([]);
    expect(readFileSync(UNIT, 'utf8')).toMatch(/MemoryDenyWriteExecute is deliberately not set: V8/);
  });

  // Not under the ASan suite: strace with the sanitizer runtime preloaded hangs (as ps does), and
  // the runtime's own system calls are not the server's.
  it.skipIf(!hasAnalyze || !hasStrace || !!process.env.RESOURCE_PLANE_ASAN)(
    'allows every system call and socket family a confined serve uses to start, list, read and stop',
    async () => {
      const d = scratch(['w/out/report.md: the report', 'w/out/sub/b.txt: b', 'records/', 'run/']);
      const manifest = join(d, 'cap.yaml');
      const log = join(d, 'strace.txt');
      execFileSync('chmod', ['0700', join(d, 'run')]);
      writeFileSync(manifest, 'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n');
      const socket = join(d, 'run', 'operator.sock');
      const child = reap(
        spawn(
          'strace',
          [
            '-f',
            '-qq',
            '-o',
            log,
            process.execPath,
            CLI,
            'serve',
            '--workdir',
            join(d, 'w'),
            '--manifest',
            manifest,
            '--containment',
            'sealed',
            '--operator-listen',
            `unix:${socket}`,
          ],
          {
            env: { ...process.env, RESOURCE_PLANE_RECORDS_DIR: join(d, 'records'), RESOURCE_PLANE_LOG_LEVEL: 'warn' },
          },
        ),
      );
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      let out = '';
      let err = '';
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      const ready = await new Promise<{ url: string }>((resolve, reject) => {
        child.stdout.on('data', (c: Buffer) => {
          out += c.toString();
          if (out.includes('\n')) resolve(JSON.parse(out.slice(0, out.indexOf('\n'))));
        });
        void exited.then((code) => reject(new Error(`serve exited ${code}: ${err}`)));
      });
      // The operator plane over the unix socket (a listing, a file), and the peer listener's card.
      const curl = (path: string) => execFileSync('curl', ['-sf', '--unix-socket', socket, `http://localhost${path}`], { encoding: 'utf8' });
      expect(JSON.parse(curl('/resources/files')).entries).toHaveLength(2);
      expect(curl('/resources/files/report.md')).toBe('the report');
      expect((await fetch(`${ready.url}/healthz`)).status).toBe(200);
      // Stop it as systemctl stop does: SIGTERM to the server (strace's child), not to strace.
      const server = Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(/\s+/)[0]);
      defer(() => {
        try {
          process.kill(server, 'SIGKILL');
        } catch {
          // already gone
        }
      });
      process.kill(server, 'SIGTERM');
      expect(await exited).toBe(0);
      expect(err).not.toContain('serving without Landlock');

      const lines = readFileSync(log, 'utf8').split('\n');
      const used = new Set(lines.map((l) => /^\d+ +([a-z_0-9]+)\(/.exec(l)?.[1]).filter((n): n is string => n !== undefined));
      expect(used.has('landlock_restrict_self'), 'the server confined itself').toBe(true);
      const allowed = allowedSyscalls();
      expect([...used].filter((call) => !allowed.has(call)).sort()).toEqual([]);

      const families = new Set(directive('RestrictAddressFamilies').flatMap((v) => v.split(/\s+/)));
      const opened = new Set(lines.map((l) => /^\d+ +socket\((AF_\w+)/.exec(l)?.[1]).filter((f): f is string => f !== undefined));
      expect([...opened].filter((f) => !families.has(f))).toEqual([]);
    },
  );
});
