// The layering of src/ (docs/architecture.md), checked on every import, type-only ones included:
// no cycle, and no module imports a layer above its own. Top to bottom:
//   cli/ and index.ts → launch/ → http/ | tools/ (apart) → session/ → export/ trace/ handle/ manifest/ → leaves
// testing/ is never shipped and only cli/ may import it. (dependency-cruiser would do this, but it
// needs the TypeScript compiler API, which TypeScript 7 does not have yet.)
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { importGraph } from '../helpers/imports.js';

// addon/ (the addon's typed face) sits with the leaves: leaves such as codes.ts and limits.ts use it.
const LAYERS: readonly string[][] = [
  ['cli', 'index', 'testing'],
  ['launch'],
  ['http', 'tools'],
  ['session'],
  ['export', 'trace', 'handle', 'manifest'],
  ['leaf', 'addon'],
];

const group = (file: string) => (file === 'index.ts' ? 'index' : file.includes('/') ? file.split('/')[0]! : 'leaf');
const layer = (file: string) => LAYERS.findIndex((l) => l.includes(group(file)));

function cycles(graph: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (n: string) => {
    state.set(n, 'open');
    stack.push(n);
    for (const m of graph.get(n) ?? []) {
      if (state.get(m) === 'open') found.push([...stack.slice(stack.indexOf(m)), m]);
      else if (!state.has(m)) visit(m);
    }
    stack.pop();
    state.set(n, 'done');
  };
  for (const n of graph.keys()) if (!state.has(n)) visit(n);
  return found;
}

describe('the layering of src/', () => {
  const graph = importGraph();

  it('reads the imports it checks (a scanner that sees nothing would pass anything)', () => {
    expect(graph.size).toBeGreaterThan(40);
    expect(graph.get('http/plugin.ts')).toContain('session/open-session.ts');
    for (const [file, deps] of graph) for (const d of deps) expect(graph.has(d), `${file} imports ${d}, which is not a module in src/`).toBe(true);
  });

  it('has no import cycle', () => {
    expect(cycles(graph).map((c) => c.join(' → '))).toEqual([]);
  });

  it('imports only its own layer and the ones below', () => {
    const upward: string[] = [];
    for (const [file, deps] of graph) {
      expect(layer(file), `${file} is in no layer`).toBeGreaterThanOrEqual(0);
      for (const d of deps) if (layer(d) < layer(file)) upward.push(`${file} → ${d}`);
    }
    expect(upward).toEqual([]);
  });

  it('keeps inbound (http/) and outbound (tools/) apart, and testing/ reachable from cli/ only', () => {
    const crossing: string[] = [];
    for (const [file, deps] of graph) {
      for (const d of deps) {
        const [a, b] = [group(file), group(d)];
        if ((a === 'http' && b === 'tools') || (a === 'tools' && b === 'http')) crossing.push(`${file} → ${d}`);
        if (b === 'testing' && a !== 'cli' && a !== 'testing') crossing.push(`${file} → ${d}`);
      }
    }
    expect(crossing).toEqual([]);
  });

  it('catches a cycle and an upward import in a tree made to have them', async () => {
    const { mkdtempSync, mkdirSync, writeFileSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(join(tmpdir(), 'layers-'));
    try {
      mkdirSync(join(dir, 'session'));
      mkdirSync(join(dir, 'http'));
      writeFileSync(join(dir, 'session/a.ts'), "import type { B } from '../http/b.js';\n");
      writeFileSync(join(dir, 'http/b.ts'), "import {\n  A,\n} from '../session/a.js';\n");
      const g = importGraph(dir);
      expect(cycles(g).length).toBeGreaterThan(0);
      expect([...g].flatMap(([f, ds]) => ds.filter((d) => layer(d) < layer(f)).map((d) => `${f} → ${d}`))).toEqual(['session/a.ts → http/b.ts']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
