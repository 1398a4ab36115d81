// Model-based properties of the operator plane, in process: for generated trees and generated
// request paths, under every containment class and both resolvers, ExportView's answer to a read
// (code, and the bytes when ok), to a stat (the mint's check) and to a listing equals the reference
// model's (test/fuzz/model.ts), and no byte of a file outside the root is ever returned.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { Refusal } from '../../src/codes.js';
import { ExportView } from '../../src/export/export-view.js';
import * as native from '../../src/addon/export.js';
import { tempDir } from '../helpers/tree.js';
import { describeTree, show } from './describe.js';
import * as model from './model.js';
import { requestArb, rawRequest } from './requests.js';
import { fuzzIt, guard, guardSync } from './runner.js';
import { BIG_MAX_BYTES } from './thresholds.js';
import { drain, listEntries } from '../helpers/body.js';
import {
  compileTree,
  coverageTree,
  materialise,
  MAX_BYTES,
  prepareWorkdir,
  removeWorkdir,
  ROOT_SPELLINGS,
  SECRET_MARK,
  treeArb,
  type Workdir,
} from './trees.js';
import { sha256Hex } from '../helpers/http.js';
import { assertNoSecret } from '../helpers/secrets.js';

const CLASSES: model.Containment[] = ['sealed', 'advisory', 'scoped'];
const RESOLVERS: native.ResolverKind[] = native.openat2Available() ? ['openat2', 'walk'] : ['walk'];

let wd: Workdir;
let workdirFd: number;

beforeAll(async () => {
  wd = prepareWorkdir(tempDir('rp-fuzz-view-'));
  workdirFd = await native.openDirectory(wd.workdir);
});

afterAll(() => {
  native.closeFd(workdirFd);
  removeWorkdir(wd);
}, 600_000);

async function once<T>(run: () => Promise<T>): Promise<{ code: string; value?: T; detail?: string | null }> {
  try {
    return { code: 'ok', value: await run() };
  } catch (error) {
    if (error instanceof Refusal) return { code: String(error.code), detail: error.detail };
    throw error;
  }
}

// openat2's EAGAIN under a rename storm anywhere on the host is no longer an answer (the walk takes
// over after the retries, test/fuzz/regressions.test.ts), so nothing here asks twice.
async function outcome<T>(run: () => Promise<T>): Promise<{ code: string; value?: T; detail?: string | null }> {
  return once(run);
}

const noSecret = (bytes: Buffer, where: string) => assertNoSecret(bytes, where, { mark: SECRET_MARK, contents: wd.secrets });

describe('lowering a tool argument (share-file path), against the model', () => {
  // A tool's path is a JS string: refused unless well-formed, otherwise lowered like the URL form
  // from its UTF-8 bytes (so `%2e%2e` is an escape on either route).
  const units = [
    'a',
    'b',
    '.',
    '..',
    '/',
    '%',
    '2e',
    '2E',
    '2f',
    '%2e',
    '%2f',
    '%2F',
    '%00',
    '\0',
    '\\',
    '\ufeff',
    '\u202e',
    '\ud800',
    '\udc00',
    '\ud83d\ude00',
    'é',
    '%c0%ae',
    '%ff',
    '%EF%BB%BF',
    ' ',
    '%25',
    '%%',
  ];
  fuzzIt({
    name: 'view-lower-text',
    // Invariant: a tool's text path lowers to exactly the model's relpath, or is refused outside_root.
    file: import.meta.filename,
    runs: 2000,
    property: () =>
      fc.property(
        fc.oneof(
          fc.array(fc.constantFrom(...units), { maxLength: 12 }).map((a) => a.join('')),
          fc.string({ unit: 'binary', maxLength: 12 }),
        ),
        guardSync((text: string) => {
          const view = new ExportView({ workdirFd: () => -1, root: 'out', maxBytes: 1, containment: 'sealed', resolver: 'walk' });
          const components = text.isWellFormed() ? model.lower(Buffer.from(text, 'utf8').toString('latin1')) : null;
          let got: string | null;
          try {
            got = view.lower(text, 'text');
          } catch (error) {
            if (!(error instanceof Refusal) || error.code !== 'outside_root') throw error;
            got = null;
          }
          expect(got, JSON.stringify(text)).toBe(components === null ? null : model.textOf(components.join('/')));
        }),
      ),
  });
});

