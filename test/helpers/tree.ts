// A tiny DSL that builds real directory trees for tests, in the spirit of Go's os.Root tests:
//   'd/'            a directory          'f: text'      a file with that content
//   'l -> target'   a symlink            'p |'          a FIFO
//   's ='           a UNIX socket        'z @ 8g'       a sparse file of that size (k/m/g)
// `scratch` is the usual way in: a fresh temp directory holding such a tree, gone after the test.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  mkdtempSync,
  openSync,
  closeSync,
  ftruncateSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { defer } from './cleanup.js';

export function tempDir(prefix = 'rp-'): string {
  return realpathSync(mkdtempSync(join(tmpdir(), prefix)));
}

export function removeTree(dir: string): void {
  try {
    rmSync(dir, { recursive: true, force: true });
  } catch {
    // A tree deeper than PATH_MAX (or than rmSync's recursion) is beyond fs.rmSync; rm -rf copes.
    execFileSync('rm', ['-rf', '--', dir]);
  }
}

/** A fresh temp directory (real path) holding `tree`, removed when the running test finishes. */
export function scratch(tree: string[] = [], prefix = 'rp-'): string {
  const dir = tempDir(prefix);
  defer(() => removeTree(dir));
  makeTree(dir, tree);
  return dir;
}

const SIZE = /^(\d+)([kmg]?)$/;

export function makeTree(base: string, lines: string[]): void {
  for (const line of lines) {
    let m: RegExpExecArray | null;
    if ((m = /^(.*?) -> (.*)$/.exec(line))) {
      mkdirSync(dirname(join(base, m[1]!)), { recursive: true });
      symlinkSync(m[2]!, join(base, m[1]!));
    } else if ((m = /^(.*?) \|$/.exec(line))) {
      mkdirSync(dirname(join(base, m[1]!)), { recursive: true });
      execFileSync('mkfifo', [join(base, m[1]!)]);
    } else if ((m = /^(.*?) =$/.exec(line))) {
      mkdirSync(dirname(join(base, m[1]!)), { recursive: true });
      // A bound-but-unused UNIX socket leaves its inode behind, which is what we want here.
      execFileSync('python3', ['-c', 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])', join(base, m[1]!)]);
    } else if ((m = /^(.*?) @ (.*)$/.exec(line))) {
      const size = SIZE.exec(m[2]!);
      if (!size) throw new Error(`bad size in '${line}'`);
      const mult = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[size[2] as '' | 'k' | 'm' | 'g'];
      mkdirSync(dirname(join(base, m[1]!)), { recursive: true });
      const fd = openSync(join(base, m[1]!), 'w');
      ftruncateSync(fd, Number(size[1]) * mult);
      closeSync(fd);
    } else if (line.endsWith('/')) {
      mkdirSync(join(base, line), { recursive: true });
    } else if ((m = /^(.*?): ([\s\S]*)$/.exec(line))) {
      mkdirSync(dirname(join(base, m[1]!)), { recursive: true });
      writeFileSync(join(base, m[1]!), m[2]!);
    } else {
      throw new Error(`cannot parse tree line '${line}'`);
    }
  }
}

export function fdCount(): number {
  return readdirSync('/proc/self/fd').length;
}

/** The pids whose parent is `pid`, read from /proc (no `ps`: it deadlocks with ASan preloaded). */
export function childPids(pid: number): number[] {
  const children: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // exited while we looked
    }
    // The command name may hold spaces and parentheses: fields resume after the last ')'.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === pid) children.push(Number(name));
  }
  return children;
}

/** One name in treeState: a file by its digest and size, a link by its target, a directory, or anything else. */
export type TreeNode = { type: 'file'; sha: string; bytes: number } | { type: 'dir' } | { type: 'link'; target: string } | { type: 'other' };

/**
 * Every name beneath `dir` (relative path, in readdir order), with what it is; no link is followed
 * and no special file opened. `skip` leaves out one name at the top (and what is beneath it).
 */
export function treeState(dir: string, skip?: string): Map<string, TreeNode> {
  const out = new Map<string, TreeNode>();
  const visit = (rel: string) => {
    for (const name of readdirSync(join(dir, rel))) {
      const path = rel === '' ? name : `${rel}/${name}`;
      if (path === skip) continue;
      const st = lstatSync(join(dir, path));
      if (st.isDirectory()) {
        out.set(path, { type: 'dir' });
        visit(path);
      } else if (st.isSymbolicLink()) out.set(path, { type: 'link', target: readlinkSync(join(dir, path)) });
      else if (st.isFile()) {
        const bytes = readFileSync(join(dir, path));
        out.set(path, { type: 'file', sha: createHash('sha256').update(bytes).digest('hex'), bytes: bytes.length });
      } else out.set(path, { type: 'other' });
    }
  };
  visit('');
  return out;
}
