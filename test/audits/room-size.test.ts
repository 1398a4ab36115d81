// No module of src/ grows past ~350 lines without saying why in its opening comment (issue 42: a
// room that owns too much costs the next engineer; one that must be long says so where it is read).
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));
const MAX_LINES = 350;
const REASON = 'Why this file is long:';

/** The comment lines a module opens with (`//` lines, or one leading block comment). */
function openingComment(text: string): string {
  const block = /^\/\*[\s\S]*?\*\//.exec(text);
  if (block) return block[0];
  const lines: string[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('//')) break;
    lines.push(line);
  }
  return lines.join('\n');
}

describe('the size of the rooms in src/', () => {
  it(`says, past ${MAX_LINES} lines, why the file is long, in its opening comment`, () => {
    const unexplained: string[] = [];
    for (const file of readdirSync(SRC, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'))) {
      const text = readFileSync(join(SRC, file), 'utf8');
      const lines = text.split('\n').length;
      if (lines > MAX_LINES && !openingComment(text).includes(REASON)) unexplained.push(`${file} (${lines} lines)`);
    }
    expect(unexplained).toEqual([]);
  });

  it('reads a reason only where a module opens', () => {
    expect(openingComment(`// a\n// ${REASON} x\nconst y = 1;\n`)).toContain(REASON);
    expect(openingComment(`// a\nconst y = 1;\n// ${REASON} x\n`)).not.toContain(REASON);
    expect(openingComment(`/**\n * ${REASON} x\n */\nconst y = 1;\n`)).toContain(REASON);
  });
});
