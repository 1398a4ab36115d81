// A module-load recorder for tests (node --import): every module the ESM loader loads in a process
// whose environment has no confined-launch handoff yet (a launch's first stage) is appended, one
// URL a line, to the file LOAD_RECORDER_FILE names. The confined second stage cannot write there
// (Landlock), and records nothing by design.
import { register } from 'node:module';

if (process.env.LOAD_RECORDER_FILE && !process.env.RESOURCE_PLANE_CONFINED_LAUNCH) {
  const hooks = `
    import { appendFileSync } from 'node:fs';
    const file = ${JSON.stringify(process.env.LOAD_RECORDER_FILE)};
    export async function load(url, context, next) {
      try { appendFileSync(file, url + '\\n'); } catch {}
      return next(url, context);
    }`;
  register(`data:text/javascript,${encodeURIComponent(hooks)}`);
}
