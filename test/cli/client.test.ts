// The operator client verbs against a live server, and against a peer that lies in its etag.
import { createServer, type Server } from 'node:http';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCapsule, type Capsule } from '../helpers/capsule.js';
import { runCliAsync as runCli } from '../helpers/cli.js';
import { removeTree, tempDir } from '../helpers/tree.js';

let outDir: string;
let server: Capsule;
let liar: Server;
let liarUrl: string;

beforeAll(async () => {
  outDir = tempDir();
  server = await openCapsule({
    tree: ['out/report.md: the report', 'out/sub dir/é.txt: accented', 'out/big.bin @ 2k', 'secret.txt: SECRET'],
    yaml: 'name: c\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n    max_bytes: 1Ki\n',
    containment: 'sealed',
  });
  // A server that answers like the operator plane but whose etag does not describe its body.
  liar = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', etag: `"sha256:${'0'.repeat(64)}"` });
    res.end('tampered bytes');
  });
  await new Promise<void>((r) => liar.listen(0, '127.0.0.1', r));
  liarUrl = `http://127.0.0.1:${(liar.address() as { port: number }).port}`;
});

afterAll(async () => {
  await server.close();
  await new Promise((r) => liar.close(r));
  removeTree(outDir);
});

describe('resource-plane ls', () => {
  it('prints the listing as a table', async () => {
    const r = await runCli(['ls', server.url]);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^root out\/ \(read-only, max 1024 bytes per file\), generation 0, containment sealed\n/);
    expect(r.stdout).toMatch(/SIZE\s+MODIFIED\s+SHA256\s+PATH/);
    expect(r.stdout).toMatch(/\n\s+10\s+\S+Z\s+[0-9a-f]{16}\s+report\.md\n/);
    expect(r.stdout).toContain('sub dir/é.txt');
    expect(r.stdout).toContain('3 file(s), 2066 bytes');
  });

  it('prints a time outside the Date range as the raw number, and escapes control and format characters in names', async () => {
    // A hostile capsule chooses its names and mtimes; this server answers as such a capsule's listing would.
    const listing = {
      root: 'out/',
      mode: 'read-only',
      max_bytes: 10,
      generation: 0,
      containment_achieved: 'sealed',
      entries: [
        { path: 'invoice_\u202efdp.exe', size_bytes: 1, mtime_ms: 1e16, sha256: 'a'.repeat(64) },
        { path: 'zero\u200bwidth\ttab', size_bytes: 1, mtime_ms: 9007199254740991, sha256: 'b'.repeat(64) },
      ],
    };
    const body = JSON.stringify(listing);
    const odd = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
    await new Promise<void>((r) => odd.listen(0, '127.0.0.1', r));
    try {
      const r = await runCli(['ls', `http://127.0.0.1:${(odd.address() as { port: number }).port}`]);
      expect(r.status).toBe(0);
      expect(r.stdout).toContain('10000000000000000');
      expect(r.stdout).toContain('9007199254740991');
      expect(r.stdout).toContain('invoice_\\u{202e}fdp.exe');
      expect(r.stdout).toContain('zero\\u{200b}width\\x09tab');
      expect(r.stdout).not.toMatch(/[\u202e\u200b\t]/);
    } finally {
      await new Promise((r) => odd.close(r));
    }
  });

  it('reports an unreachable server and a non-URL clearly', async () => {
    expect((await runCli(['ls', 'http://127.0.0.1:1'])).stderr).toMatch(/^error: cannot reach http:\/\/127\.0\.0\.1:1/);
    const bad = await runCli(['ls', 'not a url']);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("'not a url' is not a URL");
  });
});

describe('resource-plane get', () => {
  it('downloads a file, verifying the etag, to -o or to its basename', async () => {
    const target = join(outDir, 'copy.md');
    const r = await runCli(['get', server.url, 'report.md', '-o', target]);
    expect(r.status).toBe(0);
    expect(readFileSync(target, 'utf8')).toBe('the report');
    expect(r.stderr).toContain('etag verified');
    const again = await runCli(['get', server.url, 'report.md', '-o', target]);
    expect(again.status).toBe(7);
    expect(again.stderr).toContain('exists; pass --force');
    expect((await runCli(['get', server.url, 'report.md', '-o', target, '--force'])).status).toBe(0);
  });

  it('encodes the path so names with spaces and non-ASCII arrive intact', async () => {
    const target = join(outDir, 'accent.txt');
    expect((await runCli(['get', server.url, 'sub dir/é.txt', '-o', target])).status).toBe(0);
    expect(readFileSync(target, 'utf8')).toBe('accented');
  });

  it('writes to stdout with -o -', async () => {
    const r = await runCli(['get', server.url, 'report.md', '-o', '-']);
    expect(r.stdout).toBe('the report');
  });

  it.each([
    ['../secret.txt', '403 outside_root: the requested path resolves outside the export root'],
    ['missing.md', '404 not_found: no such file under the export root'],
    ['big.bin', '413 too_large: file exceeds the declared exports.files.max_bytes of 1024 bytes'],
    ['sub dir', '403 not_a_regular_file: the requested path is not a regular file'],
  ])('states the server refusal for %s and saves nothing', async (path, message) => {
    const target = join(outDir, 'refused.out');
    const r = await runCli(['get', server.url, path, '-o', target]);
    expect(r.status).toBe(4);
    expect(r.stderr).toBe(`error: ${message}\n`);
    expect(existsSync(target)).toBe(false);
  });

  it('refuses to save bytes whose hash does not match the etag', async () => {
    const target = join(outDir, 'tampered.out');
    const r = await runCli(['get', liarUrl, 'report.md', '-o', target]);
    expect(r.status).toBe(5);
    expect(r.stderr).toMatch(/^error: etag mismatch: .*nothing was saved/);
    expect(existsSync(target)).toBe(false);
    expect(readdirSync(outDir).filter((f) => f.endsWith('.part'))).toEqual([]);
    writeFileSync(join(outDir, 'keep.txt'), 'x');
  });
});
