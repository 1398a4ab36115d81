// docs/api.md against the package: it names every export of src/index.ts (values and types) and
// no name the package does not export, and each of its ```js examples runs as written in a fresh
// project that depends on this package (test/helpers/readme-example.ts), exiting 0.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runReadmeExample } from '../helpers/readme-example.js';

const DOC = readFileSync(fileURLToPath(new URL('../../docs/api.md', import.meta.url)), 'utf8');
const INDEX = readFileSync(fileURLToPath(new URL('../../src/index.ts', import.meta.url)), 'utf8');

/** Every name src/index.ts exports (`export { a, type B } from …`). */
function exportedNames(source: string): string[] {
  return [...source.matchAll(/export\s+(?:type\s+)?\{([^}]*)\}/g)]
    .flatMap((m) => m[1]!.split(','))
    .map((n) =>
      n
        .trim()
        .replace(/^type\s+/, '')
        .split(/\s+as\s+/)
        .pop()!
        .trim(),
    )
    .filter((n) => n !== '');
}

const EXAMPLES = [...DOC.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]!);

describe('docs/api.md', () => {
  it('names every export in its prose, in code', () => {
    const names = exportedNames(INDEX);
    expect(names.length).toBeGreaterThan(40);
    // Named in an inline code span of the prose (`bind(address?: ListenAddress)` names both).
    const spans = [...DOC.replace(/```[\s\S]*?```/g, '').matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!);
    const missing = names.filter((n) => !spans.some((span) => new RegExp(`(^|[^A-Za-z0-9_])${n}($|[^A-Za-z0-9_])`).test(span)));
    expect(missing).toEqual([]);
  });

  it('imports nothing the package does not export', () => {
    const names = new Set(exportedNames(INDEX));
    const imported = EXAMPLES.flatMap((code) =>
      [...code.matchAll(/import \{([^}]*)\} from 'capsule-resource-plane'/g)].flatMap((m) => m[1]!.split(',').map((n) => n.trim())),
    );
    expect(imported.length).toBeGreaterThan(5);
    expect(imported.filter((n) => !names.has(n))).toEqual([]);
  });

  it.each(EXAMPLES.map((code, i) => [i + 1, code]))(
    'example %i runs as written',
    async (_i, code) => {
      const out = await runReadmeExample(code as string);
      expect(out.trim()).not.toBe('');
    },
    60_000,
  );
});
