// The log of a launch's first stage, before pino is loaded (the first stage never loads it: it
// only binds, confines and re-executes). Lines have the shape pino writes for the CLI's logger
// (src/cli/logger.ts), so a reader of stderr sees one stream.
import { redactHandles } from '../redact.js';

/** pino's levels, by name; `silent` logs nothing. */
export const LOG_LEVEL_VALUES: Readonly<Record<string, number>> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 };
export const LOG_LEVELS: readonly string[] = [...Object.keys(LOG_LEVEL_VALUES), 'silent'];

export type EarlyLog = (level: 'debug' | 'info' | 'warn', fields: Record<string, unknown>, msg: string) => void;

/** A logger at RESOURCE_PLANE_LOG_LEVEL (default info) writing one JSON line per call to stderr. */
export function earlyLogger(env: NodeJS.ProcessEnv = process.env): EarlyLog {
  const name = env.RESOURCE_PLANE_LOG_LEVEL ?? 'info';
  const threshold = name === 'silent' ? Infinity : (LOG_LEVEL_VALUES[name] ?? LOG_LEVEL_VALUES.info!);
  return (level, fields, msg) => {
    const value = LOG_LEVEL_VALUES[level]!;
    if (value < threshold) return;
    process.stderr.write(`${JSON.stringify({ level: value, time: Date.now(), pid: process.pid, ...fields, msg: redactHandles(msg) })}\n`);
  };
}
