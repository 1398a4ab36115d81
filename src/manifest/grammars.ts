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
 * A duration in seconds: trimmed digits with an optional lowercase `s`/`m`/`h`/`d` suffix; a bare
 * integer is seconds. Returns null when refused, zero included (a zero lifetime is never useful and
 * a zero TTL would mint handles that are born expired).
 */
export function parseDuration(s: string): number | null {
  const parsed = parseScaled(s, DURATION, DURATION_MULTIPLIER);
  return parsed.ok ? parsed.value : null;
}
