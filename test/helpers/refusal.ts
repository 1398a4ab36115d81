// The refusal a tool call ends in: resolves with its Refusal (src/codes.ts), rethrows any other
// error, and throws when the call succeeded, so a test that expects a refusal cannot pass on a success.
import { Refusal } from '../../src/codes.js';

export async function refusal(call: Promise<unknown> | (() => Promise<unknown>)): Promise<Refusal> {
  try {
    await (typeof call === 'function' ? call() : call);
  } catch (error) {
    if (error instanceof Refusal) return error;
    throw error;
  }
  throw new Error('expected a Refusal');
}
