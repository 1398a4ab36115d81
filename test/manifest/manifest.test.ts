// Tests for src/manifest/ (model.ts, grammars.ts, destinations.ts): the byte-count, duration and destination grammars, the one allow-list
// matcher, every manifest rule and default, every launch diagnostic with its exact wording, and the
// E-CAP-007 root check against a real temporary tree with symlinks pointing out of the workdir.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkExportRootsAt } from '../../src/session/checks.js';
import { destinationMatches, parseDestination, targetFromPeer, type Destination } from '../../src/manifest/destinations.js';
import { parseByteCount, parseDuration, parseFlagByteCount } from '../../src/manifest/grammars.js';
import { ManifestError, parseManifest, type Manifest } from '../../src/manifest/model.js';

/** Runs `fn`, requires it to throw a ManifestError with `code`, and hands the error back. */
function catchManifestError(fn: () => unknown, code: ManifestError['code']): ManifestError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught, 'expected a ManifestError to be thrown').toBeInstanceOf(ManifestError);
  const err = caught as ManifestError;
  expect(err.code).toBe(code);
  expect(err.hint.length).toBeGreaterThan(10);
  return err;
}

async function catchManifestErrorAsync(op: Promise<unknown>, code: ManifestError['code']): Promise<ManifestError> {
  const caught: unknown = await op.then(
    () => undefined,
    (err: unknown) => err,
  );
  return catchManifestError(() => {
    if (caught !== undefined) throw caught;
  }, code);
}

function refuse(yaml: string, code: ManifestError['code'], message?: string | RegExp): ManifestError {
  const err = catchManifestError(() => parseManifest(yaml), code);
  if (typeof message === 'string') expect(err.message).toBe(message);
  else if (message) expect(err.message).toMatch(message);
  return err;
}

const HEAD = 'name: reporter\nversion: 0.1.0\n';

/** A manifest with one exports.files block whose fields are given as YAML lines. */
const withFiles = (...lines: string[]) => `${HEAD}exports:\n  files:\n${lines.map((l) => `    ${l}\n`).join('')}`;
const withPeerFiles = (...lines: string[]) => `${HEAD}exports:\n  peer_files:\n${lines.map((l) => `    ${l}\n`).join('')}`;

// ── Grammars ─────────────────────────────────────────────────────────────────────────────────────

describe('parseByteCount', () => {
  it.each([
    ['1', 1],
    ['1024', 1024],
    ['1Ki', 1024],
    ['10Mi', 10485760],
    ['1Gi', 1073741824],
    ['3Gi', 3 * 1073741824],
    [' 10Mi ', 10485760],
    ['\t42\n', 42],
    ['010', 10],
    ['9007199254740991', Number.MAX_SAFE_INTEGER],
    ['8388607Gi', 8388607 * 1073741824],
  ])('accepts %j as %d', (input, expected) => {
    expect(parseByteCount(input)).toBe(expected);
  });

  it.each([
    ['10MB'],
    ['10 Mi'],
    ['10mi'],
    ['10KI'],
    ['10K'],
    ['Mi'],
    [''],
    ['   '],
    ['-1'],
    ['+1'],
    ['1.5Ki'],
    ['1e3'],
    ['0x10'],
    ['0'],
    ['0Ki'],
    ['١٢'], // non-ASCII digits
    ['9007199254740992'], // one above Number.MAX_SAFE_INTEGER
    ['8388608Gi'], // exactly 2^53 after scaling
    ['99999999999999999999999'],
  ])('refuses %j', (input) => {
    expect(parseByteCount(input)).toBeNull();
  });
});

describe('parseFlagByteCount (the command line: SI and IEC)', () => {
  it.each([
    ['65536', 65536],
    ['512B', 512],
    ['1Ki', 1024],
    ['1KiB', 1024],
    ['64Mi', 64 * 1024 ** 2],
    ['64MiB', 64 * 1024 ** 2],
    ['1Gi', 1024 ** 3],
    ['2TiB', 2 * 1024 ** 4],
    ['1k', 1000],
    ['1K', 1000],
    ['1kB', 1000],
    ['1KB', 1000],
    ['10M', 10_000_000],
    ['10MB', 10_000_000],
    ['10GB', 10_000_000_000],
    ['1T', 1e12],
    [' 10GB ', 10_000_000_000],
  ])('accepts %j as %d', (input, expected) => {
    expect(parseFlagByteCount(input)).toBe(expected);
  });

  it.each([
    ['10 MB'],
    ['10mb'],
    ['10mi'],
    ['10KI'],
    ['10Kib'],
    ['1.5G'],
    ['MB'],
    [''],
    ['0'],
    ['0GB'],
    ['-1k'],
    ['10bytes'],
    ['9007199254740992'],
    ['9007199255T'],
  ])('refuses %j', (input) => {
    expect(parseFlagByteCount(input)).toBeNull();
  });
});

describe('parseDuration', () => {
  it.each([
    ['90', 90],
    ['30s', 30],
    ['15m', 900],
    ['1h', 3600],
    ['2d', 172800],
    [' 5m ', 300],
    ['9007199254740991', Number.MAX_SAFE_INTEGER],
  ])('accepts %j as %d seconds', (input, expected) => {
    expect(parseDuration(input)).toBe(expected);
  });

  it.each([
    ['5 minutes'],
    ['30S'],
    ['30 m'],
    ['1H'],
    ['1w'],
    ['1.5h'],
    ['-5'],
    ['0'],
    ['0s'],
    [''],
    ['m'],
    ['1h30m'],
    ['9007199254740992'],
    ['104249991375d'], // overflows only once scaled to seconds
  ])('refuses %j', (input) => {
    expect(parseDuration(input)).toBeNull();
  });
});

