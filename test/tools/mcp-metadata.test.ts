// What an MCP host reads before it calls anything, and the shapes it gets back, through the SDK's
// own client over a spawned `serve --control stdio`: serverInfo from package.json, each tool's
// title, annotations and input/output schemas, structured results that validate against the
// listed outputSchema, bad arguments refused `invalid_argument`, and an unknown tool as JSON-RPC
// error -32602 on the wire. The list is the one the SDK's own registerTool renders from the same
// contracts (control.ts answers tools/list itself, so an SDK upgrade that changed it shows here).
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { describe, expect, it } from 'vitest';
import { callTool, toolSpecs } from '../../src/tools/index.js';
import { offlineCapsule } from '../helpers/capsule.js';
import { defer, reap } from '../helpers/cleanup.js';
import { refusal } from '../helpers/refusal.js';
import { CLI } from '../helpers/cli.js';
import { startMcpServe } from '../helpers/mcp.js';
import { scratch } from '../helpers/tree.js';

const PACKAGE = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { name: string; version: string };

interface Capsule {
  client: Client;
  advertised: string;
  trace: string;
  workdir: string;
}

async function launch(manifest: string, tree: string[] = []): Promise<Capsule> {
  const workdir = scratch(tree);
  writeFileSync(join(workdir, 'murmur.yaml'), manifest);
  const { client, ready } = await startMcpServe(['--workdir', workdir, '--trace', join(scratch(), 'trace.jsonl')], { clientName: 'test-host' });
  return { client, advertised: ready.advertised_url, trace: ready.trace, workdir };
}

const BOTH =
  'version: "1"\nexports:\n  peer_files:\n    root: out/\n    max_ttl: 10m\ncapabilities:\n  network:\n    allow: [localhost]\n  peer_fetch:\n    allow: [localhost]\n';
const FETCH_ONLY = 'version: "1"\ncapabilities:\n  peer_fetch:\n    allow: [localhost]\n';

function byName(tools: Tool[], name: string): Tool {
  const tool = tools.find((t) => t.name === name);
  expect(tool, `${name} is listed`).toBeDefined();
  return tool!;
}

function errorBody(result: object): { error: string; message: string } {
  return JSON.parse((result as { content: Array<{ text: string }> }).content[0]!.text);
}

describe('what a host reads', () => {
  it('serverInfo is the package name and the version in package.json, and the tool list is fixed', async () => {
    const c = await launch(`name: a\n${BOTH}`);
    expect(c.client.getServerVersion()).toEqual({ name: PACKAGE.name, version: PACKAGE.version });
    expect(c.client.getServerCapabilities()?.tools).toEqual({ listChanged: false });
  });

  it('each tool has a title, annotations saying what it touches, and input and output schemas', async () => {
    const c = await launch(`name: a\n${BOTH}`);
    const { tools } = await c.client.listTools();
    expect(tools.map((t) => t.name)).toEqual(['share-file', 'fetch-peer-file']);

    const share = byName(tools, 'share-file');
    expect(share.title).toBe('Share a file with a peer capsule');
    // It grants a peer read access and reaches the network: not read-only, open-world.
    expect(share.annotations).toEqual({ readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true });
    expect(share.inputSchema).toMatchObject({ type: 'object', required: ['path', 'peer'], additionalProperties: false });
    expect(share.outputSchema?.required).toEqual(['handle', 'handle_id', 'expires_at_ms', 'audience']);

    const fetchTool = byName(tools, 'fetch-peer-file');
    expect(fetchTool.title).toBe('Fetch a file a peer capsule shared');
    // It writes a file under peer-in/: not read-only, yet replaces nothing of the agent's.
    expect(fetchTool.annotations).toEqual({ readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true });
    expect(fetchTool.inputSchema).toMatchObject({ type: 'object', required: ['peer', 'handle'], additionalProperties: false });
    expect(fetchTool.outputSchema?.required).toEqual(['path', 'bytes', 'sha256', 'peer', 'generation']);
  });
});

describe("the list a host reads is the SDK's own rendering", () => {
  it.each([
    ['both tools', BOTH],
    ['fetch only', FETCH_ONLY],
  ])('%s: tools/list equals what registerTool lists for the same contracts', async (_label, manifest) => {
    const c = await launch(`name: a\n${manifest}`);
    const served = (await c.client.listTools()).tools;
    // A reference server that registers the same specs the way the SDK's high-level API does.
    const offline = await offlineCapsule({ yaml: `name: a\n${manifest}`, advertise: 'http://localhost:4242' });
    const reference = new McpServer({ name: 'reference', version: '0' });
    for (const spec of toolSpecs(offline.session)) {
      const tool = reference.registerTool(
        spec.name,
        { title: spec.title, description: spec.description, inputSchema: spec.input, outputSchema: spec.output, annotations: spec.annotations },
        async () => ({ content: [] }),
      );
      if (!spec.declared) tool.disable();
    }
    const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
    await reference.connect(serverSide);
    const client = new Client({ name: 'test-host', version: '1.0.0' });
    await client.connect(clientSide);
    defer(() => client.close());
    expect(served).toEqual((await client.listTools()).tools);
    expect(served.length).toBeGreaterThan(0);
  });
});

