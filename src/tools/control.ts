// The control channel: an MCP server on stdin/stdout through which a capsule runtime drives a
// session. `tools/list` offers exactly the declared tools, from their zod contracts
// (src/tools/schemas.ts), with their input and output schemas, titles and annotations; `tools/call`
// runs one through callTool (src/tools/index.ts), the one place its arguments are validated.
// `notifications/task_completed` advances the generation, and closing stdin ends the session.
// stdout belongs to the protocol: logs go to stderr, and the bound URL reaches the launcher as the
// `notifications/resource_plane/listening` notification (and in the initialize instructions).
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { renderTool } from '../codes.js';
import type { Session } from '../session/session.js';
import { callTool, isToolName, toolJsonSchemas, toolSpecs, type ToolSpec } from './index.js';
import { asToolRefusal, shown } from './refusal.js';
import { packageIdentity } from '../version.js';

export const TASK_COMPLETED = 'notifications/task_completed';
export const LISTENING = 'notifications/resource_plane/listening';

/** An unknown tool's name is quoted back up to this length (it is the caller's own text). */
const NAME_SHOWN_MAX = 128;

const TaskCompletedSchema = z.object({ method: z.literal(TASK_COMPLETED), params: z.optional(z.record(z.string(), z.unknown())) });

/** A refusal as a tool result: `isError`, the body `{"error","message"}` with a catalogued code. */
function refusalResult(error: unknown): CallToolResult {
  const refusal = renderTool(asToolRefusal(error));
  return { isError: true, content: [{ type: 'text', text: JSON.stringify({ error: refusal.code, message: refusal.message }) }] };
}

/**
 * A declared tool as `tools/list` shows it, entry for entry what the SDK's registerTool listed:
 * draft-07 schemas with `$schema`, and no task support (a call runs to its result).
 */
function listEntry(spec: ToolSpec): Tool {
  const schemas = toolJsonSchemas(spec);
  return {
    name: spec.name,
    title: spec.title,
    description: spec.description,
    inputSchema: schemas.input,
    annotations: spec.annotations,
    execution: { taskSupport: 'forbidden' },
    outputSchema: schemas.output,
  } as Tool;
}

/**
 * A JSON-RPC error as the SDK sends it: its `code`, and its `message` verbatim. Not an McpError,
 * whose message already starts `MCP error -32602: `: sent as the wire message, the SDK's client
 * wraps it in another McpError and a runtime logs `MCP error -32602: MCP error -32602: …`.
 */
function protocolError(code: number, message: string): Error & { code: number } {
  return Object.assign(new Error(message), { code });
}

/**
 * Answers one `tools/call`:
 * - a name that is no tool of ours is JSON-RPC error -32602 (Invalid params), as the MCP tools
 *   spec lists unknown tools among protocol errors;
 * - anything else goes to callTool, which validates the arguments (a mismatch is refused
 *   `invalid_argument`, so a runtime keeps one refusal shape) and runs the tool. A tool that
 *   exists but that the manifest does not declare is not offered, yet a call to it is refused by
 *   the tool itself and traced (`no_peer_plane` / `peer_not_allowed`): an agent reaching for a
 *   grant it lacks is on the record;
 * - a result is the output schema's object, as JSON text and structured; a refusal is `isError`.
 */
async function toolCallResult(session: Session, specs: ToolSpec[], name: string, args: unknown): Promise<CallToolResult> {
  const spec = isToolName(name) ? specs.find((s) => s.name === name) : undefined;
  if (!spec) {
    const quoted = shown(name);
    throw protocolError(ErrorCode.InvalidParams, `Unknown tool: '${quoted.length > NAME_SHOWN_MAX ? `${quoted.slice(0, NAME_SHOWN_MAX)}…` : quoted}'`);
  }
  try {
    const result = spec.output.parse(await callTool(session, spec.name, args));
    return { content: [{ type: 'text', text: JSON.stringify(result) }], structuredContent: result };
  } catch (error) {
    return refusalResult(error);
  }
}

/** `launched`: what launch() returned; only its session is used here. */
export async function runControl(launched: { session: Session }, ready: Record<string, unknown>, onClose: () => void): Promise<void> {
  const { session } = launched;
  const { name, version } = packageIdentity();
  const mcp = new McpServer(
    { name, version },
    {
      instructions:
        `Resource plane of capsule '${session.manifest.name}', session ${session.sessionId}, listening at ` +
        `${String(ready.url)} (advertised as ${String(ready.advertised_url)}). Send ${TASK_COMPLETED} when a task completes.`,
    },
  );
  const specs = toolSpecs(session);

  // The tools are answered by handlers of our own on the SDK's Server (McpServer.server, its
  // route for custom request handlers), not through registerTool: that one answers an unknown tool
  // with an isError result where MCP calls for a protocol error, and validates every call's
  // arguments a second time. The list of tools is fixed for the session.
  const server = mcp.server;
  server.registerCapabilities({ tools: { listChanged: false } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: specs.filter((s) => s.declared).map(listEntry) }));
  server.setRequestHandler(CallToolRequestSchema, (request) => toolCallResult(session, specs, request.params.name, request.params.arguments));

  server.setNotificationHandler(TaskCompletedSchema, async () => {
    session.advanceGeneration();
  });
  server.oninitialized = () => {
    // A custom notification: the SDK's types only know the standard ones.
    void (server.notification as (n: { method: string; params: Record<string, unknown> }) => Promise<void>)({
      method: LISTENING,
      params: ready,
    });
  };
  const transport = new StdioServerTransport();
  // The SDK transport does not watch for end-of-input; closing stdin is how a runtime ends the session.
  process.stdin.once('end', onClose);
  process.stdin.once('close', onClose);
  transport.onclose = onClose;
  await mcp.connect(transport);
}