// ── Destinations ─────────────────────────────────────────────────────────────────────────────────

describe('parseDestination', () => {
  it.each<[string, Omit<Destination, 'raw'>]>([
    ['http://localhost:8080', { scheme: 'http', host: 'localhost', port: 8080 }],
    ['http://localhost:8080/', { scheme: 'http', host: 'localhost', port: 8080 }],
    ['http://h', { scheme: 'http', host: 'h', port: 80 }],
    ['https://h', { scheme: 'https', host: 'h', port: 443 }],
    ['https://h/', { scheme: 'https', host: 'h', port: 443 }],
    ['HTTPS://Peer.Example.COM:8443', { scheme: 'https', host: 'peer.example.com', port: 8443 }],
    ['http://127.0.0.1:1', { scheme: 'http', host: '127.0.0.1', port: 1 }],
    ['http://[::1]', { scheme: 'http', host: '[::1]', port: 80 }],
    ['localhost', { scheme: null, host: 'localhost', port: null }],
    ['LocalHost', { scheme: null, host: 'localhost', port: null }],
    ['my_service.internal', { scheme: null, host: 'my_service.internal', port: null }],
    ['localhost:41234', { scheme: null, host: 'localhost', port: 41234 }],
    ['h:65535', { scheme: null, host: 'h', port: 65535 }],
    ['[::1]:8080', { scheme: null, host: '[::1]', port: 8080 }],
  ])('parses %j', (entry, expected) => {
    expect(parseDestination(entry)).toEqual({ raw: entry, ...expected });
  });

  it.each<[string, string]>([
    ['', 'the entry is empty'],
    ['http://h/path', "it has a path ('/path'); a URL destination may only end in '/'"],
    ['http://h//', "it has a path ('//'); a URL destination may only end in '/'"],
    ['http://h:80/a?b', "it has a path ('/a'); a URL destination may only end in '/'"],
    ['http://h?x=1', 'it has a query; a destination names scheme, host and port only'],
    ['http://h/?', 'it has a query; a destination names scheme, host and port only'],
    ['http://h#frag', 'it has a fragment; a destination names scheme, host and port only'],
    ['http://h/#', 'it has a fragment; a destination names scheme, host and port only'],
    ['ftp://h', "unsupported scheme 'ftp': only http and https URLs are accepted"],
    ['file:///etc/passwd', "unsupported scheme 'file': only http and https URLs are accepted"],
    ['ws://h:1', "unsupported scheme 'ws': only http and https URLs are accepted"],
    ['://h', "malformed URL scheme ''"],
    ['http://', 'the host is empty'],
    ['http://:80', 'the host is empty'],
    [':80', 'the host is empty'],
    ['h:0', "invalid port '0': a port is an integer from 1 to 65535"],
    ['h:65536', "invalid port '65536': a port is an integer from 1 to 65535"],
    ['h:080', "invalid port '080': a port is an integer from 1 to 65535"],
    ['h:-1', "invalid port '-1': a port is an integer from 1 to 65535"],
    ['h:http', "invalid port 'http': a port is an integer from 1 to 65535"],
    ['http://h:99999', "invalid port '99999': a port is an integer from 1 to 65535"],
    ['h:', 'the port after ":" is empty'],
    ['user@h', 'it carries userinfo ("user@"); a destination names a host only'],
    ['http://user:pw@h:80', 'it carries userinfo ("user@"); a destination names a host only'],
    ['h/x', "it has a path ('/x'); a bare host or host:port takes no path"],
    ['h:80/', "it has a path ('/'); a bare host or host:port takes no path"],
    ['h?x', 'it has a query; a destination names scheme, host and port only'],
    ['h#x', 'it has a fragment; a destination names scheme, host and port only'],
    ['::1', 'an IPv6 address must be written in brackets, e.g. [::1]:8080'],
    ['[::1', 'an IPv6 literal is missing its closing "]"'],
    ['[::1]x', "unexpected 'x' after the IPv6 literal"],
    ['a b', 'it contains whitespace or a control character'],
    [' localhost', 'it contains whitespace or a control character'],
    ['h%2e', "invalid host 'h%2e'"],
    ['exämple.com', "invalid host 'exämple.com'"],
    ['a..b', "invalid host 'a..b'"],
  ])('refuses %j with E-CAP-001', (entry, reason) => {
    const err = catchManifestError(() => parseDestination(entry), 'E-CAP-001');
    expect(err.message).toBe(`invalid network allow entry '${entry}': ${reason}`);
  });

  it('renders E-CAP-001 in the diagnostic form', () => {
    const err = catchManifestError(() => parseDestination('ftp://h'), 'E-CAP-001');
    expect(err.render()).toBe(
      "error[E-CAP-001]: invalid network allow entry 'ftp://h': unsupported scheme 'ftp': only http and https URLs are accepted\n" +
        '  hint: write an http(s) URL with no path, query or fragment (http://localhost:8080), a bare host (localhost) or host:port (localhost:8080)',
    );
  });
});

