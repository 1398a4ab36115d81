// Fetching a peer's agent card (SPEC section 7): share-file reads the audience off it, and
// fetch-peer-file checks on it that the peer is the handle's issuer before sending the token.
import type { Target } from '../manifest/destinations.js';
import { CARD_PATH } from '../wire.js';
import { getJson, type HttpLimits } from './peer-http.js';
import { CARD_CONNECT_TIMEOUT_MS, CARD_MAX_BYTES, CARD_TOTAL_TIMEOUT_MS } from '../limits.js';

export interface CardOptions {
  connectTimeoutMs?: number;
  totalTimeoutMs?: number;
  ca?: string | Buffer | Array<string | Buffer>;
}

/** The peer's card as JSON; throws PeerHttpError when it cannot be had. */
export async function fetchCard(target: Target, opts: CardOptions = {}): Promise<unknown> {
  const limits: HttpLimits = {
    connectTimeoutMs: opts.connectTimeoutMs ?? CARD_CONNECT_TIMEOUT_MS,
    totalTimeoutMs: opts.totalTimeoutMs ?? CARD_TOTAL_TIMEOUT_MS,
    maxBytes: CARD_MAX_BYTES,
  };
  return (await getJson(target, CARD_PATH, { ...limits, ...(opts.ca !== undefined ? { ca: opts.ca } : {}) })).json;
}
