// Tests for src/manifest/scope.ts: the runtime-writes table, the effective-grants object (its exact JSON,
// key order and defaults, since it is recorded verbatim in the trace), and the exact human
// rendering of explain-scope for a fully declared and an undeclared capsule.

import { describe, expect, it } from 'vitest';
import { parseManifest } from '../../src/manifest/model.js';
import { effectiveGrants, PEER_INBOX_DIR, renderExplainScope, renderRuntimeWrites, RUNTIME_WRITES, SESSION_ID_PLACEHOLDER } from '../../src/manifest/scope.js';

const MINIMAL = parseManifest('name: bare\nversion: 1.0.0\n');

const FULL = parseManifest(`
name: reporter
version: 0.1.0
exports:
  files:
    root: out/
    mode: read-only
  peer_files:
    root: share/
    max_ttl: 15m
    max_bytes: 1Ki
capabilities:
  peer_fetch:
    allow:
      - localhost:41234
      - HTTP://Peer.Example:8080/
  network:
    allow:
      - http://localhost:41234
lifecycle:
  after_task: sleep
`);

const PEER_IN_ROW = '{"path":"peer-in","kind":"directory","scope":"accessible","condition":"peer-fetch"}';

describe('the runtime-writes table', () => {
  it('declares exactly peer-in today', () => {
    expect(RUNTIME_WRITES).toEqual([{ path: 'peer-in', kind: 'directory', scope: 'accessible', condition: 'peer-fetch' }]);
    expect(PEER_INBOX_DIR).toBe('peer-in');
    expect(SESSION_ID_PLACEHOLDER).toBe('<session-id>');
  });

  it('cannot be changed at run time', () => {
    expect(Object.isFrozen(RUNTIME_WRITES)).toBe(true);
    expect(RUNTIME_WRITES.every((row) => Object.isFrozen(row))).toBe(true);
  });

  it('holds only paths relative to the workdir, with a session id only as the placeholder segment', () => {
    for (const { path } of RUNTIME_WRITES) {
      expect(path.startsWith('/')).toBe(false);
      const segments = path.split('/');
      expect(segments).not.toContain('..');
      expect(segments).not.toContain('');
      expect(path).not.toMatch(/ses_[0-9a-f]{32}/);
      for (const s of segments) if (s.includes('<')) expect(s).toBe(SESSION_ID_PLACEHOLDER);
    }
  });

  it('renders one row per entry, or <none>', () => {
    expect(renderRuntimeWrites(RUNTIME_WRITES)).toBe('  runtime writes:\n    - peer-in (directory, accessible, peer-fetch)');
    expect(renderRuntimeWrites([])).toBe('  runtime writes:\n    <none>');
    expect(renderRuntimeWrites([{ path: `runs/${SESSION_ID_PLACEHOLDER}/log`, kind: 'file', scope: 'session', condition: 'always' }])).toBe(
      '  runtime writes:\n    - runs/<session-id>/log (file, session, always)',
    );
  });
});

