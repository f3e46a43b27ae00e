import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * The layering of docs/architecture.md#folders, enforced: each folder may import only the
 * folders below it (sidecar/ and operator/ -> common/ -> crds/), never a sibling or anything
 * above, and no product code imports the tests.
 */
const layer = (files, forbidden) => ({
  files,
  ignores: ['**/*.test.ts'],
  rules: {
    'no-restricted-imports': ['error', {
      patterns: forbidden.map((folder) => ({
        group: [`**/${folder}/**`],
        message: `${folder}/ is not below this folder (docs/architecture.md#folders)`,
      })),
    }],
  },
});

export default tseslint.config(
  { ignores: ['node_modules/**', 'dist/**', 'charts/**', '**/*.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    rules: {
      // Limits that keep functions reviewable; request paths stay flat and small.
      complexity: ['error', 15],
      'max-depth': ['error', 4],
      'max-params': ['error', 5],
      'max-lines-per-function': ['error', { max: 120, skipBlankLines: true, skipComments: true }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  {
    files: ['**/*.test.ts', 'test/**/*.ts'],
    rules: { 'max-lines-per-function': 'off' },
  },
  layer(['crds/**/*.ts'], ['common', 'sidecar', 'operator', 'plugin', 'test']),
  layer(['common/**/*.ts'], ['sidecar', 'operator', 'plugin', 'test']),
  layer(['sidecar/**/*.ts'], ['operator', 'plugin', 'test']),
  // Inside the sidecar: http/ is the leaf every layer answers with; the engine and the stores
  // know nothing of HTTP, auth or forwarding; auth and the forwarders never reach up into the
  // request pipeline (gateway/) or the admin operations.
  layer(['sidecar/http/**/*.ts'], ['gateway', 'proxy', 'auth', 'limits', 'admin', 'config', 'resources', 'events', 'operator', 'test']),
  layer(['sidecar/limits/**/*.ts'], ['gateway', 'proxy', 'auth', 'http', 'admin', 'config', 'operator', 'test']),
  layer(['sidecar/auth/**/*.ts', 'sidecar/proxy/**/*.ts'], ['gateway', 'admin', 'config', 'operator', 'test']),
  layer(['operator/**/*.ts'], ['sidecar', 'plugin', 'test']),
  // kubectl-gw is a client: it reads the contract (crds/) and talks to the API server and the admin API.
  layer(['plugin/**/*.ts'], ['common', 'sidecar', 'operator', 'test']),
);
