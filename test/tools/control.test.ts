// The MCP control channel as a runtime drives it: the SDK's own client spawning
// `resource-plane serve --control stdio`, for every combination of declared grants.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it } from 'vitest';
import { reap } from '../helpers/cleanup.js';
import { CLI } from '../helpers/cli.js';
import { LISTENING, startMcpServe } from '../helpers/mcp.js';
import { childPids, scratch } from '../helpers/tree.js';

interface Capsule {
  client: Client;
  transport: StdioClientTransport;
  url: string;
  advertised: string;
  trace: string;
  workdir: string;
  stderr: () => string;
}

async function launch(manifest: string, tree: string[] = []): Promise<Capsule> {
  const workdir = scratch(tree);
  writeFileSync(join(workdir, 'murmur.yaml'), manifest);
  const trace = join(scratch(), 'trace.jsonl');
  const { client, transport, ready, stderr } = await startMcpServe(['--workdir', workdir, '--containment', 'sealed', '--trace', trace]);
  return { client, transport, url: ready.url, advertised: ready.advertised_url, trace: ready.trace, workdir, stderr };
}

const HEAD = 'version: "1"\n';
const FILES = 'exports:\n  files:\n    root: out/\n    mode: read-only\n';
const PEER = 'exports:\n  peer_files:\n    root: out/\n    max_ttl: 10m\n';
const BOTH_EXPORTS = 'exports:\n  files:\n    root: out/\n    mode: read-only\n  peer_files:\n    root: out/\n    max_ttl: 10m\n';
const FETCH = 'capabilities:\n  peer_fetch:\n    allow: [localhost]\n';
const NETWORK = 'capabilities:\n  network:\n    allow: [localhost]\n';
const FETCH_AND_NETWORK = 'capabilities:\n  network:\n    allow: [localhost]\n  peer_fetch:\n    allow: [localhost]\n';

