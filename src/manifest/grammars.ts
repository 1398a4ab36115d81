// The manifest's scalar grammars (SPEC section 2): byte counts and durations. Pure; shared by the
// manifest's field rules and the share-file tool's `ttl`, so each grammar exists in one place.

export type Parsed = { ok: true; value: number } | { ok: false; why: 'syntax' | 'zero' | 'overflow' };

export const BYTE_COUNT = /^([0-9]+)(Ki|Mi|Gi)?$/;
export const BYTE_MULTIPLIER: Record<string, bigint> = { Ki: 1024n, Mi: 1024n ** 2n, Gi: 1024n ** 3n };
export const DURATION = /^([0-9]+)([smhd])?$/;
export const DURATION_MULTIPLIER: Record<string, bigint> = { s: 1n, m: 60n, h: 3600n, d: 86400n };

// BigInt arithmetic so that overflow is detected rather than silently rounded: a Number would turn
// `99999999999999999999` into a plausible-looking ceiling.
export function parseScaled(s: string, grammar: RegExp, multipliers: Record<string, bigint>): Parsed {
  const match = grammar.exec(s.trim());
  if (!match) return { ok: false, why: 'syntax' };
  const digits = match[1] as string;
  const unit = match[2];
  const value = BigInt(digits) * (unit === undefined ? 1n : (multipliers[unit] as bigint));
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) return { ok: false, why: 'overflow' };
  if (value === 0n) return { ok: false, why: 'zero' };
  return { ok: true, value: Number(value) };
}

/**
 * A byte count: trimmed ASCII digits with an optional case-sensitive `Ki`/`Mi`/`Gi` suffix.
 * Returns null when refused. Zero is refused too: every byte count in this project is a ceiling
 * that must admit at least one byte, so no caller can be handed a zero by accident.
 */
export function parseByteCount(s: string): number | null {
  const parsed = parseScaled(s, BYTE_COUNT, BYTE_MULTIPLIER);
  return parsed.ok ? parsed.value : null;
}

/**
 * The byte counts a person types on the command line (`--memory-budget`, `--fetch-max-bytes`,
 * `--max-bytes`): the manifest's IEC forms and the usual SI ones, so `10GB` and `1k` mean what they
 * say rather than fail. IEC (powers of 1024): `Ki`, `Mi`, `Gi`, `Ti`, each optionally followed by `B`
 * (`64MiB`). SI (powers of 1000): `k` or `K`, `M`, `G`, `T`, each optionally followed by `B`
 * (`10GB`, `1k`). A bare number, or one followed by `B`, is bytes. No space; nothing else. The
 * manifest keeps its own narrower grammar (SPEC section 2): it is the runtime's file too.
 */
export const FLAG_BYTE_COUNT = /^([0-9]+)(?:(Ki|Mi|Gi|Ti|k|K|M|G|T)B?|B)?$/;
export const FLAG_BYTE_MULTIPLIER: Record<string, bigint> = {
  Ki: 1024n,
  Mi: 1024n ** 2n,
  Gi: 1024n ** 3n,
  Ti: 1024n ** 4n,
  k: 1000n,
  K: 1000n,
  M: 1000n ** 2n,
  G: 1000n ** 3n,
  T: 1000n ** 4n,
};
/** What a refusal lists, so a mistake is fixed from the message alone. */
export const FLAG_BYTE_FORMS =
  'a whole number of bytes, optionally suffixed Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T (powers of 1000), each with an optional B: 65536, 64Mi, 64MiB, 10GB, 1k';

export function parseFlagByteCount(s: string): number | null {
  const parsed = parseScaled(s, FLAG_BYTE_COUNT, FLAG_BYTE_MULTIPLIER);
  return parsed.ok ? parsed.value : null;
}

/**
 * A duration in seconds: trimmed digits with an optional lowercase `s`/`m`/`h`/`d` suffix; a bare
 * integer is seconds. Returns null when refused, zero included (a zero lifetime is never useful and
 * a zero TTL would mint handles that are born expired).
 */
export function parseDuration(s: string): number | null {
  const parsed = parseScaled(s, DURATION, DURATION_MULTIPLIER);
  return parsed.ok ? parsed.value : null;
}
