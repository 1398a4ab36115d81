// The agent-loop tools as one typed API, shared by the MCP control channel and in-process callers:
// their definitions (offered only when declared), argument validation, and the refusal a runtime
// gets for a tool the manifest does not declare. The work itself is in share-file.ts and
// fetch-peer-file.ts beside this file.
import { Refusal, renderTool } from '../codes.js';
import { redactHandles } from '../redact.js';
import type { Session, ToolName } from '../session.js';
import { fetchPeerFile } from './fetch-peer-file.js';
import { shareFile } from './share-file.js';

export { fetchPeerFile, shareFile };

export interface ToolDefinition {
  name: ToolName;
  description: string;
  inputSchema: { type: 'object'; properties: Record<string, unknown>; required: string[]; additionalProperties: false };
}

export function toolDefinitions(session: Session): ToolDefinition[] {
  const defs: ToolDefinition[] = [];
  const peer = session.manifest.peerFiles;
  if (peer) {
    defs.push({
      name: 'share-file',
      description:
        `Hand one file to one named peer capsule. \`path\` is relative to exports.peer_files.root ('${peer.root}'). ` +
        'Returns an opaque handle that only that peer can redeem, until it expires: put the handle in your message to the peer. ' +
        `\`ttl\` may only narrow the handle's lifetime (at most ${peer.effectiveMaxTtlSecs}s).`,
      inputSchema: {
        type: 'object',
        properties: {
          path: { type: 'string', description: `file path relative to exports.peer_files.root ('${peer.root}')` },
          peer: { type: 'string', description: "the peer capsule's address: host:port or an http(s) URL" },
          ttl: { type: 'string', description: 'optional lifetime such as 90s, 10m, 1h; clamped to max_ttl' },
        },
        required: ['path', 'peer'],
        additionalProperties: false,
      },
    });
  }
  if (session.manifest.peerFetchAllow) {
    defs.push({
      name: 'fetch-peer-file',
      description:
        'Fetch a file a peer capsule handed you. The bytes are stored as a file under peer-in/ in your workdir; ' +
        'the result is the stored path, its size and SHA-256, never the contents. Read the file if you decide to.',
      inputSchema: {
        type: 'object',
        properties: {
          peer: { type: 'string', description: "the peer capsule's address: host:port or an http(s) URL" },
          handle: { type: 'string', description: 'the mh1 handle the peer sent you' },
        },
        required: ['peer', 'handle'],
        additionalProperties: false,
      },
    });
  }
  return defs;
}

function stringArgs(args: unknown, required: string[], optional: string[]): Record<string, string> {
  if (typeof args !== 'object' || args === null || Array.isArray(args)) {
    throw new Refusal('invalid_argument', 'the arguments must be an object');
  }
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(args)) {
    if (!required.includes(key) && !optional.includes(key)) throw new Refusal('invalid_argument', `unknown argument '${key}'`);
    if (typeof value !== 'string') throw new Refusal('invalid_argument', `argument '${key}' must be a string`);
    out[key] = value;
  }
  for (const key of required) {
    if (!(key in out)) throw new Refusal('invalid_argument', `missing required argument '${key}'`);
  }
  return out;
}

/**
 * Runs one tool by name. Refusals are a Refusal whose detail is the sentence for the agent; an
 * unknown tool name is `unknown_tool`. Every
 * refusal message passes the redaction boundary here, whoever built it: messages quote caller text
 * (a peer, a path, an argument name), and a token pasted into any of them must not come back out.
 */
export async function callTool(session: Session, name: string, args: unknown): Promise<Record<string, unknown>> {
  try {
    return await runTool(session, name, args);
  } catch (error) {
    // Anything but a Refusal is unexpected, and its text (a host path, a URL) is not passed on.
    const refusal = error instanceof Refusal ? error : new Refusal('io_error', 'the tool failed unexpectedly');
    throw new Refusal(refusal.code, redactHandles(renderTool(refusal).message));
  }
}

async function runTool(session: Session, name: string, args: unknown): Promise<Record<string, unknown>> {
  if (name === 'share-file') {
    const a = stringArgs(args, ['path', 'peer'], ['ttl']);
    return { ...(await shareFile(session, { path: a.path!, peer: a.peer!, ttl: a.ttl })) };
  }
  if (name === 'fetch-peer-file') {
    const a = stringArgs(args, ['peer', 'handle'], []);
    return { ...(await fetchPeerFile(session, { peer: a.peer!, handle: a.handle! })) };
  }
  throw new Refusal('unknown_tool', `no tool named '${name}' exists here`);
}
