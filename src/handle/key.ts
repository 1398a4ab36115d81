/**
 * The instance key and the HMAC-SHA256 that every peer handle is sealed with.
 *
 * This file owns the only copy of the secret that makes a peer handle unforgeable: 32 random bytes
 * generated per session, held in libsodium secure memory (`sodium_malloc`: mlocked, guard pages,
 * canary), no-access except during a MAC computation, and zeroed and freed at shutdown.
 * sodium-native has no HMAC-SHA256 (`crypto_auth` is HMAC-SHA-512-256), so RFC 2104 HMAC is built
 * here from its SHA-256 streaming primitives. The SHA-256 states after the ipad and opad blocks are
 * derived once, at generation, into the key's own secure buffer (they are as secret as the key), and
 * each MAC runs in that buffer, unlocked once and wiped of its per-MAC state before it is locked
 * again. It also owns the constant-time comparison MACs are checked with, and the random-byte
 * source the handle nonces come from, so that every use of sodium-native on the peer plane sits in
 * one place.
 *
 * Why this file is long: the secret's whole life (generation, locked memory, the HMAC's derived
 * states, batching, wiping) stays in the one file that can touch it.
 */
import { createRequire } from 'node:module';
import { inspect } from 'node:util';
import { MAC_BATCH_MAX } from '../limits.js';

/** The slice of sodium-native this file uses. The package ships no type declarations. */
interface SodiumNative {
  sodium_malloc(size: number): Buffer;
  sodium_free(buf: Buffer): void;
  sodium_memzero(buf: Uint8Array): void;
  sodium_memcmp(a: Uint8Array, b: Uint8Array): boolean;
  sodium_mprotect_noaccess(buf: Buffer): void;
  sodium_mprotect_readonly(buf: Buffer): void;
  sodium_mprotect_readwrite(buf: Buffer): void;
  randombytes_buf(buf: Uint8Array): void;
  crypto_hash_sha256_init(state: Uint8Array): void;
  crypto_hash_sha256_update(state: Uint8Array, input: Uint8Array): void;
  crypto_hash_sha256_final(state: Uint8Array, out: Uint8Array): void;
  readonly crypto_hash_sha256_STATEBYTES: number;
  readonly crypto_hash_sha256_BYTES: number;
}

// sodium-native is CommonJS without types; requiring it gives one shared module object, which
// is also what lets a test observe the calls made on it.
const sodium = createRequire(import.meta.url)('sodium-native') as SodiumNative;

/** Length of the instance key, in bytes. */
export const INSTANCE_KEY_BYTES = 32;

interface PendingMac {
  parts: Buffer[];
  resolve: (mac: Buffer) => void;
  reject: (error: unknown) => void;
}

/** SHA-256 block size: the width RFC 2104 pads (or hashes) the key to. */
const BLOCK_BYTES = 64;
const DIGEST_BYTES = sodium.crypto_hash_sha256_BYTES;
const STATE_BYTES = sodium.crypto_hash_sha256_STATEBYTES;
/** crypto_hash_sha256_state is { uint32_t state[8]; uint64_t count; uint8_t buf[64] } (sodium.h). */
const STATE_BUFFER_OFFSET = 40;
const IPAD = 0x36;
const OPAD = 0x5c;

/** Rounds up to a multiple of 16 so every view into a secure buffer stays naturally aligned. */
function align16(n: number): number {
  return (n + 15) & ~15;
}

// Layout of every secure buffer a MAC is computed in (the instance key's, and the scratch arena a
// caller-supplied key uses). K0 holds the key as RFC 2104 pads it, PAD one padded block while the
// states are derived, ISTATE and OSTATE the SHA-256 states after the ipad and opad blocks (each is
// as secret as the key: it computes MACs), WORK and INNER one MAC's running state and inner
// digest. Hash states hold 64-bit words, so they sit at aligned offsets; sodium_malloc places a
// buffer flush against its guard page, which keeps the start aligned only when the total size is
// a multiple of the alignment too.
const K0_OFFSET = 0;
const PAD_OFFSET = K0_OFFSET + BLOCK_BYTES;
const ISTATE_OFFSET = PAD_OFFSET + BLOCK_BYTES;
const OSTATE_OFFSET = ISTATE_OFFSET + align16(STATE_BYTES);
const WORK_OFFSET = OSTATE_OFFSET + align16(STATE_BYTES);
const INNER_OFFSET = WORK_OFFSET + align16(STATE_BYTES);
const SECURE_BYTES = align16(INNER_OFFSET + DIGEST_BYTES);
if (STATE_BYTES !== STATE_BUFFER_OFFSET + BLOCK_BYTES) throw new Error(`unexpected crypto_hash_sha256_state size ${STATE_BYTES}`);

