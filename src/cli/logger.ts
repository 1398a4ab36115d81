// The CLI's logger: JSON lines on stderr, errors reduced to what cannot carry a token.
import { pino, type Logger } from 'pino';
import { redactHandles } from '../redact.js';

export function stderrLogger(): Logger {
  return pino(
    {
      level: process.env.RESOURCE_PLANE_LOG_LEVEL ?? 'info',
      base: { pid: process.pid },
      // An error is logged by type, code and redacted message only: Node errors can carry raw
      // request bytes (rawPacket), URLs and paths, any of which may hold a handle token.
      serializers: {
        err: (e: unknown) => {
          const err = e as { name?: unknown; code?: unknown; message?: unknown } | null;
          return { type: String(err?.name ?? typeof e), code: err?.code ?? null, message: redactHandles(String(err?.message ?? e)) };
        },
      },
    },
    pino.destination(2),
  );
}

