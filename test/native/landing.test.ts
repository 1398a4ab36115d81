// The native boundary after the reshape (issue 8, item 4), on real temp trees: the landing object
// owns the inbox descriptors (TypeScript never sees one), each operation has its own async
// resource name, and read/stat/list/checkRoot take named options that the addon checks by name.
import { createHook } from 'node:async_hooks';
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { beforeEach, describe, expect, it } from 'vitest';
import * as native from '../../src/addon/export.js';
import { listForTests } from '../../src/addon/for-tests.js';
import { Landing } from '../../src/addon/landing.js';
import { heldDirectory, RESOLVERS } from '../helpers/resolvers.js';
import { makeTree, scratch } from '../helpers/tree.js';

const ROOT = new URL('../..', import.meta.url).pathname;
// The raw addon, to call it the way src/addon/ must not: positionally, or with wrong types.
// RESOURCE_PLANE_ADDON: the build src/addon/load.ts loads under `npm run test:asan`.
const binding = (
  process.env.RESOURCE_PLANE_ADDON ? createRequire(import.meta.url)(process.env.RESOURCE_PLANE_ADDON) : createRequire(import.meta.url)('node-gyp-build')(ROOT)
) as Record<string, (...args: unknown[]) => unknown>;
/** The resolver this kernel prefers: openat2 where it has it. */
const RESOLVER: native.ResolverKind = RESOLVERS[0]!;
const O_CLOEXEC = 0o2000000;

let workdir: string;
let workdirFd: number;

// Each test's own workdir and descriptor, closed and removed when it finishes.
beforeEach(async () => {
  workdir = scratch([], 'rp-landing-');
  workdirFd = (await heldDirectory(workdir)).fd;
});

/** This process's descriptors that point at something under `dir`, with their open flags. */
function descriptorsUnder(dir: string): { fd: string; target: string; flags: number }[] {
  const out: { fd: string; target: string; flags: number }[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    let target: string;
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue; // the directory listing's own descriptor, gone already
    }
    if (target !== dir && !target.startsWith(`${dir}/`)) continue;
    const info = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8');
    out.push({ fd, target, flags: parseInt(/^flags:\s*([0-7]+)/m.exec(info)![1]!, 8) });
  }
  return out;
}

const inbox = () => join(workdir, 'peer-in');
const inboxNames = () => readdirSync(inbox()).sort();