/** Size of the instance key's secure buffer: the key, then the states derived from it. */
export const KEY_BUFFER_BYTES = SECURE_BYTES;

interface Views {
  k0: Buffer;
  pad: Buffer;
  istate: Buffer;
  ostate: Buffer;
  work: Buffer;
  inner: Buffer;
  /** WORK and INNER together: what one MAC leaves behind, wiped after each. */
  perMac: Buffer;
}

function views(buf: Buffer): Views {
  return {
    k0: buf.subarray(K0_OFFSET, K0_OFFSET + BLOCK_BYTES),
    pad: buf.subarray(PAD_OFFSET, PAD_OFFSET + BLOCK_BYTES),
    istate: buf.subarray(ISTATE_OFFSET, ISTATE_OFFSET + STATE_BYTES),
    ostate: buf.subarray(OSTATE_OFFSET, OSTATE_OFFSET + STATE_BYTES),
    work: buf.subarray(WORK_OFFSET, WORK_OFFSET + STATE_BYTES),
    inner: buf.subarray(INNER_OFFSET, INNER_OFFSET + DIGEST_BYTES),
    perMac: buf.subarray(WORK_OFFSET, INNER_OFFSET + DIGEST_BYTES),
  };
}

/**
 * From the key in K0, the states after the ipad and the opad block (RFC 2104), so a MAC hashes
 * neither block again and needs its buffer unlocked once. PAD is wiped after; K0 is left as is.
 */
function deriveStates(v: Views): void {
  for (let i = 0; i < BLOCK_BYTES; i++) v.pad[i] = (v.k0[i] as number) ^ IPAD;
  sodium.crypto_hash_sha256_init(v.istate);
  sodium.crypto_hash_sha256_update(v.istate, v.pad);
  for (let i = 0; i < BLOCK_BYTES; i++) v.pad[i] = (v.k0[i] as number) ^ OPAD;
  sodium.crypto_hash_sha256_init(v.ostate);
  sodium.crypto_hash_sha256_update(v.ostate, v.pad);
  sodium.sodium_memzero(v.pad);
  // libsodium's update copies a block into the state's buffer before compressing it, so each
  // state would keep its padded key; after a whole block the buffer is unused and is wiped.
  sodium.sodium_memzero(v.istate.subarray(STATE_BUFFER_OFFSET));
  sodium.sodium_memzero(v.ostate.subarray(STATE_BUFFER_OFFSET));
}

/**
 * HMAC-SHA256 over the concatenation of `parts`, from the derived states, in a buffer the caller
 * has made writable. The states are copied within that one secure buffer (a same-type copy,
 * memmove: no transient copy in ordinary memory); WORK and INNER are wiped before return. Only
 * the finished MAC, which is public, is in ordinary memory.
 */
function macFromStates(v: Views, parts: readonly Uint8Array[]): Buffer {
  try {
    v.work.set(v.istate);
    for (const part of parts) sodium.crypto_hash_sha256_update(v.work, part);
    sodium.crypto_hash_sha256_final(v.work, v.inner);
    const mac = Buffer.alloc(DIGEST_BYTES);
    v.work.set(v.ostate);
    sodium.crypto_hash_sha256_update(v.work, v.inner);
    sodium.crypto_hash_sha256_final(v.work, mac);
    return mac;
  } finally {
    sodium.sodium_memzero(v.perMac);
  }
}

