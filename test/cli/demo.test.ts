// `npm start` runs `resource-plane demo`: two capsules, a handoff printed step by step, both left
// serving until SIGINT. This runs it as a user would and checks what it claims.
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defer } from '../helpers/cleanup.js';
import { CLI, runCli } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';
import { sha256Hex } from '../helpers/http.js';

describe('resource-plane demo', () => {
  it('hands a file from the reporter to the reader, verifiably, then serves until SIGINT', async () => {
    const records = join(scratch(), 'records');
    const child = spawn(process.execPath, [CLI, 'demo'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RESOURCE_PLANE_RECORDS_DIR: records } });
    let out = '';
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('Ctrl-C to stop.')) resolve();
      });
      child.on('exit', (code) => reject(new Error(`demo exited ${code}: ${out}`)));
    });
    try {
      const handleId = /minted handle ([0-9a-f]{16}) for audience reader@localhost:\d+/.exec(out)?.[1];
      expect(handleId).toBeDefined();
      expect(out).toMatch(new RegExp(`stored \\d+ bytes at peer-in/${handleId}-report\\.md`));
      expect(out).not.toContain('mh1.');
      const reporterUrl = /reporter capsule serving (http:\/\/\S+)/.exec(out)![1]!;
      const readerWorkdir = /reader capsule serving\s+\S+\s+\(workdir (\S+)\)/.exec(out)![1]!;
      defer(() => rmSync(dirname(readerWorkdir), { recursive: true, force: true }));
      expect(existsSync(join(readerWorkdir, `peer-in/${handleId}-report.md`))).toBe(true);
      // Step 4's verdict is the word MATCH (which MISMATCH must not pass for), and it is true: the
      // hash it prints is the one step 3 reports, the landed file's and the reporter's file's.
      const reporterWorkdir = /reporter capsule serving\s+\S+\s+\(workdir (\S+)\)/.exec(out)![1]!;
      const stored = new RegExp(`stored (\\d+) bytes at peer-in/${handleId}-report\\.md \\(sha256 ([0-9a-f]{64})\\)`).exec(out);
      const step4 = /^4\. sha256 of reporter's out\/report\.md: ([0-9a-f]{64}) {2}(\S+)$/m.exec(out);
      expect(stored, 'step 3 names the bytes and hash it stored').not.toBeNull();
      expect(step4, 'step 4 prints a hash and a verdict').not.toBeNull();
      expect(step4![2]).toBe('MATCH');
      const landed = readFileSync(join(readerWorkdir, `peer-in/${handleId}-report.md`));
      expect({ printed: step4![1], stored: stored![2], landed: sha256Hex(landed) }).toEqual({
        printed: sha256Hex(readFileSync(join(reporterWorkdir, 'out/report.md'))),
        stored: step4![1],
        landed: step4![1],
      });
      expect(landed.length).toBe(Number(stored![1]));
      // The reporter's operator plane is on its own unix socket; its peer listener no longer lists.
      const operatorSock = /reporter operator plane\s+unix:(\S+)/.exec(out)![1]!;
      const listing = await new Promise<{ entries: Array<{ path: string }> }>((resolve, reject) => {
        request({ socketPath: operatorSock, path: '/resources/files' }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve(JSON.parse(body)));
        })
          .on('error', reject)
          .end();
      });
      expect(listing.entries.map((e) => e.path)).toEqual(['notes/findings.txt', 'report.md']);
      expect((await fetch(`${reporterUrl}/resources/files`)).status).toBe(404);
      const scratchDir = /scratch: (\S+)/.exec(out)![1]!;
      const traces = /traces: (\S+)\n\s+(\S+)/.exec(out)!;
      for (const t of [traces[1]!, traces[2]!]) {
        const text = readFileSync(t, 'utf8');
        expect(text).toContain(handleId!);
        expect(text).not.toContain('mh1.');
      }
      child.removeAllListeners('exit');
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      child.kill('SIGINT');
      expect(await exited).toBe(0);
      // The demo removes its scratch directory on the way out, and keeps its traces where every
      // session's go: in the records directory, where `records` lists them, ended.
      expect(existsSync(scratchDir)).toBe(false);
      for (const t of [traces[1]!, traces[2]!]) {
        expect(t.startsWith(`${records}/`)).toBe(true);
        expect(readFileSync(t, 'utf8').trim().split('\n').at(-1)).toContain('"session_end"');
      }
      const listed = runCli(['records', '--json'], { RESOURCE_PLANE_RECORDS_DIR: records });
      const rows = listed.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { capsule: string; live: boolean });
      expect(rows.map((r) => [r.capsule, r.live]).sort()).toEqual([
        ['reader', false],
        ['reporter', false],
      ]);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
