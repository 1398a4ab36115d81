// npm commands that need the registry, for the few tests that install a package the way a user
// would (the packed tarball's dependencies, a second Fastify release). On a machine that cannot
// reach the registry, such a test must not fail the suite, nor pass silently: it skips, and says
// why on stderr. npm is told to take what its cache has first (--prefer-offline: a `npm ci` of this
// checkout left every locked tarball there) and to give up on the network at once (no retries), so
// an unreachable registry costs seconds, not npm's minute of retries.
import { spawnSync } from 'node:child_process';

/** npm's words for "the network said no", as opposed to a real install failure. */
const UNREACHABLE = /\b(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ECONNRESET|ENETUNREACH|EHOSTUNREACH|ENOTCACHED|ERR_SOCKET_TIMEOUT)\b/;

export type NpmOutcome = { ok: true; stdout: string; stderr: string } | { ok: false; reason: string };

/**
 * Runs `npm ...args` in `cwd`. A failure for want of the registry is `{ ok: false, reason }`;
 * any other failure throws, as before.
 */
export function npmNeedingRegistry(args: string[], cwd: string): NpmOutcome {
  const r = spawnSync('npm', [...args, '--prefer-offline', ...NO_RETRIES], { cwd, encoding: 'utf8' });
  if (r.status === 0) return { ok: true, stdout: r.stdout, stderr: r.stderr };
  const output = `${r.stdout}${r.stderr}`;
  // npm does not always say the network failed (a peer dependency whose metadata could not be
  // fetched is reported as ERESOLVE, `fastify@undefined`): ask the registry itself.
  const unreachable = registryUnreachable();
  if (unreachable) return { ok: false, reason: `npm ${args.filter((a) => !a.startsWith('-')).join(' ')} needs the registry, and ${unreachable}` };
  throw new Error(`npm ${args.join(' ')} failed (status ${r.status}): ${output}`);
}

const NO_RETRIES = ['--fetch-retries=0', '--fetch-timeout=15000'];

/** Why the registry cannot be used (`http://127.0.0.1:9 did not answer (ECONNREFUSED)`), or null. */
function registryUnreachable(): string | null {
  const ping = spawnSync('npm', ['ping', ...NO_RETRIES], { encoding: 'utf8' });
  if (ping.status === 0) return null;
  const output = `${ping.stdout}${ping.stderr}`;
  const registry = process.env.npm_config_registry ?? 'the configured registry';
  return `${registry} did not answer (${UNREACHABLE.exec(output)?.[1] ?? `npm ping exited ${ping.status}`})`;
}

/** Skips the running test with `reason`, printed so that a skip is never silent. */
export function skipFor(ctx: { skip: (note?: string) => void }, reason: string): void {
  process.stderr.write(`skipped: ${reason}\n`);
  ctx.skip(reason);
}
