// The import graph of src/, for the audits that hold its layering (layers.test.ts) and the addon's
// face (addon-face.test.ts).
import { readFileSync, readdirSync } from 'node:fs';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));

/** Every src/ module → the src/ modules it imports (static, dynamic, `export … from`, type-only). */
export function importGraph(src = SRC): Map<string, string[]> {
  const files = readdirSync(src, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => f.split('\\').join('/'));
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const text = readFileSync(join(src, file), 'utf8')
      .replace(/^\s*\/\/.*$/gm, '')
      .replace(/\/\*[\s\S]*?\*\//g, '');
    const specs = [...text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"](\.\.?\/[^'"]+)['"]/gm)].map((m) => m[1]!);
    graph.set(
      file,
      specs.map((s) => posix.normalize(posix.join(posix.dirname(file), s)).replace(/\.js$/, '.ts')),
    );
  }
  return graph;
}
