// Lowering (SPEC section 4), as a pure function: decoding once, the lexical refusals, and the
// raw request-target handling the routes rely on.
import { describe, expect, it } from 'vitest';
import { lowerRelpath, percentDecodeOnce, requestPath } from '../../src/paths.js';

const ok = (raw: string, source: 'url' | 'text' = 'url') => {
  const l = lowerRelpath(raw, source);
  return l.ok ? l.relpath : null;
};

describe('percentDecodeOnce', () => {
  it('decodes each %XX once and leaves malformed escapes literal', () => {
    const d = (s: string) => percentDecodeOnce(Buffer.from(s, 'latin1')).toString('latin1');
    expect(d('a%20b')).toBe('a b');
    expect(d('%252e')).toBe('%2e');
    expect(d('%')).toBe('%');
    expect(d('%4')).toBe('%4');
    expect(d('%zz%41')).toBe('%zzA');
    expect(d('100%')).toBe('100%');
    expect(d('%2F')).toBe('/');
  });
});

describe('lowerRelpath', () => {
  it('keeps canonical paths and drops exactly one trailing slash', () => {
    expect(ok('report.md')).toBe('report.md');
    expect(ok('a/b/c.txt')).toBe('a/b/c.txt');
    expect(ok('sub%20dir/a.md')).toBe('sub dir/a.md');
    expect(ok('file/')).toBe('file');
    expect(ok('.hidden')).toBe('.hidden');
    expect(ok('..a')).toBe('..a');
    expect(ok('a..')).toBe('a..');
    expect(ok('%252e%252e')).toBe('%2e%2e');
    expect(ok('caf%C3%A9')).toBe('café');
  });

  it.each([
    '',
    '/',
    '/etc/passwd',
    '//x',
    '%2fetc',
    '..',
    '../x',
    'a/..',
    'a/../b',
    '.',
    './a',
    'a/.',
    'a//b',
    'a//',
    '%2e%2e',
    '%2e%2e%2fx',
    'a%2f..%2fb',
    '%2e',
    'a%00',
    '%00',
    '%ff',
    '%C0%AE',
    '%ED%A0%80',
    '%F4%90%80%80',
  ])('refuses %j', (raw) => {
    expect(ok(raw)).toBeNull();
  });

  it('reports the decoded form for the trace, lossy where bytes are not UTF-8', () => {
    expect(lowerRelpath('..%2Fsecret', 'url').display).toBe('../secret');
    expect(lowerRelpath('%ff', 'url').display).toBe('\uFFFD');
  });

  it('lowers a tool argument the same way (so encoded escapes fail a mint too)', () => {
    expect(ok('report.md', 'text')).toBe('report.md');
    expect(ok('café.md', 'text')).toBe('café.md');
    expect(ok('%2e%2e%2fsecret.md', 'text')).toBeNull();
    expect(ok('../secret.md', 'text')).toBeNull();
    expect(ok('a\uD800b', 'text')).toBeNull();
  });

  it('reads url octets as latin1 so raw non-ASCII bytes are judged as UTF-8', () => {
    expect(ok(Buffer.from('café', 'utf8').toString('latin1'))).toBe('café');
    expect(ok('\xff')).toBeNull();
  });
});

describe('requestPath', () => {
  it('strips the query and fragment and the absolute-form authority', () => {
    expect(requestPath('/resources/files/a?x=1')).toBe('/resources/files/a');
    expect(requestPath('/resources/files/a#frag')).toBe('/resources/files/a');
    expect(requestPath('http://h:1/resources/files/a?q')).toBe('/resources/files/a');
    expect(requestPath('http://h:1')).toBe('/');
    expect(requestPath('/a%3Fb')).toBe('/a%3Fb');
  });
});
