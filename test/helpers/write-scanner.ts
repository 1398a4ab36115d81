// Finds every place the project's own source can write to the filesystem, so a test can hold each
// one to the runtime-writes declaration (src/manifest/scope.ts) or to a written exemption. Textual on
// purpose: it reads source the way a reviewer does and cannot be satisfied by running the code.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

export interface WriteSite {
  file: string;
  line: number;
  call: string;
  text: string;
}

// Node fs calls that create, modify or remove something, and the addon's landing. A landing's
// later calls (write, commit, abort) act only inside the directory `Landing.open` chose, so its
// open is the site that names where the writes go.
const TS_WRITES =
  /\b(writeFileSync|writeFile|appendFileSync|appendFile|mkdirSync|mkdir|mkdtempSync|mkdtemp|renameSync|rename|unlinkSync|unlink|rmSync|rm|rmdirSync|rmdir|cpSync|cp|copyFileSync|copyFile|symlinkSync|symlink|linkSync|link|truncateSync|truncate|ftruncateSync|createWriteStream|writeSync|write|openSync|open|Landing\.open)\s*\(/g;
// Syscalls that create, modify or remove something beneath a descriptor or by path.
const CC_WRITES =
  /\b(mkdirat|mkdir|renameat2?|rename|unlinkat|unlink|symlinkat|linkat|mknodat|creat|ftruncate|truncate|fchmod|fchmodat|fchown|fchownat|write|pwrite|openat|open)\s*\(/g;
// An open is a write only when its flags say so.
const CC_OPEN_WRITE_FLAGS = /O_CREAT|O_WRONLY|O_RDWR|O_TRUNC|O_APPEND/;

function stripComment(line: string): string {
  const i = line.indexOf('//');
  return i >= 0 ? line.slice(0, i) : line;
}

/** Write sites in one source text; `kind` picks the vocabulary. */
export function scanSource(file: string, text: string, kind: 'ts' | 'cc'): WriteSite[] {
  const sites: WriteSite[] = [];
  const lines = text.split('\n');
  lines.forEach((raw, i) => {
    const code = stripComment(raw);
    if (/^\s*(\*|\/\*)/.test(code)) return;
    const pattern = kind === 'ts' ? TS_WRITES : CC_WRITES;
    for (const m of code.matchAll(pattern)) {
      const call = m[1]!;
      // Method calls on other objects (`reply.send`, `stream.write` on sockets) are not fs writes,
      // except the fs-module and native-module forms the project uses.
      const before = code.slice(0, m.index);
      if (kind === 'ts' && /[\w\])]\.\s*$/.test(before) && !/\b(fs|native|promises)\.\s*$/.test(before)) continue;
      if (kind === 'ts' && /\b(function|async)\s+$/.test(before)) continue; // a definition, not a call
      if (kind === 'ts' && (call === 'open' || call === 'openSync') && !/['"`][wa][x+]*['"`]|O_CREAT|O_WRONLY|O_APPEND|flags/.test(code)) continue;
      if (kind === 'cc' && (call === 'open' || call === 'openat')) {
        // Flags can wrap onto the next line of the call.
        const span = code + (lines[i + 1] ?? '');
        if (!CC_OPEN_WRITE_FLAGS.test(span)) continue;
      }
      sites.push({ file, line: i + 1, call, text: raw.trim() });
    }
  });
  return sites;
}

function walk(dir: string, exts: string[], out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) walk(p, exts, out);
    else if (exts.some((e) => entry.name.endsWith(e))) out.push(p);
  }
  return out;
}

/** Every write site in the project's shipped source: src/ (TypeScript) and native/ (C++). */
export function scanProject(root: string): WriteSite[] {
  const sites: WriteSite[] = [];
  for (const f of walk(join(root, 'src'), ['.ts'])) sites.push(...scanSource(relative(root, f), readFileSync(f, 'utf8'), 'ts'));
  for (const f of walk(join(root, 'native'), ['.cc', '.h'])) sites.push(...scanSource(relative(root, f), readFileSync(f, 'utf8'), 'cc'));
  return sites;
}