/**
 * One secure scratch arena per process, for MACs under a caller-supplied key, zeroed after each
 * and no-access in between. Not one allocation per MAC: sodium-native's `sodium_free` only
 * detaches the buffer, and libsodium releases the pages when the garbage collector finalises it.
 * Each allocation is four mappings (two guard pages) and an mlock, so a busy path would exhaust
 * the mapping limit (vm.max_map_count, ~16k MACs between collections) and abort the process, and
 * long before that exceed RLIMIT_MEMLOCK, which libsodium ignores, leaving later pages unlocked.
 * Reuse is safe because a MAC is synchronous start to finish: nothing can interleave with it.
 */
let arena: Buffer | null = null;

function secureZeroed(): Buffer {
  const fresh = sodium.sodium_malloc(SECURE_BYTES);
  // sodium_malloc fills new memory with a garbage pattern; what is not yet written is zero.
  sodium.sodium_memzero(fresh);
  return fresh;
}

function scratchArena(): Buffer {
  if (arena === null) {
    const fresh = secureZeroed();
    sodium.sodium_mprotect_noaccess(fresh);
    arena = fresh;
  }
  return arena;
}

/**
 * Writes `key` into `k0` per RFC 2104: as is when it fits a block, else its SHA-256 digest,
 * hashed with the arena's own WORK state so no key-derived state leaves secure memory.
 */
function loadArbitraryKey(key: Uint8Array, v: Views): void {
  if (key.length <= BLOCK_BYTES) {
    v.k0.set(key);
    return;
  }
  sodium.crypto_hash_sha256_init(v.work);
  sodium.crypto_hash_sha256_update(v.work, key);
  sodium.crypto_hash_sha256_final(v.work, v.k0.subarray(0, DIGEST_BYTES));
  sodium.sodium_memzero(v.work);
}

/**
 * Tests only: HMAC-SHA256 with a caller-supplied key, through the same derivation and MAC the
 * instance key uses, so the construction can be checked against the RFC 4231 vectors.
 */
export function hmacSha256WithKeyForTests(key: Buffer, message: Buffer): Buffer {
  const scratch = scratchArena();
  sodium.sodium_mprotect_readwrite(scratch);
  try {
    const v = views(scratch);
    loadArbitraryKey(key, v);
    deriveStates(v);
    return macFromStates(v, [message]);
  } finally {
    sodium.sodium_memzero(scratch);
    sodium.sodium_mprotect_noaccess(scratch);
  }
}

/**
 * Whether two buffers hold the same bytes. Lengths are public (a MAC is always 32 bytes), so
 * they are compared first; the contents are compared in time independent of where they differ.
 */
export function constantTimeEqual(a: Buffer, b: Buffer): boolean {
  if (a.length !== b.length) return false;
  return sodium.sodium_memcmp(a, b);
}

/** `n` bytes from libsodium's CSPRNG, in ordinary memory: for values that are not secret. */
export function randomBytes(n: number): Buffer {
  const out = Buffer.alloc(n);
  sodium.randombytes_buf(out);
  return out;
}

/**
 * One session's handle-minting key.
 *
 * The secure buffer is held in a private field so that nothing generic — `util.inspect`, a test
 * runner printing a failed assertion, a structured clone — can reach it: touching the bytes
 * while they are no-access kills the process, by design.
 */
export class InstanceKey {
  #key: Buffer | null;
  /** Views into #key, made once: a MAC on the redeem path allocates none. */
  readonly #views: Views;
  /** MACs asked for with hmacSha256Soon this turn of the event loop, computed together. */
  #pending: PendingMac[] = [];
  #scheduled = false;

  private constructor(key: Buffer, v: Views) {
    this.#key = key;
    this.#views = v;
  }

  /**
   * A fresh key: 32 bytes from libsodium's CSPRNG, written straight into secure memory, with the
   * HMAC states derived from it beside it in the same buffer.
   */
  static generate(): InstanceKey {
    const key = secureZeroed();
    const v = views(key);
    try {
      sodium.randombytes_buf(v.k0.subarray(0, INSTANCE_KEY_BYTES));
      deriveStates(v);
      sodium.sodium_mprotect_noaccess(key);
    } catch (error) {
      sodium.sodium_memzero(key);
      sodium.sodium_free(key);
      throw error;
    }
    return new InstanceKey(key, v);
  }

