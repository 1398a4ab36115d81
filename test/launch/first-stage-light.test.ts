// The first stage of a confined launch boots light (issue 25): it parses the arguments and the
// manifest, plans the ruleset, binds, confines and re-executes, and loads nothing it does not need
// for that: no Fastify, MCP SDK, pino, prom-client, nor libsodium (the session's key). Every module
// the first stage's ESM loader loads is recorded by a loader hook; the confined image, which
// serves, records nothing (its domain refuses the write), and is checked to be serving.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { landlockAbi } from '../../src/addon/landlock.js';
import { defer } from '../helpers/cleanup.js';
import { startServe } from '../helpers/cli.js';
import { scratch } from '../helpers/tree.js';

const ABI = landlockAbi().abi;
const RECORDER = fileURLToPath(new URL('../helpers/load-recorder.mjs', import.meta.url));
const HEAVY = [
  '/node_modules/fastify/',
  '/node_modules/@modelcontextprotocol/',
  '/node_modules/pino/',
  '/node_modules/prom-client/',
  '/node_modules/sodium-native/',
];

describe('the first stage', () => {
  it.skipIf(ABI === 0)('loads neither Fastify, the MCP SDK, pino, prom-client nor libsodium', async () => {
    const workdir = scratch(['out/a.txt: a']);
    writeFileSync(
      join(workdir, 'murmur.yaml'),
      'name: cap\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n  peer_files:\n    root: out/\n    max_ttl: 15m\n',
    );
    const record = join(scratch(), 'loads.txt');
    const s = await startServe(['--workdir', workdir, '--trace', join(scratch(), 'trace.jsonl')], {
      NODE_OPTIONS: `--import ${RECORDER}`,
      LOAD_RECORDER_FILE: record,
    });
    defer(async () => {
      s.child.kill('SIGTERM');
      await s.exited;
    });
    expect(existsSync(record)).toBe(true);
    const loaded = readFileSync(record, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split('\t')[0]!);
    // It did load what it needs (the arguments' parser, the manifest's model, the confinement)...
    expect(loaded.some((u) => u.includes('/node_modules/commander/'))).toBe(true);
    expect(loaded.some((u) => u.endsWith('/manifest/model.js'))).toBe(true);
    expect(loaded.some((u) => u.endsWith('/launch/confine-apply.js'))).toBe(true);
    // ...and nothing of the server.
    expect(loaded.filter((u) => HEAVY.some((h) => u.includes(h)))).toEqual([]);
    expect(loaded.filter((u) => /\/dist\/(server|planes|tools)\//.test(u))).toEqual([]);
  });
});
