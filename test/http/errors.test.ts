// The catalogue: every native code maps to a catalogued code, every plane code has the spec's status
// and message, refusals render the same way at each edge, and nothing is parsed back out of text.
import { describe, expect, it } from 'vitest';
import { CATALOGUE, CODES, isPeerPlaneCode, messageFor, NATIVE_TO_CODE, Refusal, renderHttp, renderTool, type Code } from '../../src/codes.js';
import { refusalFromNative } from '../../src/export/export-view.js';
import { NATIVE_CODES, NativeError, type NativeCode } from '../../src/addon/export.js';

describe('error catalogue', () => {
  it('covers every code the addon reports, and nothing the addon does not', () => {
    expect(NATIVE_CODES.length).toBeGreaterThan(0);
    expect([...NATIVE_CODES].sort()).toEqual(Object.keys(NATIVE_TO_CODE).sort());
    for (const code of NATIVE_CODES) {
      const mapped = NATIVE_TO_CODE[code as NativeCode];
      expect(CATALOGUE[mapped]).toBeDefined();
      expect(refusalFromNative(new NativeError(code as NativeCode, 'x', 0)).code).toBe(mapped);
    }
  });

  it('gives the spec status of every code that has one, and none to tool-only codes', () => {
    const status: Record<Code, number | null> = {
      no_resource_plane: 404,
      no_peer_plane: 404,
      not_found: 404,
      outside_root: 403,
      symlink_refused: 403,
      not_a_regular_file: 403,
      too_large: 413,
      method_not_allowed: 405,
      malformed_handle: 400,
      missing_audience: 400,
      handle_not_valid: 403,
      handle_expired: 410,
      io_error: 500,
      bad_request: 400,
      shutting_down: 503,
      over_capacity: 503,
      invalid_argument: null,
      invalid_ttl: null,
      unknown_tool: null,
      peer_not_allowed: null,
      peer_unreachable: null,
      issuer_mismatch: null,
      etag_mismatch: null,
    };
    expect([...CODES].sort()).toEqual(Object.keys(status).sort());
    for (const [code, s] of Object.entries(status)) expect(CATALOGUE[code as Code].status, code).toBe(s);
  });

  it('fills parameters, passes native detail through as data, and fails closed on foreign exceptions', () => {
    expect(messageFor('files', 'too_large', null, { maxBytes: 10 })).toBe('file exceeds the declared exports.files.max_bytes of 10 bytes');
    expect(messageFor('peer', 'too_large', null, { maxBytes: 10 })).toBe('file exceeds the declared exports.peer_files.max_bytes of 10 bytes');
    const io = refusalFromNative(new NativeError('IO_ERROR', 'permission denied', 13));
    expect(io.detail).toBe('permission denied');
    expect(renderHttp('files', io).message).toBe('read failed: permission denied');
    const foreign = refusalFromNative(new Error('/secret/host/path exploded'));
    expect(foreign.code).toBe('io_error');
    expect(renderHttp('files', foreign).message).not.toContain('/secret');
    expect(JSON.parse(renderHttp('peer', new Refusal('handle_not_valid')).body.toString())).toEqual({
      error: 'handle_not_valid',
      message: 'the handle is not valid for this capsule',
    });
  });

  it('never renders a tool-only code as an HTTP status, and renders tool refusals with their sentence', () => {
    const leaked = renderHttp('files', new Refusal('peer_unreachable', 'x'));
    expect([leaked.code, leaked.status]).toEqual(['io_error', 500]);
    expect(renderTool(new Refusal('peer_not_allowed', 'not on the list'))).toEqual({ code: 'peer_not_allowed', message: 'not on the list' });
    expect(renderTool(new Refusal('invalid_ttl')).message).toBe(CATALOGUE.invalid_ttl.messages.tool);
  });

  it('repeats only peer-plane codes from a peer', () => {
    expect(isPeerPlaneCode('handle_expired')).toBe(true);
    expect(isPeerPlaneCode('peer_not_allowed')).toBe(false);
    expect(isPeerPlaneCode('no_resource_plane')).toBe(false);
    expect(isPeerPlaneCode('made_up_code')).toBe(false);
    expect(isPeerPlaneCode('__proto__')).toBe(false);
  });
});
