import { join } from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');

/** Lints `code` as if it were the file at `path`, with the project's own configuration. */
async function restrictedImports(path: string, code: string): Promise<string[]> {
  const [result] = await new ESLint({ cwd: ROOT }).lintText(code, { filePath: join(ROOT, path) });
  return (result?.messages ?? []).filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
}

describe('the lint step holds the folders to their layers', () => {
  it.each([
    ['crds/kinds-extra.ts', "import { createLogger } from '../common/logger.ts';", 'common/'],
    ['crds/compile/extra.ts', "import { startSidecar } from '../../sidecar/app.ts';", 'sidecar/'],
    ['common/extra.ts', "import { Operator } from '../operator/operator.ts';", 'operator/'],
    ['common/extra.ts', "import type { RunningSidecar } from '../sidecar/app.ts';", 'sidecar/'],
    ['sidecar/limits/extra.ts', "import { Operator } from '../../operator/operator.ts';", 'operator/'],
    ['operator/runtime/extra.ts', "import { startSidecar } from '../../sidecar/app.ts';", 'sidecar/'],
    ['sidecar/extra.ts', "import { testEnv } from '../test/harness/index.ts';", 'test/'],
    ['sidecar/proxy/extra.ts', "import { Gateway } from '../gateway/gateway.ts';", 'gateway/'],
    ['sidecar/auth/extra.ts', "import { adminRoutes } from '../admin/routes.ts';", 'admin/'],
    ['sidecar/limits/extra.ts', "import { gatewayErrors } from '../http/errors.ts';", 'http/'],
    ['sidecar/limits/stores/extra.ts', "import { authenticate } from '../../auth/authenticator.ts';", 'auth/'],
    ['sidecar/http/extra.ts', "import { LimitEngine } from '../limits/engine.ts';", 'limits/'],
    ['plugin/extra.ts', "import { keyLimits } from '../sidecar/admin/key-limits.ts';", 'sidecar/'],
    ['sidecar/admin/extra.ts', "import { run } from '../../plugin/kubectl-gw.ts';", 'plugin/'],
  ])('%s may not import %s', async (path, code, folder) => {
    expect(await restrictedImports(path, `${code}\nexport const x = 1;\n`)).toEqual([expect.stringContaining(`${folder} is not below this folder`)]);
  });

  it.each([
    ['sidecar/extra.ts', "import { createLogger } from '../common/logger.ts';\nimport { kinds } from '../crds/kinds.ts';"],
    ['operator/extra.ts', "import { createLogger } from '../common/logger.ts';"],
    ['common/extra.ts', "import { kinds } from '../crds/kinds.ts';"],
    ['plugin/extra.ts', "import { keyLimitsAnswerSchema } from '../crds/admin-answers.ts';"],
    ['sidecar/proxy/extra.ts', "import { gatewayErrors } from '../http/errors.ts';"],
    ['sidecar/gateway/extra.ts', "import { authenticate } from '../auth/authenticator.ts';\nimport { sendError } from '../http/respond.ts';"],
    ['sidecar/extra.test.ts', "import { testEnv } from '../test/harness/index.ts';"],
  ])('%s may import what is below it', async (path, code) => {
    expect(await restrictedImports(path, `${code}\n`)).toEqual([]);
  });
});
