// What the planes' handlers share for one registration of the plugin, and which planes a listener
// serves: kept apart from plugin.ts so that the handlers (files.ts, redeem.ts) import nothing above them.
import type { Session } from '../session/session.js';
import type { Metrics } from './metrics.js';

/**
 * Which planes a listener serves. With a separate operator listener, the peer listener serves the
 * peer plane and the card only, and the operator listener the operator plane only.
 */
export interface PlaneSet {
  files: boolean;
  peer: boolean;
}

export const ALL_PLANES: Readonly<PlaneSet> = Object.freeze({ files: true, peer: true });

/** What the planes' handlers share for one registration. */
export interface PlaneContext {
  session: Session;
  metrics?: Metrics;
  /**
   * Whether a read may use a buffer a finished response gave back. Only where no hook can keep a
   * payload past its response (the CLI's app): a host's onSend hook may hold the Buffer it is
   * handed, and a reused one would later hold another file's bytes.
   */
  reuseBuffers: boolean;
}
