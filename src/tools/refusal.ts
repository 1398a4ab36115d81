// What a tool says back, decided in one place: a refusal's final words (a catalogued code and the
// sentence the agent reads) and caller text quoted in any answer, with every token-shaped run
// replaced by its handle id. Messages quote caller text (a peer, a path, an argument or tool name),
// and a token pasted into any of them must not come back out. Every refusal the tools, the typed
// API and the MCP channel give is worded here, exactly once; nothing else in src/tools redacts.
import { asRefusal, Refusal, renderTool } from '../codes.js';
import { redactHandles } from '../redact.js';

/** Caller text as an answer may quote it: tokens replaced by their handle ids. */
export function shown(text: string): string {
  return redactHandles(text);
}

/** `raw` as the caller gets it: the catalogue's sentence when it has no detail of its own, redacted. */
export function toolRefusal(raw: Refusal): Refusal {
  return new Refusal(raw.code, shown(renderTool(raw).message));
}

/** Anything a tool throws, as the Refusal a caller gets: what is not one is the tools' one io_error. */
export function asToolRefusal(error: unknown): Refusal {
  return asRefusal(error, 'the tool failed unexpectedly');
}