describe('effectiveGrants', () => {
  it('for a fully declared capsule: the exact one-line JSON, defaults applied', () => {
    expect(JSON.stringify(effectiveGrants(FULL, 'sealed'))).toBe(
      '{"exports_files":{"root":"out/","mode":"read-only","max_bytes":10485760},' +
        '"peer_files":{"root":"share/","max_ttl_secs":900,"max_bytes":1024},' +
        '"peer_fetch_allow":["localhost:41234","HTTP://Peer.Example:8080/"],' +
        '"network_allow":["http://localhost:41234"],' +
        '"achieved_containment":"sealed",' +
        `"runtime_writes":[${PEER_IN_ROW}]}`,
    );
  });

  it('for an undeclared capsule: null planes, no destinations, and the runtime writes still declared', () => {
    expect(JSON.stringify(effectiveGrants(MINIMAL, 'advisory'))).toBe(
      '{"exports_files":null,"peer_files":null,"peer_fetch_allow":[],"network_allow":[],' +
        `"achieved_containment":"advisory","runtime_writes":[${PEER_IN_ROW}]}`,
    );
  });

  it('keeps its keys in the contract order', () => {
    expect(Object.keys(effectiveGrants(MINIMAL, 'scoped'))).toEqual([
      'exports_files',
      'peer_files',
      'peer_fetch_allow',
      'network_allow',
      'achieved_containment',
      'runtime_writes',
    ]);
  });

  it('applies the one-hour TTL default when max_ttl is absent', () => {
    const m = parseManifest('name: a\nversion: "1"\nexports:\n  peer_files: { root: share }\n');
    expect(effectiveGrants(m, 'advisory').peer_files).toEqual({ root: 'share', max_ttl_secs: 3600, max_bytes: 10485760 });
  });

  it('reports an absent peer_fetch block as [] (the public reference); the human text still says the tool is not declared', () => {
    const m = parseManifest('name: a\nversion: "1"\ncapabilities:\n  network:\n    allow: [localhost]\n');
    const g = effectiveGrants(m, 'advisory');
    expect(g.peer_fetch_allow).toEqual([]);
    expect(g.network_allow).toEqual(['localhost']);
    expect(renderExplainScope(m, 'advisory')).toContain('fetch-peer-file: not declared');
  });

  it('reports the containment it is given', () => {
    for (const c of ['advisory', 'scoped', 'sealed'] as const) {
      expect(effectiveGrants(FULL, c).achieved_containment).toBe(c);
    }
  });

  it('hands out a fresh object: changing it reaches neither the table nor the next call', () => {
    const g = effectiveGrants(FULL, 'sealed');
    g.runtime_writes[0]!.path = 'elsewhere';
    g.network_allow.push('evil');
    expect(RUNTIME_WRITES[0]!.path).toBe('peer-in');
    expect(effectiveGrants(FULL, 'sealed').network_allow).toEqual(['http://localhost:41234']);
    expect(effectiveGrants(FULL, 'sealed').runtime_writes[0]!.path).toBe('peer-in');
  });
});

describe('renderExplainScope', () => {
  it('renders a fully declared capsule', () => {
    expect(renderExplainScope(FULL, 'sealed')).toBe(
      [
        'capsule: reporter 0.1.0',
        'achieved containment: sealed',
        'resource plane:',
        '  root: out/',
        '  mode: read-only',
        '  max bytes: 10485760 per file',
        'peer handoff:',
        '  root: share/',
        '  max handle ttl: 900s',
        '  max bytes: 1024 per file',
        '  peer_fetch allow:',
        '    - localhost:41234',
        '    - HTTP://Peer.Example:8080/',
        'network:',
        '  allow:',
        '    - http://localhost:41234',
        'workdir:',
        '  runtime writes:',
        '    - peer-in (directory, accessible, peer-fetch)',
        '',
      ].join('\n'),
    );
  });

  it('says plainly what an undeclared capsule lacks', () => {
    expect(renderExplainScope(MINIMAL, 'advisory')).toBe(
      [
        'capsule: bare 1.0.0',
        'achieved containment: advisory',
        'resource plane:',
        '  not declared: no exports.files block, so there is no resource plane',
        'peer handoff:',
        '  share-file: not declared: no exports.peer_files block, so nothing can be shared',
        '  fetch-peer-file: not declared: no capabilities.peer_fetch block, so nothing can be fetched',
        'network:',
        '  allow: <none>',
        'workdir:',
        '  runtime writes:',
        '    - peer-in (directory, accessible, peer-fetch)',
        '',
      ].join('\n'),
    );
  });

  it('marks a defaulted handle ttl as the default', () => {
    const m = parseManifest('name: a\nversion: "1"\nexports:\n  peer_files: { root: share }\n');
    expect(renderExplainScope(m, 'scoped')).toContain('\n  max handle ttl: 3600s (default; max_ttl not declared)\n');
  });
});