describe('destinationMatches', () => {
  const list = (...entries: string[]) => entries.map(parseDestination);

  it('a URL entry pins scheme, host and port, with the port defaulted by scheme', () => {
    const allow = list('http://localhost:8080', 'https://peer.example');
    expect(destinationMatches(allow, { scheme: 'http', host: 'localhost', port: 8080 })).toBe(true);
    expect(destinationMatches(allow, { scheme: 'https', host: 'localhost', port: 8080 })).toBe(false);
    expect(destinationMatches(allow, { scheme: 'http', host: 'localhost', port: 8081 })).toBe(false);
    expect(destinationMatches(allow, { scheme: 'https', host: 'peer.example', port: 443 })).toBe(true);
    expect(destinationMatches(allow, { scheme: 'http', host: 'peer.example', port: 443 })).toBe(false);
    expect(destinationMatches(allow, { scheme: 'https', host: 'peer.example', port: 8443 })).toBe(false);
  });

  it('a bare host admits any scheme and any port on that host only', () => {
    const allow = list('localhost');
    expect(destinationMatches(allow, { scheme: 'http', host: 'localhost', port: 1 })).toBe(true);
    expect(destinationMatches(allow, { scheme: 'https', host: 'localhost', port: 65535 })).toBe(true);
    expect(destinationMatches(allow, { scheme: 'http', host: 'localhost.', port: 80 })).toBe(false);
    expect(destinationMatches(allow, { scheme: 'http', host: 'sub.localhost', port: 80 })).toBe(false);
  });

  it('host:port admits any scheme on that port only', () => {
    const allow = list('localhost:9000');
    expect(destinationMatches(allow, { scheme: 'http', host: 'localhost', port: 9000 })).toBe(true);
    expect(destinationMatches(allow, { scheme: 'https', host: 'localhost', port: 9000 })).toBe(true);
    expect(destinationMatches(allow, { scheme: 'http', host: 'localhost', port: 9001 })).toBe(false);
  });

  it('compares hosts exactly after lowercasing: localhost is not 127.0.0.1', () => {
    expect(destinationMatches(list('localhost'), { scheme: 'http', host: '127.0.0.1', port: 80 })).toBe(false);
    expect(destinationMatches(list('127.0.0.1'), { scheme: 'http', host: 'localhost', port: 80 })).toBe(false);
    expect(destinationMatches(list('[::1]'), { scheme: 'http', host: 'localhost', port: 80 })).toBe(false);
    expect(destinationMatches(list('LOCALHOST'), { scheme: 'http', host: 'LocalHost', port: 80 })).toBe(true);
  });

  it('an empty list admits nothing', () => {
    expect(destinationMatches([], { scheme: 'http', host: 'localhost', port: 80 })).toBe(false);
  });

  it('matches what targetFromPeer derives from the same text', () => {
    const allow = list('localhost:41234');
    expect(destinationMatches(allow, targetFromPeer('localhost:41234'))).toBe(true);
    expect(destinationMatches(allow, targetFromPeer('https://LOCALHOST:41234/'))).toBe(true);
    expect(destinationMatches(allow, targetFromPeer('127.0.0.1:41234'))).toBe(false);
  });
});

describe('targetFromPeer', () => {
  it.each([
    ['localhost:41234', { scheme: 'http', host: 'localhost', port: 41234 }],
    ['Peer.Local:1', { scheme: 'http', host: 'peer.local', port: 1 }],
    ['http://localhost:41234', { scheme: 'http', host: 'localhost', port: 41234 }],
    ['http://h', { scheme: 'http', host: 'h', port: 80 }],
    ['https://h/', { scheme: 'https', host: 'h', port: 443 }],
    ['[::1]:9', { scheme: 'http', host: '[::1]', port: 9 }],
  ])('reads %j', (peer, expected) => {
    expect(targetFromPeer(peer)).toEqual(expected);
  });

  it.each([
    ['localhost', /a bare host names no port/],
    ['', /the entry is empty/],
    ['http://h/resources/peer', /has a path/],
    ['http://h?x', /has a query/],
    ['http://h#x', /has a fragment/],
    ['http://u@h:1', /userinfo/],
    ['ftp://h:1', /unsupported scheme/],
    ['h:0', /invalid port/],
    ['h:1 ', /whitespace/],
  ])('refuses %j', (peer, reason) => {
    expect(() => targetFromPeer(peer)).toThrow(reason);
    expect(() => targetFromPeer(peer)).toThrow(`invalid peer '${peer}'`);
  });
});

// ── The manifest ─────────────────────────────────────────────────────────────────────────────────

