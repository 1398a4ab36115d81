// A program that uses the package the way its README says, through its one entry point. Compiled
// by test/audits/public-api.test.ts against the built declarations: it must type-check, and the lines
// marked @ts-expect-error must not (internal files are not part of the package's face).
import Fastify from 'fastify';
import {
  CATALOGUE,
  callTool,
  launch,
  openSession,
  parseManifest,
  Refusal,
  renderHttp,
  resourcePlanes,
  routeRawTargets,
  type Code,
  type FetchPeerFileResult,
  type Launched,
  type Manifest,
  type PlaneCode,
  type ShareFileResult,
  type ToolName,
} from 'capsule-resource-plane';

export async function main(): Promise<void> {
  const manifest: Manifest = parseManifest('name: x\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n');
  const launched: Launched = await launch({ workdir: '/tmp/x', manifest, containment: 'sealed', operatorListen: 'unix:/tmp/x.sock' });
  // The tool's name picks its argument and result types: no cast.
  const minted = await callTool(launched.session, 'share-file', { path: 'a', peer: 'localhost:1', ttl: '30s' });
  const handle: string = minted.handle;
  const id: string = minted.handle_id;
  const expires: number = minted.expires_at_ms;
  const asDeclared: ShareFileResult = minted;
  // @ts-expect-error the handle is a string (were the result `any` or `unknown`, this would pass or fail differently)
  const notANumber: number = minted.handle;
  const fetched = await callTool(launched.session, 'fetch-peer-file', { peer: 'localhost:1', handle });
  const landed: FetchPeerFileResult = fetched;
  const size: number = fetched.bytes;
  const generation: number | null = fetched.generation;
  // @ts-expect-error fetch-peer-file's result has no handle
  void fetched.handle;
  // @ts-expect-error no tool has this name
  await callTool(launched.session, 'rm-rf', {});
  // @ts-expect-error share-file takes path and peer, not a handle
  await callTool(launched.session, 'share-file', { peer: 'localhost:1', handle });
  // @ts-expect-error path must be a string
  await callTool(launched.session, 'share-file', { path: 1, peer: 'localhost:1' });
  // @ts-expect-error fetch-peer-file needs the handle
  await callTool(launched.session, 'fetch-peer-file', { peer: 'localhost:1' });
  // A name known only at run time takes arguments checked at run time, and gives either result.
  const chosen = (process.env.TOOL === 'fetch-peer-file' ? 'fetch-peer-file' : 'share-file') as ToolName;
  const either: ShareFileResult | FetchPeerFileResult = await callTool(launched.session, chosen, JSON.parse('{}') as unknown);
  // A refusal is not a result: the call rejects with a Refusal carrying a catalogued code.
  const refused = await callTool(launched.session, 'share-file', { path: '../x', peer: 'localhost:1' }).then(
    () => null,
    (error: unknown) => (error instanceof Refusal ? error.code : null),
  );
  const refusedCode: Refusal['code'] | null = refused;
  void [expires, asDeclared, notANumber, landed, size, generation, either, refusedCode];
  await launched.stop('done');

  const session = await openSession({ workdir: '/tmp/y', manifest, advertisedUrl: 'http://localhost:8080' });
  const app = Fastify({ rewriteUrl: routeRawTargets('/cap') });
  await app.register(resourcePlanes, { session, prefix: '/cap' });
  const served: string = app.resourcePlanes.session.sessionId;
  // @ts-expect-error the plugin takes a session or session options, not a path
  await app.register(resourcePlanes, { workdir: '/tmp/y' });
  void served;

  const code: Code = 'over_capacity';
  const plane: PlaneCode = 'not_found';
  const status: number | null = CATALOGUE[code].status;
  const rendered = renderHttp('files', new Refusal(plane, null));
  void [id, status, rendered.body];
  // @ts-expect-error 'made_up' is not a catalogued code
  const bad: Code = 'made_up';
  void bad;
}
