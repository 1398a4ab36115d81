// Operating a served capsule: a readiness route that says nothing about the capsule and is not
// traced, log lines that each carry the session id, and Prometheus metrics (--metrics, its own
// listener with --metrics-listen, or a registry built from the package exports for the plugin).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import Fastify from 'fastify';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServe } from '../helpers/cli.js';
import { filesManifest } from '../helpers/capsule.js';
import { pool, rawGet, readTrace, unixGet } from '../helpers/http.js';
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
    const lines = s
      .stderr()
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l));
    expect(lines.length).toBeGreaterThan(2);
    for (const line of lines) expect(line.session_id, JSON.stringify(line)).toBe('ses_ops');
    expect(lines.some((l) => l.msg === 'request completed')).toBe(true);
  });
});

describe('the access log', () => {
  it('writes one info line per request in pino-http shape, the redeem token redacted, the session id bound once; --no-access-log turns it off', async () => {
    const base = tempDir('rp-access-');
    dirs.push(base);
    const workdir = join(base, 'work');
    makeTree(workdir, ['out/a.txt: access bytes']);
    writeFileSync(join(workdir, 'murmur.yaml'), `${filesManifest('out/')}  peer_files:\n    root: out/\n    max_ttl: 10m\n`);
    const token = `mh1.${'A'.repeat(40)}.${'B'.repeat(43)}`;
    const s = await startServe(['--workdir', workdir, '--trace', join(base, 't.jsonl'), '--session-id', 'ses_access']);
    try {
      await rawGet(s.ready.url, '/resources/files/a.txt');
      await rawGet(s.ready.url, `/resources/peer/${token}`, [['x-murmur-audience', 'x@localhost:1']]);
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
    const lines = s
      .stderr()
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l));
    const access = lines.filter((l) => l.msg === 'request completed');
    expect(access).toHaveLength(2);
    expect(access[0]).toMatchObject({
      level: 30,
      session_id: 'ses_access',
      req: { method: 'GET', url: '/resources/files/a.txt' },
      res: { statusCode: 200 },
      bytes: 12,
    });
    expect(typeof access[0].responseTime).toBe('number');
    expect(access[1].req.url).toMatch(/^\/resources\/peer\/<handle:[^>]+>$/);
    expect(s.stderr()).not.toContain(token);
    const serving = s
      .stderr()
      .split('\n')
      .find((l) => l.includes('"msg":"serving"'))!;
    expect(serving.match(/"session_id"/g)).toHaveLength(1);

    const quiet = await startServe(['--workdir', workdir, '--trace', join(base, 't2.jsonl'), '--no-access-log']);
    try {
      expect((await rawGet(quiet.ready.url, '/resources/files/a.txt')).status).toBe(200);
    } finally {
      quiet.child.kill('SIGTERM');
      await quiet.exited;
    }
    expect(quiet.stderr()).not.toContain('request completed');
  });
});

