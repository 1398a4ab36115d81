// What a session is called and where its record goes: the session id's one validation, the
// records directory and the default trace path. A leaf, so that the first stage of a launch can
// settle them without loading the session (and its key's libsodium).
import { createHash, randomBytes } from 'node:crypto';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { UsageError } from '../codes.js';

/** What a session id may be: it names a records directory and appears in every trace line. */
const SESSION_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

export function newSessionId(): string {
  return `ses_${randomBytes(16).toString('hex')}`;
}

/** The one validation of a session id; absent → a fresh one. */
export function parseSessionId(value: string | undefined): string {
  if (value === undefined) return newSessionId();
  if (!SESSION_ID.test(value)) throw new UsageError(`--session-id must be 1-128 characters of [A-Za-z0-9_.:-] (got '${value}')`);
  return value;
}

/** Where traces go by default: `RESOURCE_PLANE_RECORDS_DIR`, else `~/.murmur/records`. */
export function recordsDirectory(): string {
  return process.env.RESOURCE_PLANE_RECORDS_DIR || join(homedir(), '.murmur', 'records');
}

/** `~/.murmur/records/<workdir digest>/<session-id>/trace.jsonl`: per workdir, per session. */
export function defaultTracePath(workdirReal: string, sessionId: string): string {
  const digest = createHash('sha256').update(workdirReal).digest('hex').slice(0, 16);
  return join(recordsDirectory(), digest, sessionId, 'trace.jsonl');
}
