// The error catalogue: every native code maps to a wire code, every wire code has a status and a
// message on the planes it belongs to, and the messages are the spec's.
import { describe, expect, it } from 'vitest';
import { CATALOGUE, fromNative, messageFor, NATIVE_TO_WIRE, PlaneError, type WireCode } from '../src/errors.js';
import { NATIVE_CODES, NativeError, type NativeCode } from '../src/native.js';

describe('error catalogue', () => {
  it('covers every code the addon reports, and nothing the addon does not', () => {
    expect(NATIVE_CODES.length).toBeGreaterThan(0);
    expect([...NATIVE_CODES].sort()).toEqual(Object.keys(NATIVE_TO_WIRE).sort());
    for (const code of NATIVE_CODES) {
      const wire = NATIVE_TO_WIRE[code as NativeCode];
      expect(CATALOGUE[wire]).toBeDefined();
      expect(fromNative('files', new NativeError(code as NativeCode, 'x', 0), 5).code).toBe(wire);
    }
  });

  it('gives the spec status of every wire code', () => {
    const status: Record<WireCode, number> = {
      no_resource_plane: 404, no_peer_plane: 404, not_found: 404, outside_root: 403, symlink_refused: 403,
      not_a_regular_file: 403, too_large: 413, method_not_allowed: 405, malformed_handle: 400,
      missing_audience: 400, handle_not_valid: 403, handle_expired: 410, io_error: 500,
    };
    expect(Object.keys(CATALOGUE).sort()).toEqual(Object.keys(status).sort());
    for (const [code, s] of Object.entries(status)) expect(new PlaneError('files', code as WireCode).status).toBe(s);
  });

  it('fills parameters and fails closed on foreign exceptions', () => {
    expect(messageFor('files', 'too_large', { maxBytes: 10 })).toBe('file exceeds the declared exports.files.max_bytes of 10 bytes');
    expect(messageFor('peer', 'too_large', { maxBytes: 10 })).toBe('file exceeds the declared exports.peer_files.max_bytes of 10 bytes');
    expect(fromNative('files', new NativeError('IO_ERROR', 'permission denied', 13), 1).message).toBe('read failed: permission denied');
    const foreign = fromNative('files', new Error('/secret/host/path exploded'), 1);
    expect(foreign.code).toBe('io_error');
    expect(foreign.message).not.toContain('/secret');
    expect(JSON.parse(new PlaneError('peer', 'handle_not_valid').body().toString())).toEqual({
      error: 'handle_not_valid',
      message: 'the handle is not valid for this capsule',
    });
  });
});
