import { defineConfig } from 'vitest/config';

// Tests run on a real filesystem and real sockets; forks isolate native state and fds per file.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    // Two files at a time even on two cores (vitest's default leaves one core free): the suite is
    // mostly sockets, child processes and sleeps, and waits half as long this way. Nothing a test
    // spawns may be rebuilt under another test's feet (test/helpers/pack.ts packs a copy).
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