describe('parseManifest: what a valid manifest yields', () => {
  it('a minimal manifest declares nothing, with every default', () => {
    expect(parseManifest(HEAD)).toEqual({
      name: 'reporter',
      version: '0.1.0',
      files: null,
      peerFiles: null,
      peerFetchAllow: null,
      networkAllow: [],
      afterTask: 'exit',
    });
  });

  it('a full manifest, with roots kept verbatim and unknown keys ignored', () => {
    const m = parseManifest(`
name: reporter
version: "0.1.0"
description: ignored by this project
runtime: { model: anything, tools: [a, b] }
exports:
  files:
    root: out/
    mode: read-only
    max_bytes: 1Mi
    future_key: ignored
  peer_files:
    root: ./share
    max_ttl: 10m
    max_bytes: 4096
  something_else: { root: /anywhere }
capabilities:
  peer_fetch:
    allow:
      - localhost:41234
  network:
    allow:
      - http://localhost:41234
      - https://cards.example
  other: true
lifecycle:
  after_task: sleep
`);
    expect(m).toEqual({
      name: 'reporter',
      version: '0.1.0',
      files: { root: 'out/', mode: 'read-only', maxBytes: 1048576 },
      peerFiles: { root: './share', maxTtlSecs: 600, effectiveMaxTtlSecs: 600, maxBytes: 4096 },
      peerFetchAllow: [{ raw: 'localhost:41234', scheme: null, host: 'localhost', port: 41234 }],
      networkAllow: [
        { raw: 'http://localhost:41234', scheme: 'http', host: 'localhost', port: 41234 },
        { raw: 'https://cards.example', scheme: 'https', host: 'cards.example', port: 443 },
      ],
      afterTask: 'sleep',
    });
  });

  it('is deeply frozen', () => {
    const m = parseManifest(`${withFiles('root: out', 'mode: read-only')}capabilities:\n  network:\n    allow: [localhost]\n`);
    expect(Object.isFrozen(m)).toBe(true);
    expect(Object.isFrozen(m.files)).toBe(true);
    expect(Object.isFrozen(m.networkAllow)).toBe(true);
    expect(Object.isFrozen(m.networkAllow[0])).toBe(true);
    expect(() => {
      (m as { name: string }).name = 'other';
    }).toThrow(TypeError);
  });

  it('applies the byte-count and TTL defaults', () => {
    const m = parseManifest(`${HEAD}exports:\n  files: { root: out, mode: read-only }\n  peer_files: { root: share }\n`);
    expect(m.files?.maxBytes).toBe(10485760);
    expect(m.peerFiles).toEqual({ root: 'share', maxTtlSecs: null, effectiveMaxTtlSecs: 3600, maxBytes: 10485760 });
  });

  it('takes a null value for an optional scalar as absent', () => {
    const m = parseManifest(`${HEAD}exports:\n  peer_files: { root: share, max_ttl: ~, max_bytes: null }\nlifecycle:\n  after_task:\n`);
    expect(m.peerFiles).toEqual({ root: 'share', maxTtlSecs: null, effectiveMaxTtlSecs: 3600, maxBytes: 10485760 });
    expect(m.afterTask).toBe('exit');
  });

  it('accepts YAML integers for byte counts and durations', () => {
    const m = parseManifest(
      `${HEAD}exports:\n  files: { root: out, mode: read-only, max_bytes: 2048 }\n  peer_files: { root: s, max_ttl: 900, max_bytes: 1 }\n`,
    );
    expect(m.files?.maxBytes).toBe(2048);
    expect(m.peerFiles?.maxTtlSecs).toBe(900);
    expect(m.peerFiles?.maxBytes).toBe(1);
  });

  it('trims byte counts and durations', () => {
    const m = parseManifest(withPeerFiles('root: s', 'max_ttl: " 15m "', 'max_bytes: " 2Ki "'));
    expect(m.peerFiles?.maxTtlSecs).toBe(900);
    expect(m.peerFiles?.maxBytes).toBe(2048);
  });

  it('keeps a version or name the core schema reads as a number as the author wrote it', () => {
    expect(parseManifest('name: 007\nversion: 1.10\n')).toMatchObject({ name: '007', version: '1.10' });
    expect(parseManifest('name: a\nversion: 2\n').version).toBe('2');
  });

  it('accepts a root that is . or starts with dots without being ..', () => {
    expect(parseManifest(withFiles('root: .', 'mode: read-only')).files?.root).toBe('.');
    expect(parseManifest(withFiles('root: ..hidden/x', 'mode: read-only')).files?.root).toBe('..hidden/x');
    expect(parseManifest(withFiles('root: a/...', 'mode: read-only')).files?.root).toBe('a/...');
  });

  it('treats the two roots independently (they may even be the same)', () => {
    const m = parseManifest(`${HEAD}exports:\n  files: { root: out, mode: read-only }\n  peer_files: { root: out }\n`);
    expect(m.files?.root).toBe('out');
    expect(m.peerFiles?.root).toBe('out');
  });

  it('resolves a modest use of anchors and aliases', () => {
    const m = parseManifest(`${HEAD}exports:\n  files: { root: &r out/, mode: read-only, max_bytes: &b 512 }\n  peer_files: { root: *r, max_bytes: *b }\n`);
    expect(m.peerFiles?.root).toBe('out/');
    expect(m.peerFiles?.maxBytes).toBe(512);
  });

  it('network.allow absent, null or empty all mean no outbound destination', () => {
    expect(parseManifest(HEAD).networkAllow).toEqual([]);
    expect(parseManifest(`${HEAD}capabilities:\n  network: {}\n`).networkAllow).toEqual([]);
    expect(parseManifest(`${HEAD}capabilities:\n  network:\n    allow:\n`).networkAllow).toEqual([]);
    expect(parseManifest(`${HEAD}capabilities:\n  network:\n    allow: []\n`).networkAllow).toEqual([]);
  });

  it('peer_fetch.allow neither inherits nor widens network.allow', () => {
    const onlyNetwork = parseManifest(`${HEAD}capabilities:\n  network:\n    allow: [localhost]\n`);
    expect(onlyNetwork.peerFetchAllow).toBeNull();
    const both = parseManifest(`${HEAD}capabilities:\n  peer_fetch:\n    allow: [a:1]\n  network:\n    allow: [b:2]\n`);
    expect(both.peerFetchAllow?.map((d) => d.raw)).toEqual(['a:1']);
    expect(both.networkAllow.map((d) => d.raw)).toEqual(['b:2']);
  });

  it('has no TTL ceiling when the capsule exits after its task', () => {
    expect(parseManifest(withPeerFiles('root: s', 'max_ttl: 7d')).peerFiles?.effectiveMaxTtlSecs).toBe(604800);
    expect(parseManifest(`${withPeerFiles('root: s')}lifecycle:\n  after_task: exit\n`).peerFiles?.effectiveMaxTtlSecs).toBe(3600);
  });

  it('a sleeping capsule may declare max_ttl up to 900s, and one without peer_files needs none', () => {
    for (const ttl of ['15m', '900', '900s', '1m', '1']) {
      const m = parseManifest(`${withPeerFiles('root: s', `max_ttl: ${ttl}`)}lifecycle:\n  after_task: sleep\n`);
      expect(m.afterTask).toBe('sleep');
      expect(m.peerFiles?.effectiveMaxTtlSecs).toBeLessThanOrEqual(900);
    }
    expect(parseManifest(`${HEAD}lifecycle:\n  after_task: sleep\n`).afterTask).toBe('sleep');
  });
});

