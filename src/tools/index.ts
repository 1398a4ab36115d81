// The agent-loop tools as one typed API, shared by the MCP control channel and in-process callers:
// their definitions (offered only when declared), argument validation, and the refusal a runtime
// gets for a tool the manifest does not declare. The contracts are the zod schemas in schemas.ts,
// the one source of truth for both the definitions a host reads and the validation every call
// passes; the work itself is in share-file.ts and fetch-peer-file.ts beside this file.
import { z } from 'zod';
import { Refusal } from '../codes.js';
import type { Session, ToolName } from '../session/session.js';
import { fetchPeerFile } from './fetch-peer-file.js';
import { fetchPeerFileInput, fetchPeerFileOutput, shareFileInput, shareFileOutput, TOOL_PRESENTATION } from './schemas.js';
import { asToolRefusal, toolRefusal } from './refusal.js';
import { shareFile, type ShareFileInput, type ShareFileResult } from './share-file.js';
import type { FetchPeerFileInput, FetchPeerFileResult } from './fetch-peer-file.js';

export { fetchPeerFile, shareFile };

/**
 * What each tool takes and gives, keyed by its name: `callTool` picks its argument and result
 * types from here. A refusal is never a result: the call rejects with a `Refusal`.
 */
export interface ToolSignatures {
  'share-file': { input: ShareFileInput; result: ShareFileResult };
  'fetch-peer-file': { input: FetchPeerFileInput; result: FetchPeerFileResult };
}

/**
 * A tool's arguments: checked against its contract when the name is known where the call is
 * written; when it is only known at run time (the union of all names, as the MCP channel has it),
 * anything, since the arguments are then validated against the schema at run time anyway.
 */
export type ToolArguments<N extends ToolName> = [ToolName] extends [N] ? unknown : ToolSignatures[N]['input'];

/** A tool's result: that tool's result object (a union of them for a name known only at run time). */
export type ToolResult<N extends ToolName> = ToolSignatures[N]['result'];

/** Every tool this server has, declared or not. */
export const TOOL_NAMES: readonly ToolName[] = Object.freeze(['share-file', 'fetch-peer-file']);

export function isToolName(name: unknown): name is ToolName {
  return typeof name === 'string' && (TOOL_NAMES as readonly string[]).includes(name);
}

/**
 * One tool's contract: zod schemas for its input and output, and what a host is told about it.
 * `input` parses to exactly what the tool function takes, so a validated call needs no cast.
 */
export interface ToolSpec<N extends ToolName = ToolName> {
  name: N;
  title: string;
  description: string;
  input: z.ZodType<ToolSignatures[N]['input']>;
  output: z.ZodObject;
  annotations: (typeof TOOL_PRESENTATION)[ToolName]['annotations'];
  /** Whether the manifest declares it: only declared tools are offered. */
  declared: boolean;
}

/** A tool definition as JSON, the shape an MCP `tools/list` entry has. */
export interface ToolDefinition {
  name: ToolName;
  title: string;
  description: string;
  inputSchema: { type: 'object'; properties: Record<string, unknown>; required: string[]; additionalProperties: false };
  outputSchema: { type: 'object'; properties: Record<string, unknown>; required: string[] };
  annotations: ToolSpec['annotations'];
}

/** Any one tool's contract, told apart by its name. */
export type AnyToolSpec = { [N in ToolName]: ToolSpec<N> }[ToolName];

/** Every tool's contract for this session, in a fixed order; descriptions name the declared grants. */
export function toolSpecs(session: Session): AnyToolSpec[] {
  const peer = session.manifest.peerFiles;
  const declared = session.toolsDeclared();
  return [
    {
      name: 'share-file',
      ...TOOL_PRESENTATION['share-file'],
      description: peer
        ? `Hand one file to one named peer capsule. \`path\` is relative to exports.peer_files.root ('${peer.root}'). ` +
          'Returns an opaque handle that only that peer can redeem, until it expires: put the handle in your message to the peer. ' +
          `\`ttl\` may only narrow the handle's lifetime (at most ${peer.effectiveMaxTtlSecs}s).`
        : 'Hand one file to one named peer capsule (this capsule declares no exports.peer_files block).',
      input: shareFileInput(peer ? peer.root : null),
      output: shareFileOutput,
      declared: declared.includes('share-file'),
    },
    {
      name: 'fetch-peer-file',
      ...TOOL_PRESENTATION['fetch-peer-file'],
      description:
        `Fetch a file a peer capsule handed you (at most ${session.fetchMaxBytes} bytes). The bytes are stored as a file under peer-in/ in your workdir, ` +
        "and only once they match the peer's etag; the result is the stored path, its size and SHA-256, never the contents. " +
        'This server has no tool that reads files: open the stored path with the file tools your runtime gives you, if you decide to.',
      input: fetchPeerFileInput(),
      output: fetchPeerFileOutput,
      declared: declared.includes('fetch-peer-file'),
    },
  ];
}

