// The control channel: an MCP server on stdin/stdout through which a capsule runtime drives a
// session. The tools are registered through the SDK's high-level McpServer from their zod
// contracts (src/tools/schemas.ts): `tools/list` offers exactly the declared tools with their
// input and output schemas, titles and annotations; `tools/call` runs them, the SDK checking the
// arguments and the structured result against those schemas. `notifications/task_completed`
// advances the generation, and closing stdin ends the session. stdout belongs to the protocol: logs
// go to stderr, and the bound URL reaches the launcher as the `notifications/resource_plane/listening`
// notification (and in the initialize instructions).
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { CallToolRequestSchema, ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { renderTool } from '../codes.js';
import type { Session } from '../session/session.js';
import { callTool, parseToolArguments, toolSpecs, type ToolSpec } from './index.js';
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

/** Runs a tool through the typed API; a result is the output schema's object, as JSON text and structured. */
async function runTool(session: Session, spec: ToolSpec, args: unknown): Promise<CallToolResult> {
  try {
    const result = spec.output.parse(await callTool(session, spec.name, args));
    return { content: [{ type: 'text', text: JSON.stringify(result) }], structuredContent: result };
  } catch (error) {
    return refusalResult(error);
  }
}

type CallHandler = (request: z.infer<typeof CallToolRequestSchema>, extra: unknown) => Promise<unknown>;

/**
 * What `tools/call` does before the SDK's own handler, which would fold every failure, an unknown
 * tool included, into an `isError` result:
 * - a name that is no tool of ours is JSON-RPC error -32602 (Invalid params), as the MCP tools
 *   spec lists unknown tools among protocol errors;
 * - arguments that do not match the tool's input schema are refused `invalid_argument` (checked with
 *   the same zod schema the SDK then checks again), so a runtime keeps one refusal shape;
 * - a tool that exists but that the manifest does not declare is not offered, yet a call to it is
 *   refused by the tool itself and traced (`no_peer_plane` / `peer_not_allowed`): an agent reaching
 *   for a grant it lacks is on the record;
 * - a declared tool with good arguments goes to the SDK's handler.
 */
function guardToolCalls(session: Session, specs: ToolSpec[], sdkHandler: CallHandler): CallHandler {
  return async (request, extra) => {
    const name = request.params.name;
    const spec = specs.find((s) => s.name === name);
    if (!spec) {
      const quoted = shown(name);
      throw new McpError(ErrorCode.InvalidParams, `Unknown tool: '${quoted.length > NAME_SHOWN_MAX ? `${quoted.slice(0, NAME_SHOWN_MAX)}…` : quoted}'`);
    }
    if (!spec.declared) return runTool(session, spec, request.params.arguments);
    try {
      parseToolArguments(spec, request.params.arguments);
    } catch (error) {
      return refusalResult(error);
    }
    return sdkHandler(request, extra);
  };
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

  // The SDK installs its tools/call handler on the first registerTool; it is wrapped as it is
  // installed (the SDK offers no other way to reach it). If a future SDK installed it some other
  // way, the check below stops the launch rather than serve without the guard.
  const server = mcp.server;
  const install = server.setRequestHandler.bind(server);
  let guarded = false;
  server.setRequestHandler = ((schema: typeof CallToolRequestSchema, handler: CallHandler) => {
    if (schema === CallToolRequestSchema) {
      guarded = true;
      return install(schema, guardToolCalls(session, specs, handler) as Parameters<typeof install>[1]);
    }
    return install(schema, handler as Parameters<typeof install>[1]);
  }) as typeof server.setRequestHandler;
  try {
    // Every tool is registered (so the handlers exist even when none is declared); only the
    // declared ones are enabled, and only enabled tools are listed.
    for (const spec of specs) {
      const tool = mcp.registerTool(
        spec.name,
        { title: spec.title, description: spec.description, inputSchema: spec.input, outputSchema: spec.output, annotations: spec.annotations },
        (args: unknown) => runTool(session, spec, args),
      );
      if (!spec.declared) tool.disable();
    }
  } finally {
    server.setRequestHandler = install;
  }
  if (!guarded) throw new Error('the MCP SDK did not install its tools/call handler where it could be guarded');
  // The list of tools is fixed for the session.
  server.registerCapabilities({ tools: { listChanged: false } });

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
