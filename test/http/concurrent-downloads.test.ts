// 64 concurrent large downloads from a real `serve` (streamed bodies, keep-alive connections reused
// for a second round, and the same again pipelined on one connection) put no
// MaxListenersExceededWarning, or any other process warning, on the server's stderr: a listener
// added per request or per chunk to something that outlives it (a socket, the session's signal,
// stdout) would, once eleven pile up (issue 40, point 7).
import { closeSync, mkdirSync, openSync, writeFileSync, writeSync } from 'node:fs';
import { Agent, get } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startServe } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';

const MiB = 1024 * 1024;
const SIZE = 2 * MiB; // above the 512 KiB streaming threshold: sent in chunks under a verified etag
const CONCURRENT = 64;

function download(url: string, agent: Agent): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    get(url, { agent }, (res) => {
      let bytes = 0;
      res.on('data', (c: Buffer) => (bytes += c.length));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes }));
      res.on('error', reject);
    }).on('error', reject);
  });
}

describe('64 concurrent large downloads', () => {
  it('leave no MaxListenersExceededWarning (nor any warning) on the server', async () => {
    const base = scratch([]);
    const workdir = join(base, 'work');
    const manifest = join(base, 'cap.yaml');
    writeFileSync(manifest, 'name: t\nversion: "1"\nexports:\n  files: { root: out/, mode: read-only, max_bytes: 16Mi }\n');
    mkdirSync(join(workdir, 'out'), { recursive: true });
    const fd = openSync(join(workdir, 'out', 'big.bin'), 'w');
    writeSync(fd, Buffer.alloc(SIZE, 0x61));
    closeSync(fd);
    const s = await startServe(['--workdir', workdir, '--manifest', manifest], { RESOURCE_PLANE_RECORDS_DIR: join(base, 'records') });
    const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENT });
    try {
      const url = `${s.ready.url}/resources/files/big.bin`;
      for (let round = 0; round < 2; round++) {
        const results = await Promise.all(Array.from({ length: CONCURRENT }, () => download(url, agent)));
        expect(results.filter((r) => r.status !== 200 || r.bytes !== SIZE)).toEqual([]);
      }
      // The same number pipelined on one connection: each waits its turn on the one socket.
      const { port, hostname } = new URL(s.ready.url);
      const received = await new Promise<number>((resolve, reject) => {
        const socket = connect(Number(port), hostname);
        let bytes = 0;
        socket.on('data', (d) => {
          bytes += d.length;
          if (bytes >= CONCURRENT * SIZE) socket.end();
        });
        socket.on('close', () => resolve(bytes));
        socket.on('error', reject);
        socket.write(Array.from({ length: CONCURRENT }, () => `GET /resources/files/big.bin HTTP/1.1\r\nhost: x\r\n\r\n`).join(''));
      });
      expect(received).toBeGreaterThan(CONCURRENT * SIZE);
    } finally {
      agent.destroy();
      s.child.kill('SIGTERM');
      await s.exited;
    }
    expect(s.stderr()).not.toMatch(/MaxListenersExceededWarning|Warning:/);
  }, 120_000);
});