describe('operator plane, in process, against the reference model', () => {
  fuzzIt({
    name: 'view-read-list',
    file: import.meta.filename,
    runs: 40,
    // Every kind of entry and every size threshold, under both ceilings, in every run.
    examples: () => {
      const { spec, nodes } = coverageTree();
      const plain = Array.from({ length: nodes }, (_, node) => ({ base: { node }, transforms: [] }));
      return [
        [spec, plain, MAX_BYTES],
        [spec, plain, BIG_MAX_BYTES],
      ];
    },
    // Invariant: a read's code and bytes, a stat's code and a listing's entries equal the model's, and nothing outside the root is served.
    property: () =>
      fc.asyncProperty(
        treeArb,
        fc.array(requestArb, { minLength: 1, maxLength: 24 }),
        fc.constantFrom(MAX_BYTES, MAX_BYTES, MAX_BYTES, BIG_MAX_BYTES),
        guard(async (spec, requests, maxBytes) => {
          const tree = compileTree(spec, wd);
          materialise(tree, wd);
          // The generated requests, then every entry of the tree asked for plainly (these pass lowering).
          const step = Math.max(1, Math.ceil(tree.paths.length / 8));
          const plain = tree.paths.flatMap((_, node) => (node % step === 0 ? [{ base: { node }, transforms: [] }] : []));
          const raws = [...requests, ...plain].map((r) => rawRequest(r, tree.paths));
          const root = ROOT_SPELLINGS[spec.rootSpelling % ROOT_SPELLINGS.length]!;
          // Rendered once per tree: labels are built for every check, and a deep tree renders slowly.
          let rendered: string | undefined;
          const treeText = () => (rendered ??= describeTree(tree));
          for (const resolver of RESOLVERS) {
            for (const containment of CLASSES) {
              const view = new ExportView({ workdirFd: () => workdirFd, root, maxBytes, containment, resolver });
              const where = (what: string) => `${what} under ${containment}/${resolver}, root '${root}', max_bytes ${maxBytes}\ntree:\n${treeText()}`;
              for (const raw of raws) {
                const expected = model.read(tree.root, raw, containment, maxBytes);
                // A body above the streaming threshold is drained as the wire would send it.
                const got = await outcome(async () => {
                  const body = await view.read(view.lower(raw, 'url'));
                  return { sha256: body.sha256, bytes: (await drain(body))! };
                });
                const label = where(`read '${show(raw)}'`);
                // The refusal's detail (an io_error's errno) goes in the message: a rare one must say what it was.
                expect(got.code, got.detail ? `${label}\ndetail: ${got.detail}` : label).toBe(expected.code);
                if (got.value) {
                  noSecret(got.value.bytes, label);
                  expect(got.value.sha256, label).toBe(sha256Hex(got.value.bytes));
                }
                if (expected.code === 'ok') expect(got.value!.bytes.equals(expected.bytes), label).toBe(true);
                // The mint's check: the same resolution, no size ceiling.
                const stat = await outcome(async () => view.stat(view.lower(raw, 'url')));
                expect(stat.code, where(`stat '${show(raw)}'${stat.detail ? ` (detail: ${stat.detail})` : ''}`)).toBe(
                  expected.code === 'too_large' ? 'ok' : expected.code,
                );
              }
              const expectedList = model.list(tree.root, containment);
              const label = where('list');
              // The listing equals the model's, entry for entry; a secret listed fails at once.
              const listed = await outcome(() => listEntries(view));
              for (const e of listed.value ?? []) {
                if (wd.secrets.some((sec) => sha256Hex(sec) === e.sha256)) throw new Error(`${label}: a secret's digest was listed as ${e.path}`);
              }
              const listLabel = listed.detail ? `${label}\ndetail: ${listed.detail}` : label;
              if (!Array.isArray(expectedList)) {
                expect(listed.code, listLabel).toBe(expectedList.code);
              } else {
                expect(listed.code, listLabel).toBe('ok');
                const entries = listed.value!;
                expect(
                  entries.map((e) => e.path),
                  label,
                ).toEqual(expectedList.map((e) => e.path));
                entries.forEach((e, i) => {
                  const m = expectedList[i]!;
                  expect(e.size, `${label}: size of ${e.path}`).toBe(m.content.length);
                  expect(e.sha256, `${label}: sha256 of ${e.path}`).toBe(sha256Hex(m.content));
                });
              }
            }
          }
        }),
      ),
  });
});
