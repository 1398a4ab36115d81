/**
 * The instance key and the HMAC-SHA256 that every peer handle is sealed with.
 *
 * This file owns the only copy of the secret that makes a peer handle unforgeable: 32 random bytes
 * generated per session, held in libsodium secure memory (`sodium_malloc`: mlocked, guard pages,
 * canary), kept no-access except for the instant it is copied into a MAC computation, and zeroed
 * and freed at shutdown. sodium-native has no HMAC-SHA256 (`crypto_auth` is HMAC-SHA-512-256), so
 * RFC 2104 HMAC is built here from its SHA-256 streaming primitives, with the padded key, the
 * ipad/opad blocks, the hash state and the inner digest all living in one secure scratch arena
 * that is wiped after every MAC and no-access in between. It also owns the constant-time
 * comparison MACs are checked with, and the random-byte source the handle nonces come from, so
 * that every use of sodium-native on the peer plane sits in one place.
 */
import { createRequire } from 'node:module';
import { inspect } from 'node:util';

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

/** SHA-256 block size: the width RFC 2104 pads (or hashes) the key to. */
const BLOCK_BYTES = 64;
const DIGEST_BYTES = sodium.crypto_hash_sha256_BYTES;
const STATE_BYTES = sodium.crypto_hash_sha256_STATEBYTES;
const IPAD = 0x36;
const OPAD = 0x5c;

/** Rounds up to a multiple of 16 so every view into the scratch arena stays naturally aligned. */
function align16(n: number): number {
  return (n + 15) & ~15;
}

// Layout of the scratch arena. The hash state holds 64-bit words, so it sits at an aligned
// offset; sodium_malloc places the arena flush against its guard page, which keeps the start
// aligned only when the total size is a multiple of the alignment too.
const K0_OFFSET = 0;
const IPAD_OFFSET = K0_OFFSET + BLOCK_BYTES;
const OPAD_OFFSET = IPAD_OFFSET + BLOCK_BYTES;
const STATE_OFFSET = OPAD_OFFSET + BLOCK_BYTES;
const INNER_OFFSET = STATE_OFFSET + align16(STATE_BYTES);
const ARENA_BYTES = align16(INNER_OFFSET + DIGEST_BYTES);

/**
 * One secure scratch arena per process, reused by every MAC, zeroed after each and no-access in
 * between. Not one allocation per MAC: sodium-native's `sodium_free` only detaches the buffer,
 * and libsodium releases the pages when the garbage collector finalises it. Each allocation is
 * four mappings (two guard pages) and an mlock, so a busy redeem path would exhaust the mapping
 * limit (vm.max_map_count, ~16k MACs between collections) and abort the process, and long
 * before that exceed RLIMIT_MEMLOCK, which libsodium ignores, leaving later pages unlocked.
 * Reuse is safe because a MAC is synchronous start to finish: nothing can interleave with it.
 */
let arena: Buffer | null = null;

function scratchArena(): Buffer {
  if (arena === null) {
    const fresh = sodium.sodium_malloc(ARENA_BYTES);
    // sodium_malloc fills new memory with a garbage pattern; the arena is kept all-zero at rest.
    sodium.sodium_memzero(fresh);
    sodium.sodium_mprotect_noaccess(fresh);
    arena = fresh;
  }
  return arena;
}

/**
 * RFC 2104 HMAC-SHA256 over the concatenation of `parts`.
 *
 * `loadKey` writes the key into the zeroed 64-byte K0 view, using the (zeroed) state view if it
 * has to hash a long key first; it is a callback so the instance key is readable for exactly
 * that copy and no longer. Every key-derived byte lives in the secure arena and is wiped before
 * return, whatever happens. Only the finished MAC, which is public, is in ordinary memory.
 */