  get destroyed(): boolean {
    return this.#key === null;
  }

  /**
   * HMAC-SHA256 under this key over the concatenation of `parts`. The buffer is readable for this
   * one computation (one unlock, one lock: the states are derived once, at generation) and
   * no-access again before return, whatever happens.
   */
  hmacSha256(parts: Buffer[]): Buffer {
    const key = this.#key;
    if (key === null) throw new Error('the instance key has been destroyed');
    sodium.sodium_mprotect_readwrite(key);
    try {
      return macFromStates(this.#views, parts);
    } finally {
      sodium.sodium_mprotect_noaccess(key);
    }
  }

  /**
   * HMAC-SHA256 as `hmacSha256` computes it, computed together with every other MAC asked for in
   * the same turn of the event loop (redeems that arrive together): one unlock and one lock for
   * up to MAC_BATCH_MAX of them, instead of two `mprotect`s each, which on a loaded host cost more
   * than the MAC (each flushes the other cores' TLBs). Nothing else runs while the key is readable:
   * the promises settle after it is locked again. A lone MAC pays one turn of the loop.
   */
  hmacSha256Soon(parts: Buffer[]): Promise<Buffer> {
    if (this.#key === null) return Promise.reject(new Error('the instance key has been destroyed'));
    return new Promise<Buffer>((resolve, reject) => {
      this.#pending.push({ parts, resolve, reject });
      if (this.#pending.length >= MAC_BATCH_MAX) this.#computePending();
      else if (!this.#scheduled) {
        this.#scheduled = true;
        // setImmediate, not a microtask: it runs after the loop's poll phase, so every request
        // parsed in that phase has asked for its MAC by then.
        setImmediate(() => {
          this.#scheduled = false;
          this.#computePending();
        });
      }
    });
  }

  #computePending(): void {
    while (this.#pending.length > 0) this.#computeBatch(this.#pending.splice(0, MAC_BATCH_MAX));
  }

  #computeBatch(batch: PendingMac[]): void {
    const key = this.#key;
    const outcomes: Array<{ mac: Buffer } | { error: unknown }> = [];
    if (key === null) {
      for (const _ of batch) outcomes.push({ error: new Error('the instance key has been destroyed') });
    } else {
      sodium.sodium_mprotect_readwrite(key);
      try {
        for (const p of batch) {
          try {
            outcomes.push({ mac: macFromStates(this.#views, p.parts) });
          } catch (error) {
            outcomes.push({ error });
          }
        }
      } finally {
        sodium.sodium_mprotect_noaccess(key);
      }
    }
    batch.forEach((p, i) => {
      const outcome = outcomes[i]!;
      if ('mac' in outcome) p.resolve(outcome.mac);
      else p.reject(outcome.error);
    });
  }

  /**
   * Zeroes and frees the key. Every handle it sealed stops verifying. Safe to call twice.
   * The wipe is explicit because sodium-native's `sodium_free` only detaches the buffer: libsodium
   * unmaps the pages when the collector finalises it, which may be never before exit.
   */
  destroy(): void {
    const key = this.#key;
    if (key === null) return;
    this.#key = null;
    sodium.sodium_mprotect_readwrite(key);
    sodium.sodium_memzero(key);
    sodium.sodium_free(key);
  }

  /**
   * The secure buffer itself (the key in its first INSTANCE_KEY_BYTES, the derived states after),
   * for the tests that prove it is no-access between uses and never copied out.
   * Reading it outside a MAC computation kills the process with SIGSEGV.
   */
  _unsafeBufferForTest(): Buffer {
    if (this.#key === null) throw new Error('the instance key has been destroyed');
    return this.#key;
  }

  /** Never the bytes, whatever prints this. */
  [inspect.custom](): string {
    return `InstanceKey { destroyed: ${this.destroyed} }`;
  }

  toJSON(): { destroyed: boolean } {
    return { destroyed: this.destroyed };
  }
}
