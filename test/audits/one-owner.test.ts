// Issue 24's "one owner per decision", kept from drifting back: each rule the two HTTP clients
// and the tools share is spelled in one source file, found here by what it says, not where other
// files happen to live. The behaviour each rule owns is tested where it is exercised
// (audits/client-rules, tools/mcp-metadata, audits/secrets-review).
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Every TypeScript source file under src/, relative to the repository, with its text. */
function sources(): Array<{ file: string; text: string }> {
  const out: Array<{ file: string; text: string }> = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts')) out.push({ file: relative(ROOT, path), text: readFileSync(path, 'utf8') });
    }
  };
  walk(join(ROOT, 'src'));
  return out;
}

const filesMatching = (pattern: RegExp, within = (_file: string) => true) =>
  sources()
    .filter((s) => within(s.file) && pattern.test(s.text))
    .map((s) => s.file);

describe('one owner per decision', () => {
  it('the etag format is written and parsed only in src/wire.ts', () => {
    // A template or a pattern that builds or reads `"sha256:<hex>"`; message text quoting it is not one.
    expect(filesMatching(/`"sha256:\$\{|\/\^"sha256:/)).toEqual(['src/wire.ts']);
  });

  it('the refusal-body cap is defined once, and both clients read it from there', () => {
    expect(filesMatching(/ERROR_BODY_MAX_BYTES\s*=/)).toEqual(['src/response-body.ts']);
    expect(filesMatching(/readCapped\(res\.body, ERROR_BODY_MAX_BYTES\)/)).toEqual(['src/cli/client.ts']);
    expect(filesMatching(/readAll\(ERROR_BODY_MAX_BYTES\)/)).toEqual(['src/tools/fetch-peer-file.ts']);
  });

  it('one reader hashes a downloaded body: neither client hashes one itself', () => {
    expect(filesMatching(/readVerifiedBody\(/, (f) => f !== 'src/response-body.ts').sort()).toEqual([
      'src/cli/client.ts',
      'src/cli/download.ts',
      'src/cli/mirror.ts',
      'src/tools/fetch-peer-file.ts',
    ]);
    // (src/cli/local-tree.ts hashes the files mirror already holds, never a downloaded body.)
    expect(
      filesMatching(/createHash\(/, (f) => f === 'src/cli/client.ts' || f === 'src/cli/download.ts' || f === 'src/cli/mirror.ts' || f.startsWith('src/tools/')),
    ).toEqual([]);
  });

  it('every undici Client is made in src/outbound-client.ts, so every outbound socket is guarded', () => {
    // nodejs/undici#5360: a client made anywhere else would let a server end the process again.
    expect(filesMatching(/new (Client|Pool|Agent)\(/)).toEqual(['src/outbound-client.ts']);
    // Anything but a type from undici (fetch, request, a dispatcher) is taken only there too.
    expect(filesMatching(/^import (?!type )[^;]*from ['"]undici['"]/m)).toEqual(['src/outbound-client.ts']);
    expect(filesMatching(/outboundClient\(/, (f) => f !== 'src/outbound-client.ts').sort()).toEqual(['src/cli/client.ts', 'src/tools/peer-http.ts']);
  });

  it('the tools redact only through src/tools/refusal.ts', () => {
    expect(filesMatching(/redactHandles/, (f) => f.startsWith('src/tools/'))).toEqual(['src/tools/refusal.ts']);
  });

  it('tool arguments are parsed against their schema in one place, and the SDK is not patched', () => {
    expect(filesMatching(/\.input\.(safeParse|parse)\(/, (f) => f.startsWith('src/tools/'))).toEqual(['src/tools/index.ts']);
    expect(filesMatching(/\.setRequestHandler\s*=/)).toEqual([]);
    expect(filesMatching(/\bregisterTool\(/)).toEqual([]);
  });

  it('a peer token is split and decoded once in fetch-peer-file', () => {
    const text = readFileSync(join(ROOT, 'src/tools/fetch-peer-file.ts'), 'utf8');
    expect(text.match(/readUnverified\(|checkShape\(/g)).toEqual(['readUnverified(']);
  });
});
