// The agent card (SPEC section 7) at /.well-known/agent-card.json, in the A2A shape, so that a peer
// minting for this capsule derives the same audience this capsule asserts when it redeems.
import type { Session } from '../session/session.js';
import { CAPSULE_EXTENSION_URI } from '../wire.js';

export function agentCard(session: Session): Record<string, unknown> {
  const planes: string[] = [];
  if (session.manifest.files) planes.push('files');
  if (session.manifest.peerFiles) planes.push('peer_files');
  return {
    name: session.manifest.name,
    description: `Murmur capsule '${session.manifest.name}' (resource plane)`,
    version: session.manifest.version,
    supportedInterfaces: [{ url: session.advertisedUrl, protocolBinding: 'JSONRPC', protocolVersion: '0.3' }],
    capabilities: {
      extensions: [
        {
          uri: CAPSULE_EXTENSION_URI,
          description: 'capsule resource planes and session identity',
          required: false,
          params: { planes, sessionId: session.sessionId },
        },
      ],
    },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [],
  };
}