describe('what a host gets back', () => {
  it('structured results validate against the listed outputSchema, for both tools', async () => {
    const reporter = await launch(`name: reporter\n${BOTH}`, ['out/report.md: the findings']);
    const reader = await launch(`name: reader\n${FETCH_ONLY}`);
    const validator = new AjvJsonSchemaValidator();
    const reporterTools = (await reporter.client.listTools()).tools;
    const readerTools = (await reader.client.listTools()).tools;

    const shared = await reporter.client.callTool({ name: 'share-file', arguments: { path: 'report.md', peer: new URL(reader.advertised).host } });
    expect(shared.isError).toBeFalsy();
    const checkShare = validator.getValidator(byName(reporterTools, 'share-file').outputSchema!);
    expect(checkShare(shared.structuredContent)).toMatchObject({ valid: true });
    // The text content is the same object.
    expect(JSON.parse((shared.content as Array<{ text: string }>)[0]!.text)).toEqual(shared.structuredContent);

    const handle = (shared.structuredContent as { handle: string }).handle;
    const fetched = await reader.client.callTool({ name: 'fetch-peer-file', arguments: { peer: new URL(reporter.advertised).host, handle } });
    expect(fetched.isError).toBeFalsy();
    const checkFetch = validator.getValidator(byName(readerTools, 'fetch-peer-file').outputSchema!);
    expect(checkFetch(fetched.structuredContent)).toMatchObject({ valid: true });
    // A result that breaks the schema is caught: the validator is not vacuous.
    expect(checkFetch({ ...(fetched.structuredContent as object), bytes: 'many' })).toMatchObject({ valid: false });
  });

  it('arguments that do not match the input schema are refused invalid_argument, naming every problem, untraced', async () => {
    const c = await launch(`name: a\n${BOTH}`);
    const token = `mh1.${'A'.repeat(40)}.${'B'.repeat(43)}`;
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ path: 1 }, "argument 'path' must be a string; missing required argument 'peer'"],
      [{}, "missing required argument 'path'; missing required argument 'peer'"],
      [{ path: 'a', peer: 'b', ttl: true }, "argument 'ttl' must be a string or an integer"],
      [{ path: 'a', peer: 'b', ttl: 1.5 }, "argument 'ttl' must be a string or an integer"],
      [{ path: 'a', peer: 'b', extra: true }, "unknown argument 'extra'"],
    ];
    // callTool is the one validator: in-process, the same arguments get the same refusal.
    const offline = await offlineCapsule({ yaml: `name: a\n${BOTH}`, advertise: 'http://localhost:4242' });
    for (const [args, message] of cases) {
      const r = await c.client.callTool({ name: 'share-file', arguments: args });
      expect(r.isError).toBe(true);
      expect(errorBody(r)).toEqual({ error: 'invalid_argument', message });
      const inProcess = await refusal(callTool(offline.session, 'share-file', args));
      expect({ error: inProcess.code, message: inProcess.message }).toEqual({ error: 'invalid_argument', message });
    }
    expect(
      readFileSync(offline.tracePath, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).event_type),
    ).toEqual(['session_start']);
    // An argument name is caller text: a pasted token never comes back.
    const pasted = await c.client.callTool({ name: 'share-file', arguments: { path: 'a', peer: 'b', [token]: 'x' } });
    expect(errorBody(pasted).error).toBe('invalid_argument');
    expect(errorBody(pasted).message).not.toContain(token);
    const events = readFileSync(c.trace, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).event_type);
    expect(events).toEqual(['session_start']);
  });
});

describe('an unknown tool on the wire', () => {
  it('is a JSON-RPC error -32602 with no result, and a long name is not echoed whole', async () => {
    const workdir = scratch();
    writeFileSync(join(workdir, 'murmur.yaml'), `name: a\n${FETCH_ONLY}`);
    const traceDir = scratch();
    const child = reap(spawn(process.execPath, [CLI, 'serve', '--workdir', workdir, '--control', 'stdio', '--trace', join(traceDir, 't.jsonl')]));
    const longName = `x${'y'.repeat(5000)}`;
    let out = '';
    const replies = new Promise<string[]>((resolve) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('"id":3')) resolve(out.trim().split('\n'));
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
    send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'rm-rf', arguments: {} } });
    send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: longName, arguments: {} } });
    const lines = (await replies).map((l) => JSON.parse(l) as { id?: number; result?: unknown; error?: { code: number; message: string } });
    const second = lines.find((m) => m.id === 2)!;
    expect(second.result).toBeUndefined();
    expect(second.error?.code).toBe(-32602);
    expect(second.error?.message).toBe("Unknown tool: 'rm-rf'");
    const third = lines.find((m) => m.id === 3)!;
    expect(third.error?.code).toBe(-32602);
    expect(third.error!.message.length).toBeLessThan(300);
    child.stdin.end();
  });
});
