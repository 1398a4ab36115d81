import { beforeAll, describe, expect, it } from 'vitest';
import { filesManifest, openCapsule, type Capsule } from '../helpers/capsule.js';
import { rawExchange, rawGet } from '../helpers/http.js';
import { codeOf, expectNoSecret, SECRET } from '../helpers/adversary.js';

// ── 7. Request targets ──────────────────────────────────────────────────────────────────────────

describe('request targets', () => {
  let srv: Capsule;
  beforeAll(async () => {
    srv = await openCapsule({
      tree: [
        `secret.txt: ${SECRET}`,
        'out/report.md: hello report',
        'out/sub/a.txt: in sub',
        'out/a;b: semicolon',
        'out/%2e%2e: literal percent name',
        'out/é.txt: e-acute',
      ],
      yaml: filesManifest('out/'),
      containment: 'sealed',
    });
    return () => srv.close();
  });

  const F = '/resources/files/';
  const table: Array<[string, string, string?]> = [
    [`${F}report.md`, 'ok', 'hello report'],
    [`${F}..%2Fsecret.txt`, 'outside_root'],
    [`${F}sub%2F..%2F..%2Fsecret.txt`, 'outside_root'],
    [`${F}sub%2f%2e%2e%2freport.md`, 'outside_root'],
    [`${F}.%2e/secret.txt`, 'outside_root'],
    [`${F}%2e./secret.txt`, 'outside_root'],
    [`${F}%252e%252e/secret.txt`, 'not_found'],
    [`${F}%25%32%65%25%32%65`, 'ok', 'literal percent name'],
    [`${F}%%32%65%%32%65/secret.txt`, 'not_found'],
    [`${F}%C0%AE%C0%AE/secret.txt`, 'outside_root'],
    [`${F}%E0%80%AE%E0%80%AE/secret.txt`, 'outside_root'],
    [`${F}%F0%80%80%AE%F0%80%80%AE/secret.txt`, 'outside_root'],
    [`${F}%C0%AF`, 'outside_root'],
    [`${F}%EF%BC%8E%EF%BC%8E/secret.txt`, 'not_found'],
    [`${F}..%5Csecret.txt`, 'not_found'],
    [`${F}..%5C..%5Csecret.txt`, 'not_found'],
    [`${F}a;b`, 'ok', 'semicolon'],
    [`${F}..;/secret.txt`, 'not_found'],
    [`${F}report.md;.txt`, 'not_found'],
    [`${F}report.md%00.txt`, 'outside_root'],
    [`${F}report.md/`, 'ok', 'hello report'],
    [`${F}report.md//`, 'outside_root'],
    [`${F}%2Freport.md`, 'outside_root'],
    [`${F}%2F%2Fetc%2Fpasswd`, 'outside_root'],
    [`${F}report.md?x=/../../secret.txt`, 'ok', 'hello report'],
    [`${F}report.md%3F/../secret.txt`, 'outside_root'],
    [`${F}%3F`, 'not_found'],
    [`${F}%C3%A9.txt`, 'ok', 'e-acute'],
    [`${F}%E9.txt`, 'outside_root'],
    [`${F}%0D%0AX-Injected:%20yes`, 'not_found'],
    [`${F}%`, 'not_found'],
    [`${F}%2`, 'not_found'],
    [`${F}sub/%2e%2e`, 'outside_root'],
    ['/resources/files;/../secret.txt', 'not_found'],
    ['/resources/files/.;/secret.txt', 'not_found'],
    ['/RESOURCES/files/report.md', 'not_found'],
    ['/resources//files/report.md', 'not_found'],
    ['http://127.0.0.1/resources/files/..%2fsecret.txt', 'outside_root'],
    ['HTTP://x/resources/files/report.md', 'ok', 'hello report'],
    ['http://x@127.0.0.1/resources/files/report.md', 'ok', 'hello report'],
    ['http://x/resources/files/../secret.txt', 'outside_root'],
    // Refused by Node's parser; answered by our clientErrorHandler in the JSON error shape.
    ['http:/x/resources/files/report.md', 'bad_request'],
    [`${F}report.md#/../../secret.txt`, 'ok', 'hello report'],
    ['*', 'not_found'],
  ];
  it.each(table)('%s -> %s', async (target, code, body) => {
    const res = await rawGet(srv.url, target);
    expectNoSecret(res);
    expect(res.headerNames).not.toContain('x-injected');
    expect(codeOf(res)).toBe(code);
    if (body !== undefined) expect(res.body.toString()).toBe(body);
  });

  // Raw bytes the HTTP parser must refuse before any plane sees them.
  it.each([
    ['CR in the target', Buffer.from(`GET ${F}report.md\r.txt HTTP/1.1\r\n`)],
    ['LF in the target', Buffer.from(`GET ${F}report.md\nGET ${F}../secret.txt HTTP/1.1\r\n`)],
    ['NUL in the target', Buffer.concat([Buffer.from(`GET ${F}report.md`), Buffer.from([0]), Buffer.from('x HTTP/1.1\r\n')])],
    ['TAB in the target', Buffer.from(`GET ${F}..\t/secret.txt HTTP/1.1\r\n`)],
    ['raw 0xFF in the target', Buffer.concat([Buffer.from(`GET ${F}`), Buffer.from([0xff]), Buffer.from(' HTTP/1.1\r\n')])],
    ['raw backslash climb', Buffer.from(`GET ${F}..\\..\\secret.txt HTTP/1.1\r\n`)],
    ['raw UTF-8 bytes', Buffer.concat([Buffer.from(`GET ${F}`), Buffer.from('é.txt'), Buffer.from(' HTTP/1.1\r\n')])],
  ])('%s: never the secret, never a crash', async (_name, head) => {
    const bytes = Buffer.concat([head, Buffer.from(`Host: 127.0.0.1\r\nConnection: close\r\n\r\n`)]);
    const responses = await rawExchange(srv.url, bytes);
    for (const r of responses) expectNoSecret(r);
    expect(responses.length).toBeLessThanOrEqual(1);
    if (responses.length === 1 && responses[0]!.status === 200) expect(responses[0]!.body.toString()).not.toContain(SECRET);
    // The server is still up.
    expect((await rawGet(srv.url, `${F}report.md`)).status).toBe(200);
  });

  it('a 4 KiB+ target of dot segments and a target past the header limit', async () => {
    const climb = `${F}${'sub/'.repeat(1100)}${'..%2F'.repeat(1101)}secret.txt`;
    expect(climb.length).toBeGreaterThan(4096);
    expect(codeOf(await rawGet(srv.url, climb))).toBe('outside_root');
    expect(codeOf(await rawGet(srv.url, `${F}${'sub%2F'.repeat(1000)}a.txt`))).toBe('not_found');
    const huge = await rawGet(srv.url, `${F}${'a'.repeat(20_000)}`);
    expect([404, 414, 431, 400]).toContain(huge.status);
    expectNoSecret(huge);
  });
});
