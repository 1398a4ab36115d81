// Human-readable renderings of generated cases, for failure messages: a tree as the lines of the
// tree DSL (with bytes that are not printable ASCII escaped), a raw request as a JSON string.
import type { Bytes } from './model.js';
import type { CompiledTree } from './trees.js';

export function show(b: Bytes): string {
  let out = '';
  for (const c of b) {
    const code = c.charCodeAt(0);
    out += code >= 0x21 && code <= 0x7e && c !== '\\' ? c : `\\x${code.toString(16).padStart(2, '0')}`;
  }
  return out.length > 300 ? `${out.slice(0, 140)}…(${b.length} bytes)…${out.slice(-140)}` : out;
}

export function describeTree(tree: CompiledTree): string {
  const lines = [`root: ${tree.spec.rootKind}`];
  tree.ops.forEach((op, i) => {
    const p = show(op.path.join('/'));
    const next = tree.ops[i + 1];
    switch (op.op) {
      case 'dir':
        // A directory the next line goes on inside is implied by it (deep chains stay short).
        if (!(next && next.path.length > op.path.length && next.path.slice(0, op.path.length).join('/') === op.path.join('/'))) lines.push(`${p}/`);
        break;
      case 'file':
        lines.push(`${p}: (${op.content.length} bytes)`);
        break;
      case 'symlink':
        lines.push(`${p} -> ${show(op.target)}`);
        break;
      case 'hardlink':
        lines.push(`${p} == ${show(op.to.join('/'))}`);
        break;
      case 'hardlink-outside':
        lines.push(`${p} == <workdir>/public.txt`);
        break;
      case 'fifo':
        lines.push(`${p} |`);
        break;
      case 'socket':
        lines.push(`${p} =`);
        break;
    }
  });
  return lines.length > 80 ? [...lines.slice(0, 80), `… ${lines.length - 80} more`].join('\n') : lines.join('\n');
}
