// A program that uses the package the way its README says, through its one entry point. Compiled
// by test/public-api.test.ts against the built declarations: it must type-check, and the lines
// marked @ts-expect-error must not (internal files are not part of the package's face).
import Fastify from 'fastify';
import {
  CATALOGUE, callTool, launch, openSession, parseManifest, planesFrameworkErrors, Refusal, renderHttp, resourcePlanes,
  type Code, type Launched, type Manifest, type PlaneCode, type ShareFileResult,
} from 'capsule-resource-plane';

export async function main(): Promise<void> {
  const manifest: Manifest = parseManifest('name: x\nversion: "1"\nexports:\n  files:\n    root: out/\n    mode: read-only\n');
  const launched: Launched = await launch({ workdir: '/tmp/x', manifest, containment: 'sealed', operatorListen: 'unix:/tmp/x.sock' });
  const minted = (await callTool(launched.session, 'share-file', { path: 'a', peer: 'localhost:1' })) as unknown as ShareFileResult;
  const id: string = minted.handle_id;
  await launched.stop('done');

  const session = await openSession({ workdir: '/tmp/y', manifest, advertisedUrl: 'http://localhost:8080' });
  const app = Fastify({ frameworkErrors: planesFrameworkErrors(session) });
  await app.register(resourcePlanes, { session });

  const code: Code = 'over_capacity';
  const plane: PlaneCode = 'not_found';
  const status: number | null = CATALOGUE[code].status;
  const rendered = renderHttp('files', new Refusal(plane, null));
  void [id, status, rendered.body];
  // @ts-expect-error 'made_up' is not a catalogued code
  const bad: Code = 'made_up';
  void bad;
}
