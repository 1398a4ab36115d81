// `explain-scope`: what a launch would grant, before any session exists (creates nothing).
import { existsSync, realpathSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { type Command, Option } from 'commander';
import { UsageError } from '../../codes.js';
import { checkExportRoots, checkExportRootsAt } from '../../session/checks.js';
import { DEFAULT_MANIFEST_NAME, loadManifest, missingManifest, readManifestBeneath, type KeyCheck } from '../../session/manifest-file.js';
import { parseContainment } from '../../session/options.js';
import type { Manifest } from '../../manifest/model.js';
import * as native from '../../addon/export.js';
import { effectiveGrants, renderExplainScope } from '../../manifest/scope.js';
import { checkResolverChoice, fail, PROGRAM, shortErrors } from '../common.js';

/**
 * `DIR/murmur.yaml` read as serve reads it (beneath the workdir descriptor, no symlink, no FIFO,
 * capped), then the export-root checks through the same descriptor. A workdir that does not exist
 * has no manifest, as for serve.
 */
async function workdirManifest(workdir: string, check: KeyCheck): Promise<Manifest> {
  const requested = resolve(workdir);
  const shown = join(requested, DEFAULT_MANIFEST_NAME);
  if (!existsSync(requested)) {
    throw missingManifest(shown);
  }
  const real = realpathSync(requested);
  const resolver = native.chooseResolver();
  const fd = await native.openDirectory(real);
  try {
    const manifest = await readManifestBeneath(fd, resolver, shown, check);
    await checkExportRoots(manifest, real, fd, resolver);
    return manifest;
  } finally {
    native.closeFd(fd);
  }
}

async function explainScopeCommand(flags: { manifest?: string; workdir?: string; json?: boolean; containment?: string; strict?: boolean }): Promise<void> {
  checkResolverChoice();
  if (flags.manifest === undefined && flags.workdir === undefined) {
    throw new UsageError('explain-scope needs --workdir DIR (reads DIR/murmur.yaml) or --manifest FILE');
  }
  const containment = parseContainment(flags.containment);
  // On stderr, so that --json stays one line of JSON on stdout.
  const check: KeyCheck = { strict: flags.strict, warn: (_fields, message) => process.stderr.write(`warning: ${message}\n`) };
  let manifest: Manifest;
  if (flags.manifest === undefined) {
    manifest = await workdirManifest(flags.workdir!, check);
  } else {
    manifest = loadManifest(flags.manifest, check);
    // The same root checks a launch makes (E-CAP-007), against the workdir the manifest sits in
    // unless told otherwise; nothing is created, and a workdir that does not exist yet passes.
    await checkExportRootsAt(manifest, flags.workdir ?? dirname(resolve(flags.manifest)));
  }
  if (flags.json) process.stdout.write(`${JSON.stringify(effectiveGrants(manifest, containment))}\n`);
  else process.stdout.write(renderExplainScope(manifest, containment));
}

/** The `explain-scope` verb, on the command `cmd`. */
export function register(cmd: Command): void {
  const explain = cmd
    .command('explain-scope')
    .description('what a launch would grant, before any session exists (creates nothing)')
    .option('--workdir <dir>', 'the workdir a launch would use: its murmur.yaml is read as serve reads it, and the export roots are checked against it')
    .option('--manifest <file>', "the manifest to explain instead of <workdir>/murmur.yaml (the workdir then defaults to the manifest's directory)")
    .option('--json', 'print the effective grants as one line of JSON (session_start.effective_grants)')
    .option('--strict', "a likely typo in the runtime's manifest blocks is an error, not a warning")
    .addOption(new Option('--containment <class>', 'the containment class to assume').choices(['advisory', 'scoped', 'sealed']).default('advisory'))
    .addHelpText(
      'after',
      `
Give --workdir, --manifest, or both, as for serve.

Examples:
  ${PROGRAM} explain-scope --workdir ./cap
  ${PROGRAM} explain-scope --manifest ./murmur.yaml --json
  ${PROGRAM} explain-scope --manifest ./murmur.yaml --workdir ./cap --containment sealed`,
    )
    .action((flags) => explainScopeCommand(flags).catch((error) => fail(error, 'explain-scope')));
  shortErrors(explain, 'explain-scope');
}