describe('the access log is buffered', () => {
  /** write(2) calls the process has made so far (/proc/PID/io's syscw). */
  const writes = (pid: number) => Number(/^syscw: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))![1]);
  const accessLines = (stderr: string) =>
    stderr
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === 'request completed');

  async function served(base: string, name: string, extra: string[] = []) {
    const workdir = join(base, 'work');
    return startServe(['--workdir', workdir, '--trace', join(base, `${name}.jsonl`), ...extra]);
  }

  it('loses no line at a clean stop right after a burst, each line whole and naming its request', async () => {
    const base = tempDir('rp-access-burst-');
    dirs.push(base);
    makeTree(join(base, 'work'), ['out/a.txt: burst']);
    writeFileSync(join(base, 'work', 'murmur.yaml'), filesManifest('out/'));
    const s = await served(base, 'burst');
    const n = 300;
    await pool(
      Array.from({ length: n }, (_, i) => i),
      16,
      async () => expect((await rawGet(s.ready.url, '/resources/files/a.txt')).status).toBe(200),
    );
    s.child.kill('SIGTERM');
    expect((await s.exited).code).toBe(0);
    // Every stderr line parses (none torn by the buffer), one access line per request, in order
    // before the shutdown line.
    const lines = s
      .stderr()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const access = lines.filter((l) => l.msg === 'request completed');
    expect(access).toHaveLength(n);
    expect(new Set(access.map((l) => l.reqId)).size).toBe(n);
    const lastAccess = lines.findLastIndex((l) => l.msg === 'request completed');
    expect(lastAccess).toBeLessThan(lines.findIndex((l) => l.msg === 'shutting down'));
  });

  it('follows RESOURCE_PLANE_LOG_LEVEL: none at warn, and with --no-access-log the same line at debug', async () => {
    const base = tempDir('rp-access-level-');
    dirs.push(base);
    makeTree(join(base, 'work'), ['out/a.txt: level']);
    writeFileSync(join(base, 'work', 'murmur.yaml'), filesManifest('out/'));
    const runs: Array<[string[], string, number | null]> = [
      [[], 'warn', null],
      [['--no-access-log'], 'debug', 20],
      [[], 'debug', 30],
    ];
    for (const [flags, level, expected] of runs) {
      const s = await startServe(['--workdir', join(base, 'work'), '--trace', join(base, `${level}${flags.length}.jsonl`), ...flags], {
        RESOURCE_PLANE_LOG_LEVEL: level,
      });
      try {
        expect((await rawGet(s.ready.url, '/resources/files/a.txt')).status).toBe(200);
      } finally {
        s.child.kill('SIGTERM');
        await s.exited;
      }
      const lines = accessLines(s.stderr());
      expect(
        lines.map((l) => l.level),
        `${level} ${flags.join(' ')}`,
      ).toEqual(expected === null ? [] : [expected]);
      if (expected !== null)
        expect(lines[0]).toMatchObject({
          pid: s.child.pid,
          session_id: s.ready.session_id,
          req: { method: 'GET', url: '/resources/files/a.txt' },
          res: { statusCode: 200 },
          bytes: 5,
        });
    }
  });

  it('costs no write of its own per request, and is written within its flush period while the server runs', async () => {
    const base = tempDir('rp-access-writes-');
    dirs.push(base);
    makeTree(join(base, 'work'), ['out/a.txt: counted']);
    writeFileSync(join(base, 'work', 'murmur.yaml'), filesManifest('out/'));
    const n = 200;
    // The same requests against the same server without the access log: the difference in write
    // calls is the access log's. Written per request, it would be n.
    const extraWrites: number[] = [];
    for (const flags of [['--no-access-log'], []]) {
      const s = await served(base, `w${flags.length}`, flags);
      try {
        await rawGet(s.ready.url, '/resources/files/a.txt');
        const before = writes(s.child.pid!);
        for (let i = 0; i < n; i++) await rawGet(s.ready.url, '/resources/files/a.txt');
        extraWrites.push(writes(s.child.pid!) - before);
        if (flags.length === 0) {
          // Not stopped, not full: the periodic flush writes the lines out.
          await expect.poll(() => accessLines(s.stderr()).length, { timeout: 10_000, interval: 100 }).toBe(n + 1);
        }
      } finally {
        s.child.kill('SIGTERM');
        await s.exited;
      }
    }
    const [quiet, logged] = extraWrites as [number, number];
    expect(logged - quiet, `write calls for ${n} requests: ${quiet} without the access log, ${logged} with it`).toBeLessThan(n / 4);
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

describe('--metrics-listen: /metrics on a listener of its own', () => {
  it('serves Prometheus over TCP beside a unix operator socket: standard process and runtime names, a duration histogram, nothing else', async () => {
    const base = tempDir('rp-metrics-listen-');
    dirs.push(base);
    const workdir = join(base, 'work');
    makeTree(workdir, ['out/a.txt: metrics bytes']);
    writeFileSync(join(workdir, 'murmur.yaml'), filesManifest('out/'));
    const sockets = join(base, 'sockets');
    mkdirSync(sockets, { mode: 0o700 });
    const tracePath = join(base, 't.jsonl');
    const s = await startServe([
      '--workdir',
      workdir,
      '--trace',
      tracePath,
      '--operator-listen',
      `unix:${join(sockets, 'op.sock')}`,
      '--metrics-listen',
      '127.0.0.1:0',
    ]);
    try {
      const metricsUrl = s.ready.metrics_url as string;
      expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(await unixGet(join(sockets, 'op.sock'), '/resources/files/a.txt')).toMatchObject({ status: 200, body: 'metrics bytes' });
      const before = readTrace(tracePath).length;
      const m = await rawGet(metricsUrl, '/metrics');
      expect(m.status).toBe(200);
      const text = m.body.toString();
      for (const name of ['process_resident_memory_bytes', 'process_open_fds', 'nodejs_heap_size_used_bytes', 'nodejs_eventloop_lag_seconds']) {
        expect(text, name).toMatch(new RegExp(`^${name} `, 'm'));
      }
      expect(text).not.toContain('resource_plane_process_');
      expect(text).toMatch(/^resource_plane_request_duration_seconds_count\{plane="files",outcome="ok"\} 1$/m);
      expect(text).toMatch(/^resource_plane_request_duration_seconds_bucket\{le="\+Inf",plane="files",outcome="ok"\} 1$/m);
      // The metrics listener serves nothing else, and /metrics is only there.
      const plane = await rawGet(metricsUrl, '/resources/files/a.txt');
      expect(plane.status).toBe(404);
      expect(plane.json().error).toBe('not_found');
      expect((await unixGet(join(sockets, 'op.sock'), '/metrics')).status).toBe(404);
      expect((await rawGet(s.ready.url, '/metrics')).status).toBe(404);
      expect(readTrace(tracePath).length).toBe(before);
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
  });
});

describe('the plugin with metrics built from the package exports', () => {
  it('counts and times its answers in a registry the host serves where it likes', async () => {
    const { createMetrics, openSession, parseManifest, resourcePlanes } = await import('../../src/index.js');
    const base = tempDir('rp-plugin-metrics-');
    dirs.push(base);
    makeTree(join(base, 'work'), ['out/a.txt: plugin metrics']);
    const session = await openSession({
      workdir: join(base, 'work'),
      manifest: parseManifest(filesManifest('out/')),
      tracePath: join(base, 't.jsonl'),
      containment: 'sealed',
      advertisedUrl: null,
    });
    const metrics = await createMetrics({ memoryInUse: () => session.memory.inUse });
    const app = Fastify();
    await app.register(resourcePlanes, { session, metrics });
    app.get('/ops/metrics', async (_req, reply) => reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()));
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
      expect((await rawGet(url, '/resources/files/a.txt')).status).toBe(200);
      expect((await rawGet(url, '/resources/files/nope')).status).toBe(404);
      const text = (await rawGet(url, '/ops/metrics')).body.toString();
      expect(text).toContain('resource_plane_requests_total{plane="files",kind="read",outcome="ok"} 1');
      expect(text).toMatch(/^resource_plane_request_duration_seconds_count\{plane="files",outcome="not_found"\} 1$/m);
    } finally {
      await app.close();
      await session.close();
    }
  });
});
