// A raw peer's answer to GET /.well-known/agent-card.json: a card whose capsule extension names
// `sessionId` as the handle's issuer (fetch-peer-file sends a token only to its issuer).
export function agentCardAnswer(port: number, sessionId: string): string {
  const card = JSON.stringify({
    name: 'peer',
    supportedInterfaces: [{ url: `http://127.0.0.1:${port}`, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }],
    capabilities: { extensions: [{ uri: 'urn:murmur:capsule:v1', params: { planes: ['peer_files'], sessionId } }] },
  });
  return `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(card)}\r\nconnection: close\r\n\r\n${card}`;
}