/** A tool's input and output schemas as JSON Schema draft-07, as the MCP SDK renders them (`$schema` included). */
export function toolJsonSchemas(spec: Pick<ToolSpec, 'input' | 'output'>): { input: Record<string, unknown>; output: Record<string, unknown> } {
  return {
    input: z.toJSONSchema(spec.input, { target: 'draft-7', io: 'input' }),
    output: z.toJSONSchema(spec.output, { target: 'draft-7', io: 'output' }),
  };
}

/** The declared tools' definitions as JSON Schema (draft-07, as the MCP SDK renders them, without `$schema`). */
export function toolDefinitions(session: Session): ToolDefinition[] {
  return toolSpecs(session)
    .filter((spec) => spec.declared)
    .map((spec) => {
      const schemas = toolJsonSchemas(spec);
      const { $schema: _in, ...inputSchema } = schemas.input;
      const { $schema: _out, ...outputSchema } = schemas.output;
      return {
        name: spec.name,
        title: spec.title,
        description: spec.description,
        inputSchema: inputSchema as ToolDefinition['inputSchema'],
        outputSchema: outputSchema as ToolDefinition['outputSchema'],
        annotations: spec.annotations,
      };
    });
}

/** Shown of a call's unknown argument names before the rest are only counted. */
const NAMES_SHOWN = 5;

/** One clause per schema violation, quoting argument names (never values). */
function clause(issue: z.core.$ZodIssue): string {
  const key = issue.path.length > 0 ? issue.path.map(String).join('.') : null;
  if (issue.code === 'unrecognized_keys') {
    const shown = issue.keys
      .slice(0, NAMES_SHOWN)
      .map((k) => `'${k}'`)
      .join(', ');
    const more = issue.keys.length > NAMES_SHOWN ? ` and ${issue.keys.length - NAMES_SHOWN} more` : '';
    return `unknown argument${issue.keys.length > 1 ? 's' : ''} ${shown}${more}`;
  }
  if (key === null) return 'the arguments must be an object';
  if (issue.code === 'invalid_type' && issue.input === undefined) return `missing required argument '${key}'`;
  if (issue.code === 'invalid_type') return `argument '${key}' must be a ${issue.expected}`;
  if (issue.code === 'invalid_union') {
    // `ttl` is a string or an integer: name every kind the argument may be.
    // The only numeric branch is an integer, so `number` and `int` both read as one.
    const kinds = [
      ...new Set(
        issue.errors
          .flat()
          .flatMap((i) => (i.code === 'invalid_type' ? [i.expected === 'int' || i.expected === 'number' ? 'an integer' : `a ${i.expected}`] : [])),
      ),
    ];
    if (kinds.length > 0) return `argument '${key}' must be ${kinds.join(' or ')}`;
  }
  return `argument '${key}' is invalid: ${issue.message}`;
}

/**
 * The sentence an agent reads for arguments that do not match the schema: every violation, so one
 * retry can fix them all. It quotes argument names, which toolRefusal redacts (one can be a pasted token).
 */
function violation(error: z.ZodError): string {
  const clauses = error.issues.map(clause);
  return clauses.length > 0 ? clauses.join('; ') : 'the arguments do not match the tool input schema';
}

/**
 * Checks a call's arguments against the tool's input schema: the one validation a call gets, over
 * MCP or in-process. Throws `invalid_argument` when they do not match; absent arguments are an
 * empty object, as in MCP.
 */
function parseToolArguments<T>(spec: { input: z.ZodType<T> }, args: unknown): T {
  const parsed = spec.input.safeParse(args ?? {}, { reportInput: true });
  if (!parsed.success) throw toolRefusal(new Refusal('invalid_argument', violation(parsed.error)));
  return parsed.data;
}

/**
 * Runs one tool by name. The name picks the types: `callTool(session, 'share-file', { path, peer })`
 * resolves to a `ShareFileResult`, and a name that is no tool, or arguments that do not fit it, are
 * type errors. Refusals are not results: the promise rejects with a Refusal whose detail is the
 * sentence for the agent (arguments that fail the schema at run time are `invalid_argument`; an
 * unknown tool name is `unknown_tool`, and over MCP it never gets here: it is a JSON-RPC error).
 * Every refusal is worded (and redacted) once, by toolRefusal (src/tools/refusal.ts), where it is made.
 */
export async function callTool<N extends ToolName>(session: Session, name: N, args: ToolArguments<N>): Promise<ToolResult<N>> {
  try {
    return (await runTool(session, name, args)) as ToolResult<N>;
  } catch (error) {
    throw asToolRefusal(error);
  }
}

async function runTool(session: Session, name: string, args: unknown): Promise<ShareFileResult | FetchPeerFileResult> {
  const spec = isToolName(name) ? toolSpecs(session).find((s) => s.name === name) : undefined;
  if (!spec) throw toolRefusal(new Refusal('unknown_tool', `no tool named '${name}' exists here`));
  // Validated before anything else, declared or not: a malformed call costs no file, socket or
  // trace line. An undeclared tool's well-formed call is refused by the tool itself, traced.
  if (spec.name === 'share-file') return { ...(await shareFile(session, parseToolArguments(spec, args))) };
  return { ...(await fetchPeerFile(session, parseToolArguments(spec, args))) };
}
