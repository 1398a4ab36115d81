// How both HTTP clients, `resource-plane get`/`ls` (cli/client.ts) and fetch-peer-file (tools/),
// read a response body, so that the two cannot drift apart: a refusal body is read up to one cap.
// A leaf beside wire.ts: it imports nothing.

/**
 * The most of a refusal body either client reads; past it only the status counts. The planes'
 * refusal bodies are one catalogued code and one sentence, well under 1 KiB, so 16 KiB leaves
 * ample room while bounding what a hostile server can make fetch-peer-file hold in the capsule's
 * own server process (the CLI had 64 KiB, an allowance nothing of ours ever used).
 */
export const ERROR_BODY_MAX_BYTES = 16 * 1024;
