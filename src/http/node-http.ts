// node:http's values, required rather than imported: an ES import makes Node build the module's
// ESM facade, which reads every export, and the WebSocket getters among them load Node's bundled
// undici and compile its llhttp (about 10 ms of every start-up, for classes this server never uses).
import { createRequire } from 'node:module';

const http = createRequire(import.meta.url)('node:http') as typeof import('node:http');

export const { createServer, ServerResponse, METHODS, STATUS_CODES } = http;
/** The class's instance type, under the same name as the value (as the ES import gave both). */
export type ServerResponse = import('node:http').ServerResponse;
