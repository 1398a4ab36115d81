/**
 * The instance key and its HMAC: the RFC 4231 vectors through the same core the key uses, the
 * constant-time comparison, that every secure buffer is zero when it is freed, and — in a child
 * process, because the proof is the process dying — that the key's pages are no-access between
 * MAC computations.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { constantTimeEqual, hmacSha256WithKeyForTests, KEY_BUFFER_BYTES, InstanceKey, INSTANCE_KEY_BYTES, randomBytes } from '../../src/handle/key.js';
import { MAC_BATCH_MAX } from '../../src/limits.js';

const sodium = createRequire(import.meta.url)('sodium-native') as Record<string, unknown> & {
  sodium_memzero(buf: Uint8Array): void;
  sodium_mprotect_noaccess(buf: Buffer): void;
  sodium_mprotect_readwrite(buf: Buffer): void;
  sodium_free(buf: Buffer): void;
  sodium_malloc(size: number): Buffer;
};

const hex = (text: string): Buffer => Buffer.from(text, 'hex');
const ascii = (text: string): Buffer => Buffer.from(text, 'ascii');

/** RFC 4231 §4.2–4.8, HMAC-SHA-256 only. Case 5's output is truncated to 128 bits. */
const RFC4231: { name: string; key: Buffer; data: Buffer; mac: string; truncateTo?: number }[] = [
  {
    name: '1: short key, short data',
    key: Buffer.alloc(20, 0x0b),
    data: ascii('Hi There'),
    mac: 'b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7',
  },
  {
    name: '2: key shorter than the output',
    key: ascii('Jefe'),
    data: ascii('what do ya want for nothing?'),
    mac: '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843',
  },
  {
    name: '3: combined key and data of 0xaa/0xdd',
    key: Buffer.alloc(20, 0xaa),
    data: Buffer.alloc(50, 0xdd),
    mac: '773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe',
  },
  {
    name: '4: 25-byte counting key',
    key: hex('0102030405060708090a0b0c0d0e0f10111213141516171819'),
    data: Buffer.alloc(50, 0xcd),
    mac: '82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b',
  },
  {
    name: '5: truncation to 128 bits',
    key: Buffer.alloc(20, 0x0c),
    data: ascii('Test With Truncation'),
    mac: 'a3b6167473100ee06e0c796c2955552b',
    truncateTo: 16,
  },
  {
    name: '6: key larger than a block is hashed first',
    key: Buffer.alloc(131, 0xaa),
    data: ascii('Test Using Larger Than Block-Size Key - Hash Key First'),
    mac: '60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54',
  },
  {
    name: '7: key and data both larger than a block',
    key: Buffer.alloc(131, 0xaa),
    data: ascii(
      'This is a test using a larger than block-size key and a larger than block-size data. ' +
        'The key needs to be hashed before being used by the HMAC algorithm.',
    ),
    mac: '9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2',
  },
];

afterEach(() => {
  vi.restoreAllMocks();
});

describe('HMAC-SHA256 against RFC 4231', () => {
  for (const vector of RFC4231) {
    it(`test case ${vector.name}`, () => {
      const mac = hmacSha256WithKeyForTests(vector.key, vector.data);
      expect(mac.length).toBe(32);
      const compared = vector.truncateTo === undefined ? mac : mac.subarray(0, vector.truncateTo);
      expect(compared.toString('hex')).toBe(vector.mac);
    });
  }

  it('handles a key of exactly one block without hashing it', async () => {
    const { createHmac } = await import('node:crypto');
    for (const length of [0, 1, 32, 63, 64, 65]) {
      const key = randomBytes(length);
      const data = randomBytes(200);
      expect(hmacSha256WithKeyForTests(key, data).toString('hex'), `key length ${length}`).toBe(createHmac('sha256', key).update(data).digest('hex'));
    }
  });
});

describe('constantTimeEqual', () => {
  it('is true only for identical bytes of identical length', () => {
    const a = randomBytes(32);
    expect(constantTimeEqual(a, Buffer.from(a))).toBe(true);
    for (const index of [0, 15, 31]) {
      const b = Buffer.from(a);
      b[index] = (b[index] as number) ^ 0x01;
      expect(constantTimeEqual(a, b), `differs at ${index}`).toBe(false);
    }
    expect(constantTimeEqual(a, a.subarray(0, 31))).toBe(false);
    expect(constantTimeEqual(a, Buffer.concat([a, Buffer.alloc(1)]))).toBe(false);
    expect(constantTimeEqual(Buffer.alloc(0), Buffer.alloc(0))).toBe(true);
  });
});