describe('Landing', () => {
  it('writes, commits and closes: the file lands whole and every descriptor is gone', async () => {
    const landing = await Landing.open(workdirFd, 'peer-in');
    // While it is open the addon holds the inbox and the temporary file, both close-on-exec; the
    // workdir descriptor is the test's own.
    const held = descriptorsUnder(inbox());
    expect(held.map((d) => d.target).sort()).toEqual([inbox(), join(inbox(), inboxNames()[0]!)].sort());
    for (const d of held) expect(d.flags & O_CLOEXEC, `${d.target} without O_CLOEXEC`).toBe(O_CLOEXEC);
    expect(inboxNames()).toHaveLength(1);
    expect(inboxNames()[0]).toMatch(/^\.tmp-[0-9a-f]{24}$/);

    await landing.write(Buffer.from('hello, '));
    await landing.write(Buffer.alloc(0));
    await landing.write(Buffer.from('world'));
    await landing.commit('landed.txt');
    expect(inboxNames()).toEqual(['landed.txt']);
    expect(readFileSync(join(inbox(), 'landed.txt'), 'utf8')).toBe('hello, world');
    await landing.close();
    expect(descriptorsUnder(inbox())).toEqual([]);
    expect(readFileSync(join(inbox(), 'landed.txt'), 'utf8')).toBe('hello, world');
  });

  it('runs calls made without awaiting in order, one at a time', async () => {
    const landing = await Landing.open(workdirFd, 'peer-in');
    const parts = Array.from({ length: 50 }, (_, i) => Buffer.from(`${i},`));
    await Promise.all([...parts.map((p) => landing.write(p)), landing.commit('ordered'), landing.close()]);
    expect(readFileSync(join(inbox(), 'ordered'), 'utf8')).toBe(parts.map(String).join(''));
  });

  it('abort before commit removes the temporary file and closes everything', async () => {
    const landing = await Landing.open(workdirFd, 'peer-in');
    await landing.write(Buffer.from('partial'));
    await landing.abort();
    expect(inboxNames()).toEqual([]);
    expect(descriptorsUnder(inbox())).toEqual([]);
    // Ended: nothing more is written anywhere.
    await expect(landing.write(Buffer.from('x'))).rejects.toMatchObject({ code: 'IO_ERROR' });
    await expect(landing.commit('late')).rejects.toMatchObject({ code: 'IO_ERROR' });
    expect(inboxNames()).toEqual([]);
  });

  it('close before commit removes the temporary file too', async () => {
    const landing = await Landing.open(workdirFd, 'peer-in');
    await landing.write(Buffer.from('partial'));
    await landing.close();
    expect(inboxNames()).toEqual([]);
    expect(descriptorsUnder(inbox())).toEqual([]);
  });

  it('abort after commit takes the landed file back, but never a file put there since', async () => {
    const first = await Landing.open(workdirFd, 'peer-in');
    await first.write(Buffer.from('one'));
    await first.commit('a');
    await first.abort();
    expect(inboxNames()).toEqual([]);

    const second = await Landing.open(workdirFd, 'peer-in');
    await second.write(Buffer.from('two'));
    await second.commit('b');
    // Someone replaces the landed name with their own file before the abort.
    writeFileSync(join(inbox(), 'other'), 'theirs');
    renameSync(join(inbox(), 'other'), join(inbox(), 'b'));
    await second.abort();
    expect(readFileSync(join(inbox(), 'b'), 'utf8')).toBe('theirs');
    expect(descriptorsUnder(inbox())).toEqual([]);
  });

  it('commit replaces a symlink at the final name instead of writing through it', async () => {
    mkdirSync(inbox());
    writeFileSync(join(workdir, 'victim'), 'keep');
    symlinkSync('../victim', join(inbox(), 'x'));
    const landing = await Landing.open(workdirFd, 'peer-in');
    await landing.write(Buffer.from('new'));
    await landing.commit('x');
    await landing.close();
    expect(readFileSync(join(workdir, 'victim'), 'utf8')).toBe('keep');
    expect(readFileSync(join(inbox(), 'x'), 'utf8')).toBe('new');
  });

  it('refuses a symlinked or non-directory inbox and bad names with UNSAFE_INBOX, leaking nothing', async () => {
    makeTree(workdir, ['elsewhere/', 'peer-in -> elsewhere', 'file-inbox: x']);
    await expect(Landing.open(workdirFd, 'peer-in')).rejects.toMatchObject({ code: 'UNSAFE_INBOX' });
    await expect(Landing.open(workdirFd, 'file-inbox')).rejects.toMatchObject({ code: 'UNSAFE_INBOX' });
    for (const bad of ['a/b', '..', '.', '']) {
      await expect(Landing.open(workdirFd, bad)).rejects.toMatchObject({ code: 'UNSAFE_INBOX' });
    }
    expect(readdirSync(join(workdir, 'elsewhere'))).toEqual([]);

    const landing = await Landing.open(workdirFd, 'ok-inbox');
    for (const bad of ['a/b', '..', '.', '', 'x\0y']) {
      await expect(landing.commit(bad)).rejects.toMatchObject({ code: 'UNSAFE_INBOX' });
    }
    await landing.close();
    expect(readdirSync(join(workdir, 'ok-inbox'))).toEqual([]);
    expect(descriptorsUnder(workdir).filter((d) => d.target !== workdir)).toEqual([]);
  });

  it('a landing dropped without close is closed by the collector, its temporary file removed', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    await (async () => {
      const landing = await Landing.open(workdirFd, 'peer-in');
      await landing.write(Buffer.from('abandoned'));
    })();
    expect(inboxNames()).toHaveLength(1);
    const deadline = Date.now() + 20_000;
    while ((inboxNames().length > 0 || descriptorsUnder(inbox()).length > 0) && Date.now() < deadline) {
      gc();
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(inboxNames()).toEqual([]);
    expect(descriptorsUnder(inbox())).toEqual([]);
  });

  it('hands TypeScript no descriptor, and the raw inbox functions are gone', async () => {
    const landing = await Landing.open(workdirFd, 'peer-in');
    expect(Object.values(landing).filter((v) => typeof v === 'number')).toEqual([]);
    expect(JSON.stringify(landing)).toBe('{}');
    await landing.close();
    for (const gone of ['createInboxTemp', 'commitInboxTemp', 'discardInboxTemp']) expect(native).not.toHaveProperty(gone);
    for (const gone of ['inboxCreate', 'inboxCommit', 'inboxDiscard']) expect(binding).not.toHaveProperty(gone);
    // The handle the addon returns cannot be made from JS.
    const raw = (await binding.landingOpen!({ workdirFd, inbox: 'peer-in' })) as { close(): Promise<void> };
    const Handle = raw.constructor as new (...a: unknown[]) => unknown;
    expect(() => new Handle()).toThrow(/landingOpen/);
    expect(() => new Handle(3)).toThrow(/landingOpen/);
    await raw.close();
    expect(inboxNames()).toEqual([]);
  });
});

