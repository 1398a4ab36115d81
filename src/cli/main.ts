#!/usr/bin/env node
// The `resource-plane` bin: the compile cache first (src/cli/compile-cache.ts), then the command,
// loaded only now so that every module it brings in can come from the cache. Below Node 22 it
// refuses first (src/cli/node-version.ts).
import { useCompileCache } from './compile-cache.js';
import { nodeVersionProblem } from './node-version.js';

const tooOld = nodeVersionProblem(process.version);
if (tooOld !== null) {
  process.stderr.write(`${tooOld}\n`);
  process.exit(1);
}
useCompileCache();
const { main } = await import('./program.js');
void main();