describe('InstanceKey', () => {
  it('MACs the concatenation of its parts, deterministically, and differs per key', () => {
    const one = InstanceKey.generate();
    const two = InstanceKey.generate();
    try {
      const whole = one.hmacSha256([ascii('abcdef')]);
      expect(whole.length).toBe(32);
      expect(one.hmacSha256([ascii('abc'), ascii('def')])).toEqual(whole);
      expect(one.hmacSha256([ascii('a'), Buffer.alloc(0), ascii('bcdef')])).toEqual(whole);
      expect(one.hmacSha256([ascii('abcdeg')])).not.toEqual(whole);
      expect(two.hmacSha256([ascii('abcdef')])).not.toEqual(whole);
    } finally {
      one.destroy();
      two.destroy();
    }
  });

  it('keeps its 32 bytes and the states derived from them in one secure buffer', () => {
    const key = InstanceKey.generate();
    try {
      const buffer = key._unsafeBufferForTest() as Buffer & { secure?: boolean };
      expect(buffer.length).toBe(KEY_BUFFER_BYTES);
      expect(KEY_BUFFER_BYTES).toBeGreaterThan(INSTANCE_KEY_BYTES);
      expect(buffer.secure).toBe(true);
    } finally {
      key.destroy();
    }
  });

  it('never prints or serialises its bytes', async () => {
    const { inspect } = await import('node:util');
    const key = InstanceKey.generate();
    try {
      expect(inspect(key)).toBe('InstanceKey { destroyed: false }');
      expect(JSON.stringify(key)).toBe('{"destroyed":false}');
    } finally {
      key.destroy();
    }
  });

  it('zeroes the key before freeing it, and destroy is idempotent', () => {
    const key = InstanceKey.generate();
    const buffer = key._unsafeBufferForTest();
    const original = sodium.sodium_memzero;
    let afterWipe: Buffer | null = null;
    vi.spyOn(sodium, 'sodium_memzero').mockImplementation((target: Uint8Array) => {
      original(target);
      if (target === buffer) afterWipe = Buffer.from(target);
    });
    const free = vi.spyOn(sodium, 'sodium_free');

    key.destroy();
    expect(afterWipe).toEqual(Buffer.alloc(KEY_BUFFER_BYTES));
    // Identity, not equality: the freed buffer is detached and cannot be compared by content.
    expect(free).toHaveBeenCalledTimes(1);
    expect(free.mock.calls[0]?.[0]).toBe(buffer);
    expect(key.destroyed).toBe(true);
    // Freed: the binding detaches the backing memory, so no view can reach it any more.
    expect(buffer.length).toBe(0);

    key.destroy();
    expect(free).toHaveBeenCalledTimes(1);
    expect(() => key.hmacSha256([ascii('x')])).toThrow(/destroyed/);
    expect(() => key._unsafeBufferForTest()).toThrow(/destroyed/);
  });

  it('allocates no secure memory per MAC, and wipes the scratch before locking it', () => {
    const key = InstanceKey.generate();
    try {
      key.hmacSha256([ascii('warm-up')]);
      const keyBuffer = key._unsafeBufferForTest();
      const malloc = vi.spyOn(sodium, 'sodium_malloc');
      const lock = sodium.sodium_mprotect_noaccess;
      const lockedDirty: number[] = [];
      let locks = 0;
      vi.spyOn(sodium, 'sodium_mprotect_noaccess').mockImplementation((buffer: Buffer) => {
        // The instance key is locked holding its bytes and states; the scratch must be zero at rest.
        if (buffer !== keyBuffer && buffer.some((byte) => byte !== 0)) {
          lockedDirty.push(buffer.length);
        }
        locks++;
        lock(buffer);
      });

      key.hmacSha256([ascii('message')]);
      hmacSha256WithKeyForTests(Buffer.alloc(131, 0xaa), ascii('a long key takes the hashing path'));

      expect(malloc).not.toHaveBeenCalled();
      // Key once (one unlock per MAC: the states are derived at generation), scratch once.
      expect(locks).toBe(2);
      expect(lockedDirty).toEqual([]);
    } finally {
      key.destroy();
    }
  });

  it('computes the MACs asked for in one turn under one unlock, and settles them only once the key is locked again', async () => {
    const key = InstanceKey.generate();
    try {
      const keyBuffer = key._unsafeBufferForTest();
      const messages = Array.from({ length: MAC_BATCH_MAX * 2 + 5 }, (_, i) => [ascii(`redeem ${i}`)]);
      const expected = messages.map((m) => key.hmacSha256(m));
      const unlock = sodium.sodium_mprotect_readwrite;
      const lock = sodium.sodium_mprotect_noaccess;
      const events: string[] = [];
      vi.spyOn(sodium, 'sodium_mprotect_readwrite').mockImplementation((buffer: Buffer) => {
        if (buffer === keyBuffer) events.push('unlock');
        unlock(buffer);
      });
      vi.spyOn(sodium, 'sodium_mprotect_noaccess').mockImplementation((buffer: Buffer) => {
        lock(buffer);
        if (buffer === keyBuffer) events.push('lock');
      });
      const few = await Promise.all(messages.slice(0, 5).map((m) => key.hmacSha256Soon(m).then((mac) => (events.push('settled'), mac))));
      expect(few).toEqual(expected.slice(0, 5));
      expect(events).toEqual(['unlock', 'lock', ...Array(5).fill('settled')]);

      // More than a batch: MAC_BATCH_MAX per unlock, so the readable window stays bounded.
      events.length = 0;
      const many = await Promise.all(messages.map((m) => key.hmacSha256Soon(m)));
      expect(many).toEqual(expected);
      expect(events).toEqual(['unlock', 'lock', 'unlock', 'lock', 'unlock', 'lock']);
    } finally {
      key.destroy();
    }
  });

  it('refuses a MAC asked for soon once the key is destroyed, before or while it waits', async () => {
    const key = InstanceKey.generate();
    const waiting = key.hmacSha256Soon([ascii('waits')]);
    key.destroy();
    await expect(waiting).rejects.toThrow(/destroyed/);
    await expect(key.hmacSha256Soon([ascii('late')])).rejects.toThrow(/destroyed/);
  });

  it('survives more MACs than the process could map fresh secure allocations for', () => {
    // sodium_free only detaches, so per-MAC allocations would pile up four mappings each until
    // a collection, and vm.max_map_count (65530) would abort Node at about 16k MACs.
    const key = InstanceKey.generate();
    try {
      const message = [ascii('x')];
      const first = key.hmacSha256(message);
      for (let i = 0; i < 40_000; i++) key.hmacSha256(message);
      expect(key.hmacSha256(message)).toEqual(first);
    } finally {
      key.destroy();
    }
  });
});

