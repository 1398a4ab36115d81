// The control channel: an MCP server on stdin/stdout through which a capsule runtime drives a
// session. `tools/list` offers exactly the declared tools, `tools/call` runs them (src/tools.ts),
// `notifications/task_completed` advances the generation, and closing stdin ends the session.
// stdout belongs to the protocol: logs go to stderr, and the bound URL reaches the launcher as the
// `notifications/resource_plane/listening` notification (and in the initialize instructions).
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { Refusal, renderTool } from './codes.js';
import type { Launched } from './launch/launch.js';
import { callTool, toolDefinitions } from './tools/index.js';

export const TASK_COMPLETED = 'notifications/task_completed';
export const LISTENING = 'notifications/resource_plane/listening';

const TaskCompletedSchema = z.object({ method: z.literal(TASK_COMPLETED), params: z.optional(z.record(z.string(), z.unknown())) });

export async function runControl(launched: Launched, ready: Record<string, unknown>, onClose: () => void): Promise<void> {
  const { session } = launched;
  const server = new Server(
    { name: 'capsule-resource-plane', version: '0.1.0' },
    {
      capabilities: { tools: {} },
      instructions:
        `Resource plane of capsule '${session.manifest.name}', session ${session.sessionId}, listening at ` +
        `${String(ready.url)} (advertised as ${String(ready.advertised_url)}). Send ${TASK_COMPLETED} when a task completes.`,
    },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: toolDefinitions(session) }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    try {
      const result = await callTool(session, request.params.name, request.params.arguments ?? {});
      return { content: [{ type: 'text', text: JSON.stringify(result) }], structuredContent: result };
    } catch (error) {
      const refusal = renderTool(error instanceof Refusal ? error : new Refusal('io_error', 'the tool failed unexpectedly'));
      return { isError: true, content: [{ type: 'text', text: JSON.stringify({ error: refusal.code, message: refusal.message }) }] };
    }
  });
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
  await server.connect(transport);
}
