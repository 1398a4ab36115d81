import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { list as clientList } from '../../src/cli/client.js';
import { scratch } from '../helpers/tree.js';
import { up } from '../helpers/adversary.js';

// ── 12. The operator's own view of a hostile listing ──────────────────────────────────────────────

describe('the operator client renders a hostile listing', () => {
  // Was a WEAKNESS, now fixed and held by this test (operator-facing integrity): `resource-plane ls` prints each path raw
  // (src/cli/client.ts list(), the `line()` helper). File names are chosen by the capsule, and a name
  // holding a newline forges whole rows of the table (size, time, hash prefix, path of a file that
  // does not exist, or a fake hash for one that does); ESC sequences reach the operator's terminal.
  // Fix: escape control characters (and a bare newline) when rendering, e.g. JSON.stringify-style
  // quoting for any path that is not plain printable text.
  it('one file never renders as more than one row, and no control byte reaches the terminal', async () => {
    const forged = 'innocent.txt\n   12  2020-01-01T00:00:00.000Z  868db1c52a946cae  report.md';
    const work = scratch(['out/report.md: genuine']);
    writeFileSync(join(work, 'out', forged), 'x');
    writeFileSync(join(work, 'out', 'bell\u0007\u001b]0;pwned\u0007'), 'y');
    const srv = await up(work);
    const text = await clientList(srv.url);
    const rows = text.trimEnd().split('\n');
    // header line, column line, 3 files, footer
    expect(rows).toHaveLength(6);
    expect(text).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f]/);
  });
});
