// Fills the package's compile cache (src/cli/compile-cache.ts) with every module a launch loads,
// by importing them as serve would, unconfined. Run by `npm run build`, `prepare` and `install`;
// a failure (no dist/ yet, a read-only install) is said in one line and never fails the step.
import { existsSync, mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const dist = new URL('../dist/cli/compile-cache.js', import.meta.url);
try {
  if (!existsSync(fileURLToPath(dist))) process.exit(0); // before the first build: nothing to cache
  const { COMPILE_CACHE_DIR, compileCacheMissing, useCompileCache, flushCompileCache } = await import(dist.href);
  // Before the directory is made: a Node without the cache would leave it empty.
  const missing = compileCacheMissing();
  if (missing !== null) throw new Error(missing);
  // Written as nobody else may write it: compile-cache.ts refuses a directory that is.
  process.umask(0o022);
  mkdirSync(COMPILE_CACHE_DIR, { recursive: true, mode: 0o755 });
  const problem = useCompileCache();
  if (problem !== null) throw new Error(problem);
  // What a launch loads, both stages (importing them runs nothing): the command, the server, the
  // logger, the MCP control and the operator client.
  const modules = [
    'cli/program.js',
    'launch/launch.js',
    'cli/logger.js',
    'limits.js',
    'http/limited-server.js',
    'http/metrics.js',
    'tools/control.js',
    'cli/client.js',
  ];
  for (const m of modules) await import(new URL(`../dist/${m}`, import.meta.url).href);
  // Loaded only when needed: the manifest's parser, prom-client (metrics on), Fastify's pino glue.
  await import('yaml');
  await import('prom-client');
  const { default: Fastify } = await import('fastify');
  const { default: pino } = await import('pino');
  await Fastify({ loggerInstance: pino({ level: 'silent' }) }).close();
  flushCompileCache();
} catch (error) {
  process.stderr.write(`capsule-resource-plane: the compile cache was not filled (${error?.message ?? error}); start-up is slower, nothing else changes\n`);
}
