// launch's one stop sequence (src/launch/launch.ts): listings cancelled, each listener drained
// (bounded) and closed, then the key zeroed and session_end written; with a bound, a stop that
// overruns it zeroes the key at once and says so, so the CLI can end the process.
import { createWriteStream } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { launch } from '../../src/launch/launch.js';
import { parseManifest } from '../../src/manifest/model.js';
import { readTrace } from '../helpers/http.js';
import { makeTree, removeTree, tempDir } from '../helpers/tree.js';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => removeTree(d)));

async function launched() {
  const base = tempDir('rp-stop-');
  dirs.push(base);
  const workdir = join(base, 'work');
  makeTree(workdir, ['out/small.txt: small']);
  // A body far larger than a socket buffer, so a client that never reads keeps its response open.
  await new Promise<void>((resolve, reject) => {
    const out = createWriteStream(join(workdir, 'out/big.bin'));
    out.on('error', reject);
    out.end(Buffer.alloc(32 * 1024 * 1024, 7), resolve);
  });
  const yaml =
    'name: stop-test\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 64Mi\n  peer_files:\n    root: out/\n    max_ttl: 10m\n';
  const tracePath = join(base, 'trace.jsonl');
  const l = await launch({ workdir, manifest: parseManifest(yaml), tracePath, containment: 'sealed' });
  return { l, tracePath };
}

/** A client that asks for the big file and never reads a byte of the answer. */
function stalledReader(port: number): Promise<() => void> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write('GET /resources/files/big.bin HTTP/1.1\r\nHost: x\r\n\r\n');
      socket.pause();
      socket.once('readable', () => resolve(() => socket.destroy()));
    });
    socket.on('error', reject);
  });
}

describe('launch.stop', () => {
  it("resolves 'stopped' with the key zeroed and session_end written last", async () => {
    const { l, tracePath } = await launched();
    expect(l.session.key?.destroyed).toBe(false);
    expect(await l.stop('stopped', 30_000)).toBe('stopped');
    expect(l.session.key?.destroyed).toBe(true);
    const lines = readTrace(tracePath);
    expect(lines.at(-1)?.event_type).toBe('session_end');
    expect(lines.at(-1)?.reason).toBe('stopped');
  });

  it("past its bound (a response the drain still waits for), zeroes the key at once and resolves 'overran'", async () => {
    const { l } = await launched();
    const release = await stalledReader(Number(new URL(l.server.url).port));
    try {
      expect(await l.stop('SIGTERM', 200)).toBe('overran');
      expect(l.session.key?.destroyed).toBe(true);
    } finally {
      release();
    }
  });
});
