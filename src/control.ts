// Placeholder replaced by the MCP control channel (issue 5).
import type { Launched } from './launch.js';
export async function runControl(_l: Launched, _ready: object, _onClose: () => void): Promise<void> {
  throw new Error('--control stdio is not available in this build');
}
