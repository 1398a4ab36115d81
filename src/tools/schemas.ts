// The agent-loop tools' contracts as zod schemas: the one source of truth for what a tool accepts
// (its MCP `inputSchema`, and the validation of every call, over MCP or in-process) and what it
// returns (its `outputSchema`, which every structured result is checked against before it leaves).
// Titles and annotations live here too, so a host reading `tools/list` learns from one place that
// share-file reaches the network and fetch-peer-file writes a file.
import type { ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { ToolName } from '../session/session.js';

const PEER = "the peer capsule's address: host:port or an http(s) URL";

/** `root` is the declared exports.peer_files.root, named in the description when there is one. */
export function shareFileInput(root: string | null = null) {
  const where = root === null ? 'exports.peer_files.root' : `exports.peer_files.root ('${root}')`;
  return z.strictObject({
    path: z.string().describe(`file path relative to ${where}`),
    peer: z.string().describe(PEER),
    // An integer is seconds, as the manifest's duration grammar reads a bare number.
    ttl: z
      .union([z.string(), z.number().int()])
      .describe('optional lifetime: seconds as an integer (90), or a duration such as 90s, 10m, 1h; clamped to max_ttl')
      .optional(),
  });
}

export function fetchPeerFileInput() {
  return z.strictObject({
    peer: z.string().describe(PEER),
    handle: z.string().describe('the mh1 handle the peer sent you'),
  });
}

export const shareFileOutput = z.object({
  handle: z.string().describe('the opaque mh1 handle: put it in your message to the peer'),
  handle_id: z.string().describe('a short id of the handle, safe to log; the trace names it'),
  expires_at_ms: z.number().int().describe('when the handle stops being redeemable, in ms since the epoch'),
  audience: z.string().describe('the only capsule that can redeem it: <name>@<host:port>'),
});

export const fetchPeerFileOutput = z.object({
  path: z.string().describe('where the bytes landed, relative to the workdir: peer-in/<handle_id>-<name>'),
  bytes: z.number().int().nonnegative().describe('the size of the landed file'),
  sha256: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .describe("the SHA-256 of the landed file, verified against the peer's etag"),
  peer: z.string().describe('the peer as given'),
  generation: z.number().int().nullable().describe("the peer's generation when it served the bytes, if it said"),
});

/** What a host is told about each tool before it calls it. */
export const TOOL_PRESENTATION: Readonly<Record<ToolName, { title: string; annotations: ToolAnnotations }>> = Object.freeze({
  'share-file': {
    title: 'Share a file with a peer capsule',
    annotations: {
      // It writes no file, but it is not read-only: it grants a peer read access to a file (a bearer
      // handle) and reads the peer's agent card over the network. Hosts often approve read-only
      // tools without asking; this one should be seen.
      readOnlyHint: false,
      destructiveHint: false,
      // Every call mints a new handle.
      idempotentHint: false,
      openWorldHint: true,
    },
  },
  'fetch-peer-file': {
    title: 'Fetch a file a peer capsule shared',
    annotations: {
      // It lands a new file under peer-in/ in the workdir, and nothing else: it never replaces a
      // file of the agent's (a repeated fetch of one handle lands under that handle's own name).
      readOnlyHint: false,
      destructiveHint: false,
      // Every call redeems the handle at the peer again.
      idempotentHint: false,
      openWorldHint: true,
    },
  },
});