// ── No access between uses, proven in a process that is allowed to die ───────

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const requireHere = createRequire(import.meta.url);

const CHILD = `
import { InstanceKey } from './handle/key.js';
const mode = process.argv[2];
const key = InstanceKey.generate();
const mac = key.hmacSha256([Buffer.from('inside the window')]);
process.stdout.write('mac ' + mac.toString('hex') + '\\n');
const buffer = key._unsafeBufferForTest();
if (mode === 'batch-read') {
  const macs = await Promise.all([1, 2, 3].map((i) => key.hmacSha256Soon([Buffer.from('batched ' + i)])));
  process.stdout.write('batch ' + macs.length + '\\n');
  process.stdout.write('read ' + buffer[0] + '\\n');
}
if (mode === 'read') process.stdout.write('read ' + buffer[0] + '\\n');
if (mode === 'write') { buffer[0] = 1; process.stdout.write('wrote\\n'); }
if (mode === 'copy') process.stdout.write('copied ' + Buffer.from(buffer).toString('hex') + '\\n');
// A second MAC after the first proves the window closes and reopens cleanly.
const again = key.hmacSha256([Buffer.from('inside the window')]);
process.stdout.write('again ' + (again.equals(mac) ? 'same' : 'different') + '\\n');
key.destroy();
process.stdout.write('destroyed\\n');
`;

describe('the key pages outside the MAC window', () => {
  let dir: string;

  beforeAll(() => {
    // The child must run InstanceKey itself, so key.ts (with what it imports) is compiled into a
    // private directory. Nothing is written into the project.
    dir = mkdtempSync(join(tmpdir(), 'peer-key-'));
    const tsc = join(ROOT, 'node_modules/typescript/bin/tsc');
    const build = spawnSync(
      process.execPath,
      [
        tsc,
        '--ignoreConfig',
        join(ROOT, 'src/handle/key.ts'),
        '--outDir',
        dir,
        '--module',
        'nodenext',
        '--moduleResolution',
        'nodenext',
        '--target',
        'es2022',
        '--types',
        'node',
        '--skipLibCheck',
      ],
      { cwd: ROOT, encoding: 'utf8' },
    );
    expect(build.status, `${build.stdout}${build.stderr}`).toBe(0);
    // ESM, and sodium-native resolvable from there.
    writeFileSync(join(dir, 'package.json'), '{"type":"module"}\n');
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
    writeFileSync(join(dir, 'child.mjs'), CHILD);
  });

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  function runChild(mode: string) {
    return spawnSync(process.execPath, [join(dir, 'child.mjs'), mode], {
      encoding: 'utf8',
      timeout: 30_000,
      // key.ts reads its bound from src/limits.ts, which re-exports the addon's sizes: the copy
      // compiled here loads the project's addon by the override the ASan run uses.
      env: { ...process.env, RESOURCE_PLANE_ADDON: requireHere('node-gyp-build').path(ROOT) as string },
    });
  }

  it('MACs inside the window and runs to completion', () => {
    const child = runChild('mac-only');
    expect(child.signal, child.stderr).toBeNull();
    expect(child.status, child.stderr).toBe(0);
    expect(child.stdout).toMatch(/^mac [0-9a-f]{64}\nagain same\ndestroyed\n$/);
  });

  it('kills the process on a read right after a batch of MACs: the batch locks the key again', () => {
    const child = runChild('batch-read');
    expect(['SIGSEGV', 'SIGBUS'], `status ${child.status}, stderr ${child.stderr}`).toContain(child.signal);
    expect(child.stdout).toMatch(/^mac [0-9a-f]{64}\nbatch 3\n$/);
  });

  for (const mode of ['read', 'write', 'copy']) {
    it(`kills the process on a ${mode} between uses`, () => {
      const child = runChild(mode);
      expect(['SIGSEGV', 'SIGBUS'], `status ${child.status}, stderr ${child.stderr}`).toContain(child.signal);
      // It got as far as the MAC, and not one step past the touch.
      expect(child.stdout).toMatch(/^mac [0-9a-f]{64}\n$/);
    });
  }
});