describe('parseManifest: E-MAN-003', () => {
  it('renders as error[CODE] then an indented hint', () => {
    const err = refuse(withFiles('root: out', 'mode: read-only', 'max_bytes: 10MB'), 'E-MAN-003');
    expect(err.render()).toBe(
      "error[E-MAN-003]: exports.files.max_bytes must be a byte count, optionally suffixed Ki/Mi/Gi (got '10MB')\n" +
        '  hint: write a whole number of bytes, optionally suffixed Ki, Mi or Gi (powers of 1024), e.g. 10Mi; omit the key for the 10Mi default' +
        "; '10MB' is a form the command-line flags accept, but the manifest is read by the runtime too and keeps Ki/Mi/Gi only",
    );
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe('ManifestError');
  });

  describe('the document', () => {
    it('refuses malformed YAML with a position', () => {
      refuse('name: "reporter\nversion: 1\n', 'E-MAN-003', /^murmur\.yaml is not valid YAML: .*\(line \d+, column \d+\)$/);
      refuse('name: [a\n', 'E-MAN-003', /^murmur\.yaml is not valid YAML: /);
      refuse('name: a\n\tversion: b\n', 'E-MAN-003', /^murmur\.yaml is not valid YAML: /);
    });

    it('refuses duplicate keys, naming the key', () => {
      refuse('name: a\nversion: "1"\nname: b\n', 'E-MAN-003', "murmur.yaml is not valid YAML: the key 'name' appears twice in one mapping (line 3, column 1)");
      refuse(`${HEAD}exports:\n  files: { root: a, mode: read-only, root: b }\n`, 'E-MAN-003', /the key 'root' appears twice/);
    });

    it('refuses more than one document', () => {
      refuse(`${HEAD}---\nname: b\n`, 'E-MAN-003', /^murmur\.yaml is not valid YAML: it holds more than one YAML document/);
    });

    it('refuses an alias bomb instead of expanding it', () => {
      const bomb = [
        'a: &a [x, x, x, x, x, x, x, x, x, x]',
        'b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]',
        'c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]',
        'd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]',
        'e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]',
      ].join('\n');
      refuse(`${HEAD}${bomb}\n`, 'E-MAN-003', /^murmur\.yaml could not be read: .*alias/i);
    });

    it.each([
      ['', 'an empty document'],
      ['# only a comment\n', 'an empty document'],
      ['- name: a\n', 'a list'],
      ['just text\n', "'just text'"],
      ['42\n', "'42'"],
    ])('refuses a document that is not a mapping: %j', (yaml, got) => {
      refuse(yaml, 'E-MAN-003', `murmur.yaml must be a mapping at the top level (got ${got})`);
    });
  });

  describe('name and version', () => {
    it.each([
      ['version: 1.0.0\n', 'name is required and must be a string'],
      ['name:\nversion: 1.0.0\n', 'name is required and must be a string'],
      ['name: ""\nversion: 1.0.0\n', "name must be a non-empty string (got '')"],
      ['name: [a]\nversion: 1.0.0\n', 'name must be a string (got a list)'],
      ['name: a\n', 'version is required and must be a string'],
      ['name: a\nversion: { major: 1 }\n', 'version must be a string (got a mapping)'],
    ])('%j', (yaml, message) => {
      refuse(yaml, 'E-MAN-003', message);
    });
  });

  describe('section shapes', () => {
    it.each([
      ['exports: [files]\n', 'exports must be a mapping (got a list)'],
      ['capabilities: none\n', "capabilities must be a mapping (got 'none')"],
      ['lifecycle: [exit]\n', 'lifecycle must be a mapping (got a list)'],
      ['exports:\n  files: out/\n', "exports.files must be a mapping (got 'out/')"],
      ['exports:\n  peer_files: [a]\n', 'exports.peer_files must be a mapping (got a list)'],
      ['capabilities:\n  peer_fetch: true\n', "capabilities.peer_fetch must be a mapping (got 'true')"],
      ['capabilities:\n  network: [localhost]\n', 'capabilities.network must be a mapping (got a list)'],
    ])('%j', (rest, message) => {
      refuse(`${HEAD}${rest}`, 'E-MAN-003', message);
    });
  });

  describe('export roots', () => {
    it('requires root and mode in exports.files', () => {
      refuse(
        withFiles('mode: read-only'),
        'E-MAN-003',
        'exports.files.root is required in the exports.files block and must be a relative path inside the workdir',
      );
      refuse(withFiles('root: out'), 'E-MAN-003', 'exports.files.mode is required in the exports.files block and must be read-only');
      // An explicitly empty block is a declaration with its required fields missing, not an absent one.
      refuse(`${HEAD}exports:\n  files:\n`, 'E-MAN-003', /^exports\.files\.root is required/);
    });

    it('accepts only read-only as the mode', () => {
      refuse(withFiles('root: out', 'mode: read-write'), 'E-MAN-003', "exports.files.mode must be read-only (got 'read-write')");
      refuse(withFiles('root: out', 'mode: READ-ONLY'), 'E-MAN-003', "exports.files.mode must be read-only (got 'READ-ONLY')");
      refuse(withFiles('root: out', 'mode: [read-only]'), 'E-MAN-003', 'exports.files.mode must be read-only (got a list)');
    });

    it('requires root in exports.peer_files', () => {
      refuse(
        withPeerFiles('max_ttl: 1h'),
        'E-MAN-003',
        'exports.peer_files.root is required in the exports.peer_files block and must be a relative path inside the workdir',
      );
      refuse(`${HEAD}exports:\n  peer_files:\n`, 'E-MAN-003', /^exports\.peer_files\.root is required/);
    });

    it.each([
      ['""', ''],
      ['/etc', '/etc'],
      ['/', '/'],
      ['..', '..'],
      ['../out', '../out'],
      ['out/../..', 'out/../..'],
      ['a/../b', 'a/../b'],
      ['out/..', 'out/..'],
      ['"a\\0b"', 'a\0b'],
    ])('refuses root %s in both blocks', (yamlValue, got) => {
      refuse(withFiles(`root: ${yamlValue}`, 'mode: read-only'), 'E-MAN-003', `exports.files.root must be a relative path inside the workdir (got '${got}')`);
      refuse(withPeerFiles(`root: ${yamlValue}`), 'E-MAN-003', `exports.peer_files.root must be a relative path inside the workdir (got '${got}')`);
    });

    it('refuses a root that is not a scalar', () => {
      refuse(withFiles('root: [out]', 'mode: read-only'), 'E-MAN-003', 'exports.files.root must be a relative path inside the workdir (got a list)');
    });

    it('says in the hint what to change', () => {
      expect(refuse(withFiles('root: /srv/out', 'mode: read-only'), 'E-MAN-003').hint).toMatch(/leading "\/"/);
      expect(refuse(withPeerFiles('root: ../x'), 'E-MAN-003').hint).toMatch(/"\.\." component/);
    });
  });

  describe('byte counts', () => {
    const rule = 'must be a byte count, optionally suffixed Ki/Mi/Gi';
    it.each([
      ['10MB', `${rule} (got '10MB')`],
      ['"10 Mi"', `${rule} (got '10 Mi')`],
      ['10mi', `${rule} (got '10mi')`],
      ['-1', `${rule} (got '-1')`],
      ['1.5', `${rule} (got '1.5')`],
      ['0x10', `${rule} (got '0x10')`],
      ['1e3', `${rule} (got '1e3')`],
      ['true', `${rule} (got 'true')`],
      ['0', `${rule}, greater than 0 (got '0')`],
      ['"0Mi"', `${rule}, greater than 0 (got '0Mi')`],
      ['9007199254740992', `${rule}, no larger than 9007199254740991 (got '9007199254740992')`],
      ['"99999999Gi"', `${rule}, no larger than 9007199254740991 (got '99999999Gi')`],
      ['[1]', `${rule} (got a list)`],
    ])('refuses max_bytes %s in both blocks', (yamlValue, tail) => {
      refuse(withFiles('root: out', 'mode: read-only', `max_bytes: ${yamlValue}`), 'E-MAN-003', `exports.files.max_bytes ${tail}`);
      refuse(withPeerFiles('root: out', `max_bytes: ${yamlValue}`), 'E-MAN-003', `exports.peer_files.max_bytes ${tail}`);
    });
  });

  describe('durations', () => {
    const rule = 'must be a duration: an integer, optionally suffixed s/m/h/d';
    it.each([
      ['5 minutes', `${rule} (got '5 minutes')`],
      ['30S', `${rule} (got '30S')`],
      ['30 m', `${rule} (got '30 m')`],
      ['1.5h', `${rule} (got '1.5h')`],
      ['-60', `${rule} (got '-60')`],
      ['0', `${rule}, greater than 0 (got '0')`],
      ['0m', `${rule}, greater than 0 (got '0m')`],
      ['99999999999999999d', `${rule}, no larger than 9007199254740991s (got '99999999999999999d')`],
      ['{ minutes: 5 }', `${rule} (got a mapping)`],
    ])('refuses max_ttl %s', (yamlValue, tail) => {
      refuse(withPeerFiles('root: s', `max_ttl: ${yamlValue}`), 'E-MAN-003', `exports.peer_files.max_ttl ${tail}`);
    });
  });

  describe('allow lists', () => {
    const nonEmpty = 'capabilities.peer_fetch.allow must be a non-empty list of network destinations';
    it.each([
      ['peer_fetch: {}', nonEmpty],
      ['peer_fetch:', nonEmpty],
      ['peer_fetch:\n    allow:', `${nonEmpty} (got 'null')`],
      ['peer_fetch:\n    allow: []', `${nonEmpty} (got an empty list)`],
      ['peer_fetch:\n    allow: localhost', `${nonEmpty} (got 'localhost')`],
      ['peer_fetch:\n    allow: { a: 1 }', `${nonEmpty} (got a mapping)`],
      ['peer_fetch:\n    allow: [[a]]', 'capabilities.peer_fetch.allow[0] must be a network destination string (got a list)'],
      ['network:\n    allow: localhost', "capabilities.network.allow must be a list of network destinations (got 'localhost')"],
      ['network:\n    allow: [ok, { host: x }]', 'capabilities.network.allow[1] must be a network destination string (got a mapping)'],
      ['network:\n    allow: [ok, null]', "capabilities.network.allow[1] must be a network destination string (got 'null')"],
    ])('%j', (block, message) => {
      refuse(`${HEAD}capabilities:\n  ${block}\n`, 'E-MAN-003', message);
    });

    it('refuses a malformed peer_fetch.allow entry as E-MAN-003 naming the list (the public reference), a network.allow one as E-CAP-001', () => {
      const inFetch = refuse(
        `${HEAD}capabilities:\n  peer_fetch:\n    allow: [localhost:1, "http://h/x"]\n`,
        'E-MAN-003',
        "capabilities.peer_fetch.allow must be a non-empty list of network destinations (got 'http://h/x')",
      );
      expect(inFetch.hint).toContain("it has a path ('/x')");
      const inNetwork = refuse(
        `${HEAD}capabilities:\n  network:\n    allow: ["ftp://files"]\n`,
        'E-CAP-001',
        "invalid network allow entry 'ftp://files': unsupported scheme 'ftp': only http and https URLs are accepted",
      );
      expect(inNetwork.hint).toMatch(/^in capabilities\.network\.allow: /);
      refuse(`${HEAD}capabilities:\n  network:\n    allow: [""]\n`, 'E-CAP-001', "invalid network allow entry '': the entry is empty");
    });
  });

  describe('lifecycle', () => {
    it.each([
      ['forever', "lifecycle.after_task must be exit or sleep (got 'forever')"],
      ['Sleep', "lifecycle.after_task must be exit or sleep (got 'Sleep')"],
      ['true', "lifecycle.after_task must be exit or sleep (got 'true')"],
      ['[exit]', 'lifecycle.after_task must be exit or sleep (got a list)'],
    ])('refuses after_task %s', (value, message) => {
      refuse(`${HEAD}lifecycle:\n  after_task: ${value}\n`, 'E-MAN-003', message);
    });
  });
});

