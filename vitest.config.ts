import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    reporters: ['default', './test/support/summary-reporter.ts'],
    projects: [
      {
        test: {
          name: 'unit',
          include: ['crds/**/*.test.ts', 'common/**/*.test.ts', 'operator/**/*.test.ts', 'sidecar/**/*.test.ts', 'plugin/**/*.test.ts', 'scripts/**/*.test.ts', 'test/lint/**/*.test.ts', 'test/bench/**/*.test.ts', 'test/soak/**/*.test.ts'],
          environment: 'node',
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts', 'test/e2e/**/*.test.ts'],
          environment: 'node',
          globalSetup: ['test/harness/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 600_000,
          // One control plane and one Redis serve every file; files run one after another
          // so tests that stop Redis or restart the API server cannot disturb each other.
          fileParallelism: false,
        },
      },
    ],
  },
});
