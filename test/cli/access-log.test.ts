// The access line's fast path (AccessLog.completed, and logTarget's plain-ASCII shortcut) writes
// exactly what the generic path writes for the same fields: the shape operators parse is pinned by
// the slow path, so the fast one may not drift from it.
import { describe, expect, it } from 'vitest';
import { AccessLog } from '../../src/cli/logger.js';
import { percentDecodeOnce } from '../../src/paths.js';
import { logTarget } from '../../src/http/targets.js';
import { redactHandles } from '../../src/redact.js';

function capture(): { lines: string[]; log: AccessLog } {
  const lines: string[] = [];
  const log = new AccessLog({ write: (line: string) => lines.push(line) }, ',"pid":42', 30).child({ session_id: 's-1' });
  return { lines, log };
}

const withoutTime = (line: string) => line.replace(/"time":\d+,/, '"time":0,');

describe('AccessLog.completed', () => {
  const cases = [
    { reqId: 'req-1', method: 'GET', url: '/resources/files/a.txt', statusCode: 200, responseTime: 0.123, bytes: 1024 },
    { reqId: 'r"\\\n', method: 'M\u0001', url: '/x/"\\\u0000\u007f\u2028é€😀', statusCode: 404, responseTime: 12, bytes: 0 },
    { reqId: '', method: '', url: '', statusCode: 0, responseTime: Number.NaN, bytes: Number.POSITIVE_INFINITY },
    { reqId: 'req-2', method: 'GET', url: '/a', statusCode: 200, responseTime: 1e21, bytes: -0 },
  ];

  it.each(cases)('writes the line info() writes for the same fields ($reqId)', (f) => {
    const fast = capture();
    const slow = capture();
    fast.log.completed('info', f);
    slow.log.info(
      { reqId: f.reqId, req: { method: f.method, url: f.url }, res: { statusCode: f.statusCode }, responseTime: f.responseTime, bytes: f.bytes },
      'request completed',
    );
    expect(fast.lines).toHaveLength(1);
    expect(withoutTime(fast.lines[0]!)).toBe(withoutTime(slow.lines[0]!));
    expect(JSON.parse(fast.lines[0]!)).toMatchObject({ level: 30, pid: 42, session_id: 's-1', msg: 'request completed' });
  });

  it('writes nothing below its threshold, and a debug line at debug', () => {
    const lines: string[] = [];
    const info = new AccessLog({ write: (l: string) => lines.push(l) }, '', 30);
    info.completed('debug', cases[0]!);
    expect(lines).toEqual([]);
    const debug = new AccessLog({ write: (l: string) => lines.push(l) }, '', 20);
    debug.completed('debug', cases[0]!);
    expect(JSON.parse(lines[0]!).level).toBe(20);
  });
});

describe('logTarget', () => {
  // The generic path, for every target: decoded once from its latin1 bytes, then redacted.
  const generic = (raw: string) => redactHandles(percentDecodeOnce(Buffer.from(raw, 'latin1')).toString('utf8'));

  it('gives what the generic path gives, for plain targets and every other kind', () => {
    const targets = [
      '/resources/files/a.txt',
      '/',
      '',
      '/a b',
      "/~!$&'()*+,;=:@",
      '/%2e%2e/x',
      '/a%',
      '/a%zz',
      '/%C3%A9',
      '/é',
      '/\u00ff',
      '/\u0000',
      '/\t',
      '/\u007f',
      '/peer/handles/mh1.abc.def',
      '/peer/handles/mh1.%61bc.def',
    ];
    // Every single character 0..255 in a plain target.
    for (let c = 0; c < 256; c++) targets.push(`/x${String.fromCharCode(c)}y`);
    for (const t of targets) expect(logTarget(t), JSON.stringify(t)).toBe(generic(t));
  });
});