describe('parseManifest: E-CAP-008', () => {
  const sleeping = (...peerLines: string[]) => `${withPeerFiles('root: share', ...peerLines)}lifecycle:\n  after_task: sleep\n`;

  it('refuses a sleeping capsule whose peer_files declares no max_ttl', () => {
    const err = refuse(sleeping(), 'E-CAP-008');
    expect(err.render()).toBe(
      'error[E-CAP-008]: exports.peer_files.max_ttl is not declared, but with lifecycle.after_task: sleep it is required and at most 900s\n' +
        '  hint: declare `max_ttl: 15m` or less under exports.peer_files; a consumer that needs the bytes later should have the operator relaunch the runtime against the workdir and request again',
    );
  });

  it.each([
    ['1h', "exports.peer_files.max_ttl is '1h' (3600s), but with lifecycle.after_task: sleep it is required and at most 900s"],
    ['901', "exports.peer_files.max_ttl is '901' (901s), but with lifecycle.after_task: sleep it is required and at most 900s"],
    ['16m', "exports.peer_files.max_ttl is '16m' (960s), but with lifecycle.after_task: sleep it is required and at most 900s"],
  ])('refuses a sleeping capsule with max_ttl %s, naming the declared value', (ttl, message) => {
    const err = refuse(sleeping(`max_ttl: ${ttl}`), 'E-CAP-008', message);
    expect(err.hint).toContain('15m');
    expect(err.hint).toContain('relaunch');
  });

  it('reports a malformed max_ttl as E-MAN-003 before the lifetime rule', () => {
    refuse(sleeping('max_ttl: 1 hour'), 'E-MAN-003', /^exports\.peer_files\.max_ttl must be a duration/);
  });
});

