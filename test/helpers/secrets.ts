// The one check that nothing of a secret left: neither its marker (every secret file's bytes hold
// it) nor its digest, whether as the digest of what was served or written anywhere in the text.
import { sha256Hex } from './http.js';

export interface Secrets {
  /** Text every secret file holds. */
  mark: string;
  /** The secret files' whole contents, for their digests. */
  contents: ReadonlyArray<Buffer | string>;
}

/**
 * Throws, naming `label`, if `data` (served bytes, a raw response, or any value, read as JSON with
 * its buffers as latin1) carries a secret's marker or digest, or is a secret file's bytes.
 */
export function assertNoSecret(data: unknown, label: string, secrets: Secrets): void {
  const text = Buffer.isBuffer(data)
    ? data.toString('latin1')
    : typeof data === 'string'
      ? data
      : JSON.stringify(data, (_k, v: unknown) => (Buffer.isBuffer(v) ? v.toString('latin1') : v));
  if (text.includes(secrets.mark)) throw new Error(`${label}: carries bytes of a file outside the root`);
  const digests = secrets.contents.map((c) => sha256Hex(c));
  if (Buffer.isBuffer(data) && digests.includes(sha256Hex(data))) throw new Error(`${label}: served a secret file's bytes`);
  for (const d of digests) if (text.includes(d)) throw new Error(`${label}: carries a secret's digest`);
}
