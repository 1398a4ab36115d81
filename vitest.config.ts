import { defineConfig } from 'vitest/config';

// Tests run on a real filesystem and real sockets; forks isolate native state and fds per file.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
