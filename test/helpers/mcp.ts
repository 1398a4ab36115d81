// The one MCP stdio harness: the SDK's own client spawning `resource-plane serve --control stdio`
// as a runtime or an MCP host would, waiting for the server's listening notification, closed when
// the test ends (test/helpers/cleanup.ts).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { z } from 'zod';
import { defer } from './cleanup.js';
import { CLI } from './cli.js';

export const LISTENING = 'notifications/resource_plane/listening';
const ListeningSchema = z.object({
  method: z.literal(LISTENING),
  params: z.object({ url: z.string(), advertised_url: z.string(), session_id: z.string(), trace: z.string() }).passthrough(),
});
export type Listening = z.infer<typeof ListeningSchema>['params'];

export interface McpServe {
  client: Client;
  transport: StdioClientTransport;
  /** The server's listening notification: its URL, advertised URL, session id and trace. */
  ready: Listening;
  /** What the server wrote on stderr so far (its logs). */
  stderr: () => string;
  pid: number;
}

/** Spawns `serve --control stdio` with `args` (after it), connects the SDK client, waits until it serves. */
export async function startMcpServe(args: string[], opts: { env?: NodeJS.ProcessEnv; clientName?: string } = {}): Promise<McpServe> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'serve', '--control', 'stdio', ...args],
    env: { ...process.env, ...opts.env } as Record<string, string>,
    stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const client = new Client({ name: opts.clientName ?? 'test-runtime', version: '1.0.0' });
  const listening = new Promise<Listening>((resolve) => client.setNotificationHandler(ListeningSchema, (n) => resolve(n.params)));
  await client.connect(transport);
  defer(() => client.close());
  const ready = await listening;
  return { client, transport, ready, stderr: () => err, pid: transport.pid! };
}