describe('tools/list offers exactly the declared tools', () => {
  it.each([
    ['nothing declared', `name: a\n${HEAD}`, []],
    ['exports.files only', `name: a\n${HEAD}${FILES}`, []],
    ['exports.peer_files', `name: a\n${HEAD}${PEER}`, ['share-file']],
    ['capabilities.peer_fetch', `name: a\n${HEAD}${FETCH}`, ['fetch-peer-file']],
    ['both', `name: a\n${HEAD}${BOTH_EXPORTS}${FETCH_AND_NETWORK}`, ['share-file', 'fetch-peer-file']],
  ])('%s', async (_label, manifest, expected) => {
    const c = await launch(manifest);
    const { tools } = await c.client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expected);
    for (const t of tools) {
      expect(t.inputSchema.type).toBe('object');
      expect(t.description).toBeTruthy();
    }
    const share = tools.find((t) => t.name === 'share-file');
    if (share) {
      expect(share.description).toContain("relative to exports.peer_files.root ('out/')");
      expect(share.description).toContain('put the handle in your message');
      expect(share.inputSchema.required).toEqual(['path', 'peer']);
      expect(Object.keys(share.inputSchema.properties ?? {})).toEqual(['path', 'peer', 'ttl']);
    }
    const fetchTool = tools.find((t) => t.name === 'fetch-peer-file');
    if (fetchTool) {
      expect(fetchTool.description).toContain('stored path, its size and SHA-256, never the contents');
      expect(fetchTool.inputSchema.required).toEqual(['peer', 'handle']);
    }
    // Logs never reach stdout (the protocol would break); they are on stderr. The line is written
    // once the channel is up, so it may trail the first answer: waited for, under a generous cap.
    for (let i = 0; i < 200 && !c.stderr().includes('"msg":"serving"'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(c.stderr()).toContain('"msg":"serving"');
  });
});

describe('a runtime drives a handoff between two spawned capsules', () => {
  it('share-file on one, fetch-peer-file on the other, with the generation advanced by notification', async () => {
    const reporter = await launch(`name: reporter\n${HEAD}${BOTH_EXPORTS}${NETWORK}`, ['out/report.md: the findings']);
    const reader = await launch(`name: reader\n${HEAD}${FETCH}`);
    const readerAddr = new URL(reader.advertised).host;
    const reporterAddr = new URL(reporter.advertised).host;

    const shared = await reporter.client.callTool({ name: 'share-file', arguments: { path: 'report.md', peer: readerAddr } });
    expect(shared.isError).toBeFalsy();
    const minted = shared.structuredContent as { handle: string; handle_id: string; expires_at_ms: number; audience: string };
    expect(minted.audience).toBe(`reader@${readerAddr}`);
    expect(JSON.parse((shared.content as Array<{ text: string }>)[0]!.text)).toEqual(minted);

    await reporter.client.notification({ method: 'notifications/task_completed' });
    // The notification is processed in order before the next request on the same channel.
    await reporter.client.listTools();
    const read = await fetch(`${reporter.url}/resources/files/report.md`);
    expect(read.headers.get('x-murmur-generation')).toBe('1');

    const fetched = await reader.client.callTool({ name: 'fetch-peer-file', arguments: { peer: reporterAddr, handle: minted.handle } });
    expect(fetched.isError).toBeFalsy();
    const landed = fetched.structuredContent as { path: string; bytes: number; sha256: string; peer: string; generation: number };
    expect(landed.path).toBe(`peer-in/${minted.handle_id}-report.md`);
    expect(landed.generation).toBe(1);
    expect(readFileSync(join(reader.workdir, landed.path), 'utf8')).toBe('the findings');
    expect(landed.sha256).toBe(createHash('sha256').update('the findings').digest('hex'));
    expect(JSON.stringify(landed)).not.toContain('the findings');

    for (const c of [reporter, reader]) {
      const trace = readFileSync(c.trace, 'utf8');
      expect(trace).not.toContain('mh1.');
      expect(trace).toContain(minted.handle_id);
    }
  });

  it('refuses an undeclared tool clearly and traces it; an unknown tool is a JSON-RPC error', async () => {
    const c = await launch(`name: a\n${HEAD}${FILES}`);
    const share = await c.client.callTool({ name: 'share-file', arguments: { path: 'x', peer: 'localhost:1' } });
    expect(share.isError).toBe(true);
    expect(JSON.parse((share.content as Array<{ text: string }>)[0]!.text)).toEqual({
      error: 'no_peer_plane',
      message: 'this capsule declares no exports.peer_files block, so it has no peer plane',
    });
    const fetchCall = await c.client.callTool({ name: 'fetch-peer-file', arguments: { peer: 'localhost:1', handle: 'mh1.a.b' } });
    expect(fetchCall.isError).toBe(true);
    expect(JSON.parse((fetchCall.content as Array<{ text: string }>)[0]!.text).error).toBe('peer_not_allowed');
    // A name that is no tool of ours is a protocol error (JSON-RPC -32602), not a tool result.
    const unknown = await c.client.callTool({ name: 'rm-rf', arguments: {} }).then(
      () => null,
      (error: unknown) => error,
    );
    expect(unknown).toBeInstanceOf(McpError);
    expect((unknown as McpError).code).toBe(ErrorCode.InvalidParams);
    // The client's McpError adds its prefix once: the server's wire message carries none of its own.
    expect((unknown as McpError).message).toBe("MCP error -32602: Unknown tool: 'rm-rf'");
    const bad = await c.client.callTool({ name: 'share-file', arguments: { path: 1 } });
    expect(JSON.parse((bad.content as Array<{ text: string }>)[0]!.text).error).toBe('invalid_argument');
    const events = readFileSync(c.trace, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(events.map((e) => [e.event_type, e.outcome ?? null])).toEqual([
      ['session_start', null],
      ['peer_handle_mint', 'no_peer_plane'],
      ['peer_file_fetch', 'peer_not_allowed'],
    ]);
    expect(JSON.stringify(events)).not.toContain('mh1.a.b');
  });
});

describe('closing stdin ends the session', () => {
  it('exits 0, flushes the trace and leaves no child behind', async () => {
    const workdir = scratch();
    writeFileSync(join(workdir, 'murmur.yaml'), `name: a\n${HEAD}${PEER}`);
    const traceDir = scratch();
    const trace = join(traceDir, 'trace.jsonl');
    const child = reap(
      spawn(process.execPath, [CLI, 'serve', '--workdir', workdir, '--control', 'stdio', '--trace', trace], { stdio: ['pipe', 'pipe', 'pipe'] }),
    );
    let out = '';
    const listening = new Promise<void>((resolve) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes(LISTENING)) resolve();
      });
    });
    const send = (m: object) => child.stdin.write(`${JSON.stringify(m)}\n`);
    send({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
    });
    send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    await listening;
    // Every stdout line is a JSON-RPC message.
    for (const line of out.trim().split('\n')) expect(JSON.parse(line).jsonrpc).toBe('2.0');
    // No child processes at all.
    expect(childPids(child.pid!)).toEqual([]);
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.stdin.end();
    expect(await exited).toBe(0);
    expect(JSON.parse(readFileSync(trace, 'utf8').split('\n')[0]!).event_type).toBe('session_start');
  });
});
