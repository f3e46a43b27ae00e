import { mkdtemp, readdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { fuzzTimeout } from '../../support/fuzz.ts';
import { sidecarOptions, startTestSidecar, uniqueId } from '../sidecar/helpers.ts';
import { adminOperations, databaseState, fuzzOperation, ownDatabase, type Secrets } from './admin-requests.ts';

/**
 * Every admin operation of a real sidecar in folder mode (a temp folder of YAML, sessions
 * in a real Redis) takes arbitrary methods, paths, headers and bodies: no 5xx, the
 * operation's own error shape on every refusal, and a refusal changes nothing (the
 * folder's files and the Redis database are as before). The sidecar keeps serving.
 */

const RUNS = 40;
const REDIS_DB = 14;

const files: Record<string, string> = {
  'apis.yaml': `# the API the operations name
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: toys }
spec:
  api_id: toys
  categories: [fun, kids]
  use_keyless: true
  proxy: { listen_path: /toys/, target_url: http://127.0.0.1:9 }
`,
  'product.yaml': `apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata:
  name: starter
spec:
  id: prod-1
  tags:
    - Name: first
`,
  'category.yaml': `apiVersion: gw.dev/v1alpha1
kind: Category
metadata: { name: fun }
`,
};

const secrets: Secrets = { admin: 'fuzz-admin-secret-0123456789', portal: 'fuzz-portal-secret-0123456789', bearer: 'fuzz-bearer-token-0123456789' };

describe('admin operations on a folder, fuzzed', () => {
  let dir: string;
  let redis: Redis;
  let sidecar: RunningSidecar;

  const folder = async (): Promise<Record<string, string>> =>
    Object.fromEntries(await Promise.all((await readdir(dir)).sort().map(async (name) => [name, await readFile(join(dir, name), 'utf8')] as const)));
  const state = async () => ({ files: await folder(), redis: await databaseState(redis) });

  /** After an accepted write: the folder and Redis as they started, held until the folder watcher has settled. */
  async function restore(): Promise<void> {
    for (let settled = 0; settled < 2; ) {
      for (const name of await readdir(dir)) if (!(name in files)) await unlink(join(dir, name)).catch(() => undefined);
      for (const [name, text] of Object.entries(files)) if ((await readFile(join(dir, name), 'utf8').catch(() => '')) !== text) await writeFile(join(dir, name), text);
      const extra = await redis.keys('*');
      if (extra.length > 0) await redis.del(...extra);
      await new Promise((resolve) => setTimeout(resolve, 300));
      settled = (await redis.dbsize()) === 0 && Object.keys(await folder()).length === Object.keys(files).length ? settled + 1 : 0;
    }
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gw-fuzz-admin-'));
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
    const own = await ownDatabase(REDIS_DB);
    redis = own.redis;
    sidecar = await startTestSidecar(
      {
        ...sidecarOptions('default', own.url),
        configDir: dir,
        listen: 'off',
        instanceId: uniqueId('fuzz-admin'),
        adminSecret: secrets.admin,
        portalSecret: secrets.portal,
        bearerTokens: [{ name: 'reader', token: secrets.bearer, permissions: ['get:apidefinitions', 'list:apidefinitions', 'list:categories'] }],
      },
    );
  });

  afterAll(async () => {
    await sidecar?.close();
    await redis?.flushdb();
    redis?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.each(adminOperations({ api: 'toys', product: 'prod-1' }).map((op) => [op.name, op] as const))(
    '%s: no 5xx, its own error shape, nothing changed by a refusal',
    { timeout: fuzzTimeout(RUNS, 400) },
    (_name, op) => fuzzOperation(op, secrets, { adminUrl: sidecar.adminUrl, healthUrl: sidecar.healthUrl, state, restore }, RUNS),
  );
});
