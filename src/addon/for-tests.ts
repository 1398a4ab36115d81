// What only tests and the bench call: never imported by src/ (test/audits/addon-face.test.ts).
import { addon, call } from './load.js';
import { listCall, type ExportCall, type ListOptions, type ListResult, type WorkdirRef } from './export.js';

const binding = addon as {
  list(call: ExportCall & { cancel?: unknown; timeBudgetMs?: number }): Promise<ListResult>;
  exportResolutions(): number;
  setListingCacheMinBytes(bytes: number): void;
};

/** A listing as JS objects, one per entry (the server renders its listings in the addon: listRendered). */
export function listForTests(workdirFd: WorkdirRef, root: string, opts: ListOptions): Promise<ListResult> {
  return call(binding.list(listCall(workdirFd, root, opts)));
}

/** How many times this process resolved a served path in the addon (a read resolves once). */
export function exportResolutionsForTests(): number {
  return binding.exportResolutions();
}

/**
 * The smallest file a listing asks the digest cache for (default limits.listingCachedMinBytes):
 * for tests and the threshold's measurement (bench), never set by the server.
 */
export function setListingCacheMinBytesForTests(bytes: number): void {
  binding.setListingCacheMinBytes(bytes);
}
