#!/usr/bin/env node
// The `resource-plane` bin: the compile cache first (src/cli/compile-cache.ts), then the command,
// loaded only now so that every module it brings in can come from the cache.
import { useCompileCache } from './compile-cache.js';

useCompileCache();
const { main } = await import('./program.js');
void main();
