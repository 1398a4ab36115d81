// Operating a served capsule: a readiness route that says nothing about the capsule and is not
// traced, and log lines that each carry the session id.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServe } from '../helpers/cli.js';
import { filesManifest } from '../helpers/capsule.js';
import { rawGet, readTrace } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) removeTree(d);
});

describe('serve, operated', () => {
  it('answers GET /healthz untraced with nothing about the capsule, and binds every log line to the session', async () => {
    const base = tempDir('rp-ops-');
    dirs.push(base);
    const workdir = join(base, 'work');
    makeTree(workdir, ['out/a: a']);
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    const tracePath = join(base, 'trace.jsonl');
    const s = await startServe(['--workdir', workdir, '--trace', tracePath, '--session-id', 'ses_ops'], { RESOURCE_PLANE_LOG_LEVEL: 'debug' });
    try {
      const before = readTrace(tracePath).length;
      const health = await rawGet(s.ready.url, '/healthz');
      expect(health.status).toBe(200);
      expect(health.json()).toEqual({ status: 'ok' });
      expect(health.body.toString()).not.toMatch(/ses_ops|plane-test|out\//);
      expect(readTrace(tracePath).length).toBe(before);
      await rawGet(s.ready.url, '/resources/files/a');
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
    const lines = s.stderr().trim().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    expect(lines.length).toBeGreaterThan(2);
    for (const line of lines) expect(line.session_id, JSON.stringify(line)).toBe('ses_ops');
    expect(lines.some((l) => l.msg === 'request')).toBe(true);
  });
});

describe('Prometheus metrics behind --metrics', () => {
  it('counts answers by plane, kind and outcome, with bytes sent, and names no path; absent without the flag', async () => {
    const base = tempDir('rp-metrics-');
    dirs.push(base);
    const workdir = join(base, 'work');
    makeTree(workdir, ['out/secret-name.txt: twelve bytes']);
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    const s = await startServe(['--workdir', workdir, '--trace', join(base, 't.jsonl'), '--metrics']);
    try {
      await rawGet(s.ready.url, '/resources/files/secret-name.txt');
      await rawGet(s.ready.url, '/resources/files/missing-name.txt');
      await rawGet(s.ready.url, '/resources/files');
      const m = await rawGet(s.ready.url, '/metrics');
      expect(m.status).toBe(200);
      const text = m.body.toString();
      expect(text).toContain('resource_plane_requests_total{plane="files",kind="read",outcome="ok"} 1');
      expect(text).toContain('resource_plane_requests_total{plane="files",kind="read",outcome="not_found"} 1');
      expect(text).toContain('resource_plane_requests_total{plane="files",kind="list",outcome="ok"} 1');
      expect(text).toContain('resource_plane_sent_bytes_total{plane="files"} 12');
      expect(text).toContain('resource_plane_memory_budget_in_use_bytes');
      expect(text).not.toMatch(/secret-name|missing-name/);
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
    const plain = await startServe(['--workdir', workdir, '--trace', join(base, 't2.jsonl')]);
    try {
      expect((await rawGet(plain.ready.url, '/metrics')).status).toBe(404);
    } finally {
      plain.child.kill('SIGTERM');
      await plain.exited;
    }
  });
});