// ── E-CAP-007 on a real tree ─────────────────────────────────────────────────────────────────────

describe('the E-CAP-007 launch check (checkExportRootsAt)', async () => {
  let base: string;
  let workdir: string;
  let outside: string;

  beforeEach(() => {
    // realpath: the temp dir itself may sit behind a symlink, and messages carry real paths.
    base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'manifest-roots-')));
    workdir = path.join(base, 'workdir');
    outside = path.join(base, 'outside');
    fs.mkdirSync(workdir);
    fs.mkdirSync(path.join(outside, 'sub'), { recursive: true });
  });

  afterEach(() => {
    fs.rmSync(base, { recursive: true, force: true });
  });

  const manifest = (filesRoot: string | null, peerRoot: string | null): Manifest => {
    const lines = [HEAD, 'exports:\n'];
    if (filesRoot !== null) lines.push(`  files: { root: "${filesRoot}", mode: read-only }\n`);
    if (peerRoot !== null) lines.push(`  peer_files: { root: "${peerRoot}" }\n`);
    return parseManifest(lines.join(''));
  };

  it('passes roots that do not exist yet', async () => {
    await expect(checkExportRootsAt(manifest('out/', 'share/deep/er'), workdir)).resolves.toBeUndefined();
  });

  it('passes real directories inside, the workdir itself, and symlinks that stay inside', async () => {
    fs.mkdirSync(path.join(workdir, 'out'));
    fs.mkdirSync(path.join(workdir, 'real-share'));
    fs.symlinkSync('real-share', path.join(workdir, 'share'));
    await expect(checkExportRootsAt(manifest('out/', 'share'), workdir)).resolves.toBeUndefined();
    await expect(checkExportRootsAt(manifest('.', './out'), workdir)).resolves.toBeUndefined();
  });

  it('passes a manifest that declares no roots', async () => {
    await expect(checkExportRootsAt(parseManifest(HEAD), workdir)).resolves.toBeUndefined();
  });

  it('passes a dangling relative symlink root (every request resolves beneath the workdir), refuses a dangling absolute one', async () => {
    fs.symlinkSync('missing', path.join(workdir, 'out'));
    await expect(checkExportRootsAt(manifest('out', null), workdir)).resolves.toBeUndefined();
    // An absolute target is outside as every request sees it, whether or not it exists on the host.
    fs.symlinkSync(path.join(outside, 'missing'), path.join(workdir, 'share'));
    const err = await catchManifestErrorAsync(checkExportRootsAt(manifest(null, 'share'), workdir), 'E-CAP-007');
    expect(err.message).toBe(
      `exports.peer_files.root 'share' resolves to '${path.join(outside, 'missing')}', which is outside the capsule workdir '${workdir}'`,
    );
  });

  it('passes a root caught in a symlink loop: it resolves nowhere, so it cannot lead out', async () => {
    fs.symlinkSync('loop', path.join(workdir, 'loop'));
    await expect(checkExportRootsAt(manifest('loop', 'loop/x'), workdir)).resolves.toBeUndefined();
  });

  it('passes a root the resolver cannot open at all, and a workdir that does not exist yet', async () => {
    // Every request resolves the root again and answers not_found: nothing can leak.
    await expect(checkExportRootsAt(manifest('x'.repeat(300), null), workdir)).resolves.toBeUndefined();
    await expect(checkExportRootsAt(manifest('out', null), path.join(base, 'no-such-workdir'))).resolves.toBeUndefined();
  });

  it('refuses exports.files.root when it is a symlink pointing out', async () => {
    fs.symlinkSync(outside, path.join(workdir, 'out'));
    const err = await catchManifestErrorAsync(checkExportRootsAt(manifest('out/', null), workdir), 'E-CAP-007');
    expect(err.message).toBe(`exports.files.root 'out/' resolves to '${outside}', which is outside the capsule workdir '${workdir}'`);
    expect(err.render()).toMatch(
      /^error\[E-CAP-007\]: exports\.files\.root 'out\/' resolves to .*\n {2}hint: point exports\.files\.root at a directory inside the workdir/,
    );
  });

  it('refuses exports.peer_files.root when it is a symlink pointing out', async () => {
    fs.mkdirSync(path.join(workdir, 'out'));
    fs.symlinkSync('../outside/sub', path.join(workdir, 'share'));
    const err = await catchManifestErrorAsync(checkExportRootsAt(manifest('out', 'share'), workdir), 'E-CAP-007');
    expect(err.message).toBe(`exports.peer_files.root 'share' resolves to '${path.join(outside, 'sub')}', which is outside the capsule workdir '${workdir}'`);
  });

  it('refuses a root that leaves through an intermediate symlink', async () => {
    fs.symlinkSync(outside, path.join(workdir, 'link'));
    const err = await catchManifestErrorAsync(checkExportRootsAt(manifest(null, 'link/sub'), workdir), 'E-CAP-007');
    expect(err.message).toBe(
      `exports.peer_files.root 'link/sub' resolves to '${path.join(outside, 'sub')}', which is outside the capsule workdir '${workdir}'`,
    );
  });

  it('refuses a sibling whose name merely starts with the workdir path', async () => {
    fs.mkdirSync(`${workdir}-evil`);
    fs.symlinkSync(`${workdir}-evil`, path.join(workdir, 'out'));
    const err = await catchManifestErrorAsync(checkExportRootsAt(manifest('out', null), workdir), 'E-CAP-007');
    expect(err.message).toContain(`resolves to '${workdir}-evil'`);
  });

  it('compares real paths when the workdir is reached through a symlink', async () => {
    const viaLink = path.join(base, 'workdir-link');
    fs.symlinkSync(workdir, viaLink);
    fs.mkdirSync(path.join(workdir, 'out'));
    await expect(checkExportRootsAt(manifest('out', null), viaLink)).resolves.toBeUndefined();
    fs.symlinkSync(outside, path.join(workdir, 'share'));
    const err = await catchManifestErrorAsync(checkExportRootsAt(manifest('out', 'share'), viaLink), 'E-CAP-007');
    expect(err.message).toBe(`exports.peer_files.root 'share' resolves to '${outside}', which is outside the capsule workdir '${workdir}'`);
  });
});
