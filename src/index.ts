// The package's public face: everything a runtime or an embedding program may import. Internal
// modules are not exported (package.json's `exports` map points here only).
export { launch, type LaunchOptions, type Launched } from './launch/launch.js';
export { openSession, type SessionOptions } from './session/open-session.js';
export { Session, type ToolName } from './session/session.js';
export { bind, serve, type Listener, type ListenAddress, type RunningServer } from './http/listener.js';
export { LIMITS, DRAIN_TIMEOUT_MS } from './limits.js';
export { buildApp, type AppOptions } from './http/app.js';
export { createMetrics, DURATION_BUCKETS, type Metrics, type MetricsSources } from './http/metrics.js';
export { resourcePlanes, ALL_PLANES, type PlanesOptions, type PlaneSet, type ResourcePlanesDecoration } from './http/plugin.js';
export { Admission } from './http/admission.js';
export { answerConnect } from './http/connect.js';
export { routeRawTargets } from './http/targets.js';
export { callTool, toolDefinitions, shareFile, fetchPeerFile, type ToolDefinition } from './tools/index.js';
export type { ShareFileInput, ShareFileResult, ShareFileOptions } from './tools/share-file.js';
export type { FetchPeerFileInput, FetchPeerFileResult, FetchPeerFileOptions } from './tools/fetch-peer-file.js';
export {
  CATALOGUE,
  CODES,
  Refusal,
  UsageError,
  isCode,
  messageFor,
  renderHttp,
  renderTool,
  type Code,
  type PlaneCode,
  type ServerCode,
  type ToolCode,
  type PeerStatusCode,
  type CatalogueRow,
  type Context,
} from './codes.js';
export { parseManifest, type Manifest, type FilesExport, type PeerFilesExport } from './manifest/model.js';
export { ManifestError, type ManifestErrorCode } from './manifest/diagnostics.js';
export type { Destination, Target } from './manifest/destinations.js';
export { effectiveGrants, renderExplainScope, RUNTIME_WRITES, type EffectiveGrants, type RuntimeWrite } from './manifest/scope.js';
export { CONTAINMENT_CLASSES, type Containment } from './wire.js';
