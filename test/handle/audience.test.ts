/**
 * The audience string: derived from a peer's agent card at mint, asserted from this capsule's
 * own name and advertised URL at redeem, and the same string either way.
 */
import { describe, expect, it } from 'vitest';
import { audienceFromCard, ownAudience } from '../../src/handle/audience.js';

const NO_NAME = "the peer's agent card carries no 'name'";
const NO_URL = "the peer's agent card has no 'supportedInterfaces' entry " + "with 'protocolBinding' JSONRPC and a 'url'";

function card(name: unknown, supportedInterfaces: unknown): Record<string, unknown> {
  return { name, supportedInterfaces };
}

const jsonrpc = (url: unknown) => [{ url, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }];

/** The card this capsule publishes (SPEC §7), reduced to the fields an audience reads. */
function publishedCard(name: string, advertisedUrl: string): Record<string, unknown> {
  return {
    name,
    description: 'x',
    version: '0.1.0',
    supportedInterfaces: [{ url: advertisedUrl, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }],
    capabilities: {},
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [],
  };
}

describe('audienceFromCard', () => {
  it("comes from the peer's own card", () => {
    expect(audienceFromCard(card('Reporter', jsonrpc('http://localhost:41234/')))).toBe('reporter@localhost:41234');
  });

  it('strips the scheme, cuts at the first slash, trims the name and lowercases', () => {
    const cases: [unknown, unknown, string][] = [
      ['Reporter', 'https://Host.Example:8443/a2a/v1', 'reporter@host.example:8443'],
      ['  Reporter  ', 'http://127.0.0.1:41234', 'reporter@127.0.0.1:41234'],
      ['reporter', 'localhost:41234', 'reporter@localhost:41234'],
      ['reporter', 'localhost:41234/path', 'reporter@localhost:41234'],
      ['Ünïcode', 'http://[::1]:9/', 'ünïcode@[::1]:9'],
    ];
    for (const [name, url, expected] of cases) {
      expect(audienceFromCard(card(name, jsonrpc(url)))).toBe(expected);
    }
  });

  it('uses the first JSONRPC interface, skipping other bindings', () => {
    const interfaces = [
      { url: 'https://grpc:1', protocolBinding: 'GRPC', protocolVersion: '1.0' },
      { url: 'http://first:2/', protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
      { url: 'http://second:3/', protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
    ];
    expect(audienceFromCard(card('a', interfaces))).toBe('a@first:2');
  });

  it('refuses a card without a name or a JSONRPC url', () => {
    const refused: unknown[] = [
      { name: 'a' },
      card('a', []),
      card('a', [{ url: 'https://localhost:1', protocolBinding: 'GRPC', protocolVersion: '1.0' }]),
      card('a', jsonrpc('')),
      card('a', jsonrpc('   ')),
      card('a', jsonrpc('http://')),
      card('a', jsonrpc(42)),
      card('a', [{ protocolBinding: 'JSONRPC' }]),
      card('a', [{ url: 'http://x:1', protocolBinding: 'jsonrpc' }]),
      card('a', { url: 'http://x:1', protocolBinding: 'JSONRPC' }),
      { supportedInterfaces: jsonrpc('http://localhost:1') },
      card('', jsonrpc('http://localhost:1')),
      card('   ', jsonrpc('http://localhost:1')),
      card(7, jsonrpc('http://localhost:1')),
      'not an object',
      null,
      undefined,
      [],
      { name: 'a', url: 'localhost:1' },
    ];
    for (const candidate of refused) {
      expect(() => audienceFromCard(candidate), JSON.stringify(candidate)).toThrow(Error);
    }
  });

  it('names what the card lacks', () => {
    expect(() => audienceFromCard({ url: 'localhost:1' })).toThrow(NO_NAME);
    expect(() => audienceFromCard('not an object')).toThrow(NO_NAME);
    expect(() => audienceFromCard({ name: 'a', url: 'localhost:1' })).toThrow(NO_URL);
    let message = '';
    try {
      audienceFromCard(card('a', []));
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toBe(NO_URL);
    expect(message).toContain("'supportedInterfaces' entry with 'protocolBinding' JSONRPC");
  });
});

describe('ownAudience', () => {
  it('matches what a peer derives from this capsule’s card', () => {
    for (const url of ['localhost:41234', 'http://127.0.0.1:41234', 'http://LocalHost:41234/']) {
      expect(ownAudience('Reporter', url)).toBe(audienceFromCard(publishedCard('Reporter', url)));
    }
    expect(ownAudience('Reporter', 'localhost:41234')).toBe('reporter@localhost:41234');
    expect(ownAudience(' Reporter ', 'http://localhost:41234')).toBe('reporter@localhost:41234');
  });
});