function hmacCore(
  loadKey: (k0: Buffer, state: Buffer) => void,
  parts: readonly Uint8Array[],
): Buffer {
  const scratch = scratchArena();
  sodium.sodium_mprotect_readwrite(scratch);
  try {
    const k0 = scratch.subarray(K0_OFFSET, K0_OFFSET + BLOCK_BYTES);
    const ipad = scratch.subarray(IPAD_OFFSET, IPAD_OFFSET + BLOCK_BYTES);
    const opad = scratch.subarray(OPAD_OFFSET, OPAD_OFFSET + BLOCK_BYTES);
    const state = scratch.subarray(STATE_OFFSET, STATE_OFFSET + STATE_BYTES);
    const inner = scratch.subarray(INNER_OFFSET, INNER_OFFSET + DIGEST_BYTES);

    loadKey(k0, state);
    for (let i = 0; i < BLOCK_BYTES; i++) {
      const byte = k0[i] as number;
      ipad[i] = byte ^ IPAD;
      opad[i] = byte ^ OPAD;
    }
    sodium.sodium_memzero(k0);

    sodium.crypto_hash_sha256_init(state);
    sodium.crypto_hash_sha256_update(state, ipad);
    for (const part of parts) sodium.crypto_hash_sha256_update(state, part);
    sodium.crypto_hash_sha256_final(state, inner);

    const mac = Buffer.alloc(DIGEST_BYTES);
    sodium.crypto_hash_sha256_init(state);
    sodium.crypto_hash_sha256_update(state, opad);
    sodium.crypto_hash_sha256_update(state, inner);
    sodium.crypto_hash_sha256_final(state, mac);
    return mac;
  } finally {
    sodium.sodium_memzero(scratch);
    sodium.sodium_mprotect_noaccess(scratch);
  }
}

/**
 * Writes `key` into `k0` per RFC 2104: as is when it fits a block, else its SHA-256 digest,
 * hashed with the arena's own state so no key-derived state leaves secure memory.
 */
function loadArbitraryKey(key: Uint8Array, k0: Buffer, state: Buffer): void {
  if (key.length <= BLOCK_BYTES) {
    k0.set(key);
    return;
  }
  sodium.crypto_hash_sha256_init(state);
  sodium.crypto_hash_sha256_update(state, key);
  // The state is re-initialised for the inner hash next, and the whole arena is wiped at the end.
  sodium.crypto_hash_sha256_final(state, k0.subarray(0, DIGEST_BYTES));
}

/**
 * HMAC-SHA256 with a caller-supplied key, through the same core the instance key uses.
 * Exists so the construction can be checked against the RFC 4231 vectors.
 */
export function hmacSha256WithKey(key: Buffer, message: Buffer): Buffer {
  return hmacCore((k0, state) => loadArbitraryKey(key, k0, state), [message]);
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

  private constructor(key: Buffer) {
    this.#key = key;
  }

  /** A fresh key: 32 bytes from libsodium's CSPRNG, written straight into secure memory. */
  static generate(): InstanceKey {
    const key = sodium.sodium_malloc(INSTANCE_KEY_BYTES);
    try {
      sodium.randombytes_buf(key);
      sodium.sodium_mprotect_noaccess(key);
    } catch (error) {
      sodium.sodium_free(key);
      throw error;
    }
    return new InstanceKey(key);
  }

  get destroyed(): boolean {
    return this.#key === null;
  }

  /**
   * HMAC-SHA256 under this key over the concatenation of `parts`. The key pages are readable
   * only while they are copied into the computation's own secure scratch, and are no-access
   * again before any message byte is hashed.
   */
  hmacSha256(parts: Buffer[]): Buffer {
    const key = this.#key;
    if (key === null) throw new Error('the instance key has been destroyed');
    return hmacCore((k0) => {
      sodium.sodium_mprotect_readonly(key);
      try {
        k0.set(key);
      } finally {
        sodium.sodium_mprotect_noaccess(key);
      }
    }, parts);
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
   * The secure buffer itself, for the test that proves it is no-access between uses.
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
