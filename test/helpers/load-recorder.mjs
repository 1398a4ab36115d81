// A module-load recorder for tests (node --import): every module loaded in a process whose
// environment has no confined-launch handoff yet (a launch's first stage, or an unconfined serve)
// is appended to the file LOAD_RECORDER_FILE names, one line each: its URL, a tab, and how it was
// asked for (`import` or `require`). Through module.registerHooks (Node 22.15+), which sees require()
// inside CommonJS packages too, and builtins by their node: URL.
// The confined second stage cannot write there (Landlock), and records nothing by design.
import { appendFileSync } from 'node:fs';
import * as nodeModule from 'node:module';

const file = process.env.LOAD_RECORDER_FILE;
if (file && !process.env.RESOURCE_PLANE_CONFINED_LAUNCH) {
  const record = (url, context) => {
    try {
      appendFileSync(file, `${url}\t${context.conditions?.includes('require') ? 'require' : 'import'}\n`);
    } catch {
      // not ours to fail
    }
  };
  if (typeof nodeModule.registerHooks === 'function') {
    nodeModule.registerHooks({ load: (url, context, next) => (record(url, context), next(url, context)) });
  } else {
    // Node 20 (the ASan suite's): ES module loads only, through the asynchronous hooks, which run
    // on the loader's own thread and so get the file's name in their source.
    const hooks = `
      import { appendFileSync } from 'node:fs';
      export async function load(url, context, next) {
        try { appendFileSync(${JSON.stringify(file)}, url + '\\timport\\n'); } catch {}
        return next(url, context);
      }`;
    nodeModule.register(`data:text/javascript,${encodeURIComponent(hooks)}`);
  }
}