describe('the boundary', () => {
  it('gives each operation its own async resource name', async () => {
    makeTree(workdir, ['out/f: x']);
    const types = new Set<string>();
    const hook = createHook({
      init(_id, type) {
        if (type.startsWith('resource-plane')) types.add(type);
      },
    }).enable();
    try {
      const opts = { refuseSymlinks: false, resolver: RESOLVER };
      const fd = await native.openDirectory(workdir);
      native.closeFd(fd);
      await native.readFile(workdirFd, 'out', 'f', 10, opts);
      await native.statFile(workdirFd, 'out', 'f', opts);
      await listForTests(workdirFd, 'out', opts);
      await native.checkRoot(workdirFd, 'out', RESOLVER);
      const landing = await Landing.open(workdirFd, 'peer-in');
      await landing.write(Buffer.from('x'));
      await landing.commit('y');
      await landing.abort();
      await landing.close();
    } finally {
      hook.disable();
    }
    expect([...types].sort()).toEqual([
      'resource-plane:check-root',
      'resource-plane:landing-abort',
      'resource-plane:landing-close',
      'resource-plane:landing-commit',
      'resource-plane:landing-open',
      'resource-plane:landing-write',
      'resource-plane:list',
      'resource-plane:open-directory',
      'resource-plane:read',
      'resource-plane:stat',
    ]);
  });

  it('takes named options and refuses positional or mistyped ones instead of coercing them', async () => {
    makeTree(workdir, ['out/f: x', 'out/l -> f']);
    const good = { workdirFd, root: 'out', relpath: 'l', maxBytes: 10, refuseSymlinks: true, resolver: RESOLVER };
    await expect(binding.read!(good)).rejects.toMatchObject({ code: 'SYMLINK_REFUSED' });
    await expect(binding.read!({ ...good, refuseSymlinks: false })).resolves.toMatchObject({ sha256: expect.any(String) });
    // The old positional form, and every way of getting a field wrong, is a TypeError/RangeError
    // at the call, not a default: a truthy string must never mean "refuse" or "follow" by accident.
    expect(() => binding.read!(workdirFd, 'out', 'l', 10, true, false)).toThrow(TypeError);
    expect(() => binding.read!({ ...good, refuseSymlinks: 'yes' })).toThrow(/refuseSymlinks/);
    expect(() => binding.read!({ ...good, refuseSymlinks: undefined })).toThrow(/refuseSymlinks/);
    expect(() => binding.read!({ ...good, resolver: true })).toThrow(/resolver/);
    expect(() => binding.read!({ ...good, resolver: 'kernel' })).toThrow(/resolver/);
    expect(() => binding.read!({ ...good, maxBytes: -1 })).toThrow(/maxBytes/);
    expect(() => binding.read!({ ...good, maxBytes: 1.5 })).toThrow(/maxBytes/);
    expect(() => binding.read!({ ...good, relpath: undefined })).toThrow(/relpath/);
    expect(() => binding.read!({ ...good, workdirFd: '3' })).toThrow(/workdirFd/);
    expect(() => binding.stat!({ ...good, relpath: 1 })).toThrow(/relpath/);
    expect(() => binding.list!({ workdirFd, root: 'out', resolver: RESOLVER })).toThrow(/refuseSymlinks/);
    expect(() => binding.checkRoot!({ workdirFd, root: 'out', resolver: 'walk ' })).toThrow(/resolver/);
    expect(() => binding.landingOpen!({ workdirFd })).toThrow(/inbox/);
    expect(existsSync(join(workdir, 'peer-in'))).toBe(false);
  });

  it('serves a read buffer that the addon allocated, for empty, small and ceiling-sized files', async () => {
    makeTree(workdir, ['out/empty: ', 'out/small: abc']);
    writeFileSync(join(workdir, 'out/full'), Buffer.alloc(4096, 7));
    const opts = { refuseSymlinks: false, resolver: RESOLVER };
    expect((await native.readFile(workdirFd, 'out', 'empty', 4096, opts)).bytes.length).toBe(0);
    expect((await native.readFile(workdirFd, 'out', 'small', 4096, opts)).bytes.toString()).toBe('abc');
    const full = await native.readFile(workdirFd, 'out', 'full', 4096, opts);
    expect(full.bytes.equals(Buffer.alloc(4096, 7))).toBe(true);
    await expect(native.readFile(workdirFd, 'out', 'full', 4095, opts)).rejects.toMatchObject({ code: 'TOO_LARGE' });
    expect(descriptorsUnder(workdir).filter((d) => d.target !== workdir)).toEqual([]);
  });
});
