import { randomBytes } from 'node:crypto';
import { cp, mkdir, mkdtemp, readdir, readFile, rename, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { sessionKey } from '../../../common/redis-keys.ts';
import { keyHash } from '../../../crds/key-hash.ts';
import { MAX_FILE_BYTES } from '../../../sidecar/resources/yaml-folder.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { testEnv } from '../../harness/index.ts';
import { startRedisServer } from '../../harness/redis.ts';
import { keylessApiYaml } from '../../support/api-yaml.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { call, eventually, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/**
 * Standalone (`--config DIR`): hand edits of the folder apply on their own, without a
 * restart or a reload call; a bad edit keeps the last good config and is reported; Keys
 * the gateway cannot serve are reported without making it unready.
 */

const adminSecret = 'folder-watch-admin-secret';
const admin = { 'x-gw-authorization': adminSecret };
/** A client that keeps trying through the server's restart, its errors left to its commands. */
const newRedisClient = (url: string): Redis => new Redis(url, { maxRetriesPerRequest: 1 }).on('error', () => undefined);

const REPO_ROOT = join(import.meta.dirname, '..', '..', '..');

/** Every API here has an API-level limit: a spec edit can then break it (per 0 with a rate). */
const keylessApi = (apiId: string, listenPath: string, target: string): string => keylessApiYaml(apiId, listenPath, target, { rate: 100, per: 60 });

const authApiAndKey = (target: string, rawKey: string): string => `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: private }
spec: { api_id: private, proxy: { listen_path: /private/, target_url: '${target}' } }
---
apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: by-hand }
spec: { key_hash: ${keyHash(rawKey)}, access_rights: { private: { api_id: private } } }
`;

/** The `config problem` warnings logged about `subject` (or a file), each problem's text. */
const problemsLogged = (logs: readonly string[], about: string): string[] =>
  logs
    .map((line) => JSON.parse(line) as { level: number; msg: string; subject?: string; file?: string; problem?: unknown })
    .filter((record) => record.msg === 'config problem' && record.level === 40 && (record.subject === about || record.file?.endsWith(about) === true))
    .map((record) => String(record.problem));

interface Readyz {
  status: string;
  problems: { subject: string; reason: string; file?: string }[];
}

describe('a standalone gateway watching its config folder', () => {
  let upstream: EchoUpstream;
  let dir: string;
  let sidecar: RunningSidecar;
  let logs: string[];

  const start = async (): Promise<void> => {
    logs = [];
    sidecar = await startTestSidecar(
      { ...sidecarOptions('default', testEnv().redisUrl), configDir: dir, instanceId: uniqueId('watch'), adminSecret },
      { logger: collectingLogger(logs) },
    );
  };
  const status = async (path: string, headers: Record<string, string> = {}): Promise<number> => (await call(`${sidecar.proxyUrl}${path}`, { headers })).status;
  // The folder's problems: a Redis call that timed out while the machine was busy (the shared
  // test Redis) is listed too, as subject Redis, and is not what these tests are about.
  const readyz = async (): Promise<{ status: number; body: Readyz }> => {
    const res = await call(`${sidecar.healthUrl}/readyz`);
    const body = res.json() as unknown as Readyz;
    return { status: res.status, body: { ...body, problems: body.problems.filter((p) => p.subject !== 'Redis') } };
  };
  const metrics = async (): Promise<string> => (await call(`${sidecar.healthUrl}/metrics`)).text;
  const reloadsOk = async (): Promise<number> => Number(/gw_config_reloads_total\{source="folder",result="ok"\} (\d+)/.exec(await metrics())?.[1] ?? 0);

  beforeEach(async () => {
    upstream ??= await startEchoUpstream();
    dir = await mkdtemp(join(tmpdir(), 'gw-watch-'));
  });

  afterEach(async () => {
    await sidecar?.close();
    await rm(dir, { recursive: true, force: true });
  });

  afterAll(async () => {
    await upstream?.close();
  });

  it('applies a new file, an edit and an editor\'s save-by-rename without a restart or a reload call', async () => {
    await writeFile(join(dir, 'one.yaml'), keylessApi('one', '/one/', upstream.url));
    await start();
    expect(await status('/one/x')).toBe(200);
    const loadsAtStart = await reloadsOk();

    await writeFile(join(dir, 'two.yaml'), keylessApi('two', '/two/', upstream.url));
    await eventually(async () => (await status('/two/x')) === 200, 10_000, 'new file applied');

    // Edited in place: the listen path moves.
    await writeFile(join(dir, 'one.yaml'), keylessApi('one', '/moved/', upstream.url));
    await eventually(async () => (await status('/moved/x')) === 200, 10_000, 'edit applied');
    expect(await status('/one/x')).toBe(404);

    // Saved the way vim and most IDEs do: a new file renamed over the old one.
    await writeFile(join(dir, '.one.yaml.swp'), 'editor state');
    await writeFile(join(dir, 'one.yaml.tmp'), keylessApi('one', '/renamed/', upstream.url));
    await rename(join(dir, 'one.yaml.tmp'), join(dir, 'one.yaml'));
    await unlink(join(dir, '.one.yaml.swp'));
    await eventually(async () => (await status('/renamed/x')) === 200, 10_000, 'save by rename applied');

    // A file removed by hand takes its API with it.
    await unlink(join(dir, 'two.yaml'));
    await eventually(async () => (await status('/two/x')) === 404, 10_000, 'removed file applied');

    // An editor's own files do not reload the config: only a change of the YAML does.
    const loads = await reloadsOk();
    expect(loads).toBeGreaterThan(loadsAtStart);
    await writeFile(join(dir, '.scratch.swp'), 'x');
    await writeFile(join(dir, 'notes.txt'), 'not config');
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(await reloadsOk()).toBe(loads);
    expect((await readyz()).body.problems).toEqual([]);
  });

  it('keeps the last good config on a bad edit, reports it, and applies the fix', async () => {
    await writeFile(join(dir, 'api.yaml'), keylessApi('steady', '/steady/', upstream.url));
    await start();
    expect(await status('/steady/x')).toBe(200);

    // YAML that does not parse: the file's last good version stays in effect.
    await writeFile(join(dir, 'api.yaml'), `${keylessApi('steady', '/elsewhere/', upstream.url)}  broken: [unclosed\n`);
    await eventually(async () => (await readyz()).body.problems.length > 0, 10_000, 'YAML error reported');
    let ready = await readyz();
    expect(ready.status).toBe(200);
    expect(ready.body.problems).toEqual([{ subject: 'file api.yaml', reason: expect.stringMatching(/; its last good version stays in effect$/), file: 'api.yaml' }]);
    expect(await metrics()).toContain('gw_config_problems{kind="File",reason="YamlError"} 1');
    expect(await status('/steady/x')).toBe(200);
    expect(await status('/elsewhere/x')).toBe(404);
    expect(logs.some((line) => line.includes('"level":50') && line.includes('config file does not parse'))).toBe(true);

    // Valid YAML, invalid resource: the API's last good compiled version stays served.
    await writeFile(join(dir, 'api.yaml'), keylessApi('steady', '/elsewhere/', upstream.url).replace('rate: 100, per: 60', 'rate: 100, per: 0'));
    await eventually(async () => (await readyz()).body.problems.some((p) => p.subject === 'ApiDefinition default/steady'), 10_000, 'invalid spec reported');
    ready = await readyz();
    expect(ready.status).toBe(200);
    expect(ready.body.problems).toEqual([
      // The compile step names the resource; the report adds the file it is in.
      { subject: 'ApiDefinition default/steady', reason: expect.stringMatching(/^spec\.global_rate_limit.*; its last good version stays in effect$/), file: 'api.yaml' },
    ]);
    expect(await metrics()).toMatch(/gw_config_reload_errors_total\{api_id="steady"\} [1-9]/);
    expect(await status('/steady/x')).toBe(200);
    expect(await status('/elsewhere/x')).toBe(404);

    // A misspelt field, which kubectl apply would refuse: refused here too, not dropped (the API would lose its limit).
    await writeFile(join(dir, 'api.yaml'), keylessApi('steady', '/misspelt/', upstream.url).replace('global_rate_limit', 'global_rate_limt'));
    await eventually(async () => (await readyz()).body.problems.some((p) => p.reason.startsWith('spec.global_rate_limt')), 10_000, 'unknown field reported');
    expect((await readyz()).body.problems).toEqual([
      { subject: 'ApiDefinition default/steady', reason: expect.stringMatching(/^spec\.global_rate_limt: ApiDefinition has no field .*; its last good version stays in effect$/), file: 'api.yaml' },
    ]);
    expect(await metrics()).toContain('gw_config_problems{kind="ApiDefinition",reason="UnknownField"} 1');
    expect(await status('/misspelt/x')).toBe(404);
    expect(await status('/steady/x')).toBe(200);

    // A spec field indented one level too little, beside spec, and a misspelt metadata field: refused as kubectl apply refuses them.
    const outdented = `${keylessApiYaml('steady', '/outdented/', upstream.url).replace('metadata: { name: steady }', 'metadata: { name: steady, labelz: { a: b } }')}global_rate_limit: { rate: 100, per: 60 }\n`;
    await writeFile(join(dir, 'api.yaml'), outdented);
    await eventually(async () => (await readyz()).body.problems.some((p) => p.reason.startsWith('global_rate_limit')), 10_000, 'the field beside spec reported');
    expect((await readyz()).body.problems).toEqual([
      {
        subject: 'ApiDefinition default/steady',
        reason: 'global_rate_limit: ApiDefinition has no field "global_rate_limit", "metadata.labelz" (misspelt, or indented outside spec?); kubectl apply refuses it too; its last good version stays in effect',
        file: 'api.yaml',
      },
    ]);
    expect(await metrics()).toContain('gw_config_problems{kind="ApiDefinition",reason="UnknownField"} 1');
    expect(await status('/outdented/x')).toBe(404);
    expect(await status('/steady/x')).toBe(200);

    // The fix applies on its own and clears the report.
    await writeFile(join(dir, 'api.yaml'), keylessApi('steady', '/elsewhere/', upstream.url));
    await eventually(async () => (await status('/elsewhere/x')) === 200, 10_000, 'fix applied');
    expect((await readyz()).body.problems).toEqual([]);
    expect(await metrics()).not.toMatch(/gw_config_problems\{/);
  });

  it('names the one bound a negative stream count or smoothing number breaks', async () => {
    const bad = (name: string, spec: string): string => `apiVersion: gw.dev/v1alpha1\nkind: Policy\nmetadata: { name: ${name} }\nspec: ${spec}\n---\n`;
    const api = (name: string, count: number): string =>
      `apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: { name: ${name} }\nspec: { api_id: ${name}, proxy: { listen_path: /${name}/, target_url: '${upstream.url}' }, rate_limit_resources: [{ label: calls, local: { count: ${count}, interval: 1s } }] }\n---\n`;
    await writeFile(
      join(dir, 'bad.yaml'),
      api('count-negative', -1) +
        api('count-zero', 0) +
        bad('step-negative', '{ rate: 10, per: 1, smoothing: { enabled: true, threshold: 2, step: -1, trigger: 0.5, delay: 0 } }') +
        bad('step-negative-off', '{ rate: 10, per: 1, smoothing: { enabled: false, step: -1 } }'),
    );
    await start();
    await eventually(async () => (await readyz()).body.problems.length === 4, 10_000, 'the four reported');
    const reasons = Object.fromEntries((await readyz()).body.problems.map((p) => [p.subject, p.reason]));
    const step = 'spec.smoothing.step: step must be set, at least 1, when smoothing is enabled, and at least 0 when it is off';
    expect(reasons).toEqual({
      'ApiDefinition default/count-negative': 'spec.rate_limit_resources.0.local.count: Too small: expected number to be >=1',
      'ApiDefinition default/count-zero': 'spec.rate_limit_resources.0.local.count: Too small: expected number to be >=1',
      'Policy default/step-negative': step,
      'Policy default/step-negative-off': step,
    });
  });

  it("keeps a Policy's grant of an API refused at its last good version, and a Policy refused whole at its own", async () => {
    const rawKey = randomBytes(16).toString('hex');
    const apiYaml = (listenPath: unknown) => `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: granted }
spec: { api_id: granted, proxy: { listen_path: ${JSON.stringify(listenPath)}, target_url: '${upstream.url}' } }
`;
    const policyYaml = (path: string) => `apiVersion: gw.dev/v1alpha1
kind: Policy
metadata: { name: limited }
spec:
  rate: 100
  per: 60
  access_rights:
    granted:
      api_id: granted
      endpoints: [{ path: '${path}', methods: [{ name: GET, limit: { rate: 2, per: 60 } }] }]
---
apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: holder }
spec: { key_hash: ${keyHash(rawKey)}, apply_policies: [limited] }
`;
    await writeFile(join(dir, 'api.yaml'), apiYaml('/granted/'));
    await writeFile(join(dir, 'policy.yaml'), policyYaml('/limited'));
    await start();
    const withKey = { authorization: rawKey };
    expect(await status('/granted/open', withKey)).toBe(200);

    // A schema error in the API: it stays served as it was, and so does the Policy's grant of it.
    await writeFile(join(dir, 'api.yaml'), apiYaml(42));
    await eventually(async () => (await readyz()).body.problems.some((p) => p.subject === 'ApiDefinition default/granted'), 10_000, 'API refusal reported');
    expect((await readyz()).body.problems.map((p) => p.subject)).toEqual(['ApiDefinition default/granted']);
    expect(await status('/granted/open', withKey)).toBe(200);

    // A typo in the Policy's endpoint path: its last good version, endpoint limit included, stays in force.
    await writeFile(join(dir, 'policy.yaml'), policyYaml('/limited(['));
    await eventually(async () => (await readyz()).body.problems.some((p) => p.subject === 'Policy default/limited'), 10_000, 'Policy refusal reported');
    expect((await readyz()).body.problems.find((p) => p.subject === 'Policy default/limited')?.file).toBe('policy.yaml');
    expect((await readyz()).body.problems.find((p) => p.subject === 'Policy default/limited')?.reason).toMatch(/InvalidRegex|not a valid regular expression.*; its last good version stays in effect$/);
    expect([await status('/granted/limited', withKey), await status('/granted/limited', withKey), await status('/granted/limited', withKey)]).toEqual([200, 200, 429]);
  });

  it('reports a Key applying a policy the folder does not have, and serves it without that policy', async () => {
    const rawKey = randomBytes(16).toString('hex');
    await writeFile(join(dir, 'key.yaml'), `${authApiAndKey(upstream.url, rawKey)}---
apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: orphan }
spec: { key_hash: ${keyHash(`${rawKey}-orphan`)}, apply_policies: [nope] }
`);
    await start();
    expect((await readyz()).body.problems).toEqual([
      { subject: 'Key default/orphan', reason: 'spec.apply_policies: no Policy "nope" in namespace default; what it would grant is refused', file: 'key.yaml' },
    ]);
    expect(await metrics()).toContain('gw_config_problems{kind="Key",reason="MissingPolicy"} 1');
    expect(problemsLogged(logs, 'Key default/orphan')).toEqual(['spec.apply_policies: no Policy "nope" in namespace default; what it would grant is refused']);
    expect(await status('/private/x', { authorization: `${rawKey}-orphan` })).toBe(403);
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);
  });

  it("reports a Policy's and a Key's rate_limit_pattern whose $ starts no reference, and serves both as written", async () => {
    const rawKey = randomBytes(16).toString('hex');
    await writeFile(join(dir, 'key.yaml'), `${authApiAndKey(upstream.url, rawKey)}---
apiVersion: gw.dev/v1alpha1
kind: Policy
metadata: { name: braces }
spec: { meta_data: { rate_limit_pattern: '\${gw_meta.org}' } }
---
apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: shouting }
spec: { key_hash: ${keyHash(`${rawKey}-shouting`)}, access_rights: { private: {} }, meta_data: { rate_limit_pattern: '$GW_META.org | $gw_meta.team' } }
`);
    await start();
    expect((await readyz()).body.problems).toEqual([
      expect.objectContaining({ subject: 'Policy default/braces', reason: expect.stringContaining('"${gw_meta.org}" has a "$" that starts no $gw_meta.FIELD reference') }),
      {
        subject: 'Key default/shouting',
        reason: expect.stringContaining('spec.meta_data.rate_limit_pattern: "$GW_META.org" has a "$" that starts no $gw_meta.FIELD reference'),
        file: 'key.yaml',
      },
    ]);
    expect(await metrics()).toContain('gw_config_problems{kind="Key",reason="InvalidRateLimitPattern"} 1');
    expect(await status('/private/x', { authorization: `${rawKey}-shouting` })).toBe(200);
  });

  it('refuses a raw key pasted as key_hash without repeating it, reading or writing a session under it, or logging it when fixed', async () => {
    const rawKey = `pasted-${randomBytes(12).toString('hex')}`;
    const pasted = authApiAndKey(upstream.url, rawKey).replace(keyHash(rawKey), rawKey);
    await writeFile(join(dir, 'key.yaml'), pasted);
    const redis = newRedisClient(testEnv().redisUrl);
    try {
      const monitor = await redis.monitor();
      const commands: string[] = [];
      monitor.on('monitor', (_time: string, args: string[]) => commands.push(args.join(' ')));
      await start();
      const problem = (await readyz()).body.problems.find((p) => p.subject === 'Key default/by-hand');
      expect(problem).toEqual({ subject: 'Key default/by-hand', reason: expect.stringContaining('spec.key_hash is not a key hash'), file: 'key.yaml' });
      expect(await metrics()).toContain('gw_config_problems{kind="Key",reason="InvalidSpec"} 1');
      expect(await status('/private/x', { authorization: rawKey })).toBe(403);

      await writeFile(join(dir, 'key.yaml'), authApiAndKey(upstream.url, rawKey));
      await eventually(async () => (await status('/private/x', { authorization: rawKey })) === 200, 10_000, 'the fixed Key served');
      expect((await readyz()).body.problems).toEqual([]);
      monitor.disconnect();
      // A key never appears in full or in part (a 12-character log prefix, say).
      const secretPart = rawKey.slice(0, 12);
      expect(logs.filter((line) => line.includes(secretPart))).toEqual([]);
      expect(commands.filter((command) => command.includes(secretPart))).toEqual([]);
      expect(await redis.exists(sessionKey(rawKey))).toBe(0);
    } finally {
      redis.disconnect();
    }
  });

  it('keeps a Key that an edit made invalid on its last good session, and says so in the log too', async () => {
    const rawKey = randomBytes(16).toString('hex');
    await writeFile(join(dir, 'key.yaml'), authApiAndKey(upstream.url, rawKey));
    await start();
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);
    await writeFile(join(dir, 'key.yaml'), authApiAndKey(upstream.url, rawKey).replace('spec: { key_hash', 'spec: { quota_max: "lots", key_hash'));
    await eventually(async () => (await readyz()).body.problems.some((p) => p.subject === 'Key default/by-hand'), 10_000, 'invalid Key reported');
    expect((await readyz()).body.problems.find((p) => p.subject === 'Key default/by-hand')?.reason).toMatch(/; its last good version stays in effect$/);
    const warnings = logs.map((line) => JSON.parse(line) as { msg: string; resource?: string }).filter((record) => record.resource === 'by-hand').map((record) => record.msg);
    expect(warnings).toEqual(['invalid Key: its last good session stays in effect']);
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);

    // A spec field beside spec: refused too, the Key served by its last good session.
    await writeFile(join(dir, 'key.yaml'), `${authApiAndKey(upstream.url, rawKey)}quota_max: 5\n`);
    await eventually(async () => (await readyz()).body.problems.find((p) => p.subject === 'Key default/by-hand')?.reason.startsWith('Key has no field "quota_max"') === true, 10_000, 'the field beside spec reported');
    expect(await metrics()).toContain('gw_config_problems{kind="Key",reason="UnknownField"} 1');
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);
  });

  it.each([
    ['removed', (): string | null => null],
    ['given another key_hash', (text: string): string | null => text.replace(/key_hash: ['"]?[0-9a-f]{64}['"]?/, `key_hash: ${keyHash(randomBytes(16).toString('hex'))}`)],
  ])('revokes a key the admin API created whose file is %s before any load found it', async (_change, edited) => {
    await writeFile(join(dir, 'key.yaml'), authApiAndKey(upstream.url, randomBytes(16).toString('hex')));
    await start();
    const created = await call(`${sidecar.adminUrl}/admin/org/keys`, {
      method: 'POST',
      headers: { 'admin-auth': adminSecret, 'content-type': 'application/json' },
      body: JSON.stringify({ access_rights: { private: { api_id: 'private' } } }),
    });
    expect(created.status).toBe(200);
    const { key_id: rawKey, key_hash: hash, data } = created.json() as { key_id: string; key_hash: string; data: { key_id: string } };
    // Within the watch's quiet time, so the file's own load never comes.
    const file = join(dir, `key-${data.key_id}.yaml`);
    const text = edited(await readFile(file, 'utf8'));
    if (text === null) await unlink(file);
    else await writeFile(file, text);
    await eventually(async () => (await status('/private/x', { authorization: rawKey })) === 403, 10_000, 'the key refused');
    const redis = newRedisClient(testEnv().redisUrl);
    try {
      expect(await redis.exists(sessionKey(hash))).toBe(0);
    } finally {
      redis.disconnect();
    }
  });

  it('reports a Key granted an API the folder does not have until that API is added', async () => {
    const rawKey = randomBytes(16).toString('hex');
    const early = `apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: early }
spec: { key_hash: ${keyHash(`${rawKey}-early`)}, access_rights: { private: {}, later: {} } }
`;
    await writeFile(join(dir, 'key.yaml'), `${authApiAndKey(upstream.url, rawKey)}---\n${early}`);
    await start();
    expect((await readyz()).body.problems).toEqual([{ subject: 'Key default/early', reason: 'spec.access_rights: no ApiDefinition has api_id "later"', file: 'key.yaml' }]);
    expect(await metrics()).toContain('gw_config_problems{kind="Key",reason="MissingApi"} 1');
    expect(problemsLogged(logs, 'Key default/early')).toEqual(['spec.access_rights: no ApiDefinition has api_id "later"']);
    expect(await status('/private/x', { authorization: `${rawKey}-early` })).toBe(200);

    await writeFile(join(dir, 'later.yaml'), `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: later }
spec: { api_id: later, proxy: { listen_path: /later/, target_url: '${upstream.url}' } }
`);
    await eventually(async () => (await readyz()).body.problems.length === 0, 10_000, 'the MissingApi report cleared');
    expect(await status('/later/x', { authorization: `${rawKey}-early` })).toBe(200);
  });

  it('reports an API that another API\'s listen path keeps from every request, until that one leaves', async () => {
    await writeFile(join(dir, 'a.yaml'), keylessApi('a-first', '/shared/', `${upstream.url}/from-a`));
    await writeFile(join(dir, 'b.yaml'), keylessApi('b-second', '/shared/', `${upstream.url}/from-b`));
    await start();
    const servedBy = async (): Promise<string> => ((await call(`${sidecar.proxyUrl}/shared/x`)).json() as { path: string }).path;
    expect(await servedBy()).toBe('/from-a/x');
    expect((await readyz())).toEqual({
      status: 200,
      body: {
        status: 'ready',
        reasons: [],
        problems: [
          { subject: 'ApiDefinition default/b-second', reason: 'listen path /shared/ is served by ApiDefinition default/a-first (its api_id a-first comes first); this API is never reached', file: 'b.yaml' },
        ],
      },
    });
    expect(await metrics()).toContain('gw_config_problems{kind="ApiDefinition",reason="ListenPathTaken"} 1');
    expect(logs.some((line) => line.includes('API never reached: another API has its listen path'))).toBe(true);
    // A folder problem beside it: each is counted, and the folder's reload keeps the other's series.
    await writeFile(join(dir, 'broken.yaml'), 'kind: [');
    await eventually(async () => (await metrics()).includes('gw_config_problems{kind="File",reason="YamlError"} 1'), 10_000, 'the YAML error reported');
    expect(await metrics()).toContain('gw_config_problems{kind="ApiDefinition",reason="ListenPathTaken"} 1');
    await unlink(join(dir, 'broken.yaml'));
    await unlink(join(dir, 'a.yaml'));
    await eventually(async () => (await servedBy()) === '/from-b/x', 10_000, 'b-second served');
    expect((await readyz()).body.problems).toEqual([]);
    expect(await metrics()).not.toMatch(/gw_config_problems\{/);
  });

  it('gives a key that used up its quota the difference at once when the Policy raises quota_max, and takes it when it lowers it', async () => {
    const rawKey = randomBytes(16).toString('hex');
    const [api] = authApiAndKey(upstream.url, rawKey).split('---');
    const policy = (max: number): string => `apiVersion: gw.dev/v1alpha1
kind: Policy
metadata: { name: metered }
spec: { rate: 100, per: 60, quota_max: ${max}, quota_renewal_rate: 3600, access_rights: { private: { api_id: private } } }
`;
    const key = `apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: metered-key }
spec: { key_hash: ${keyHash(rawKey)}, apply_policies: [metered] }
`;
    await writeFile(join(dir, 'api.yaml'), `${api!.trim()}\n`);
    await writeFile(join(dir, 'key.yaml'), key);
    await writeFile(join(dir, 'policy.yaml'), policy(2));
    await start();
    const statuses = async (n: number): Promise<number[]> => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) out.push(await status('/private/x', { authorization: rawKey }));
      return out;
    };
    expect(await statuses(3)).toEqual([200, 200, 403]);
    await writeFile(join(dir, 'policy.yaml'), policy(5));
    await eventually(async () => (await status('/private/x', { authorization: rawKey })) === 200, 10_000, 'the raised quota applied');
    // 2 used before the edit and 1 just now: 2 of the 5 are left.
    expect(await statuses(3)).toEqual([200, 200, 403]);
    await writeFile(join(dir, 'policy.yaml'), policy(4));
    await sidecar.runtime.reload();
    expect(await statuses(1)).toEqual([403]);
  });

  it('turns off both API-side levels with disable_rate_limit and keeps the key\'s own limit', async () => {
    const rawKey = randomBytes(16).toString('hex');
    await writeFile(join(dir, 'api.yaml'), `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: unmetered }
spec:
  api_id: unmetered
  proxy: { listen_path: /unmetered/, target_url: '${upstream.url}' }
  disable_rate_limit: true
  global_rate_limit: { rate: 1, per: 60 }
  extended_paths: { rate_limit: [{ path: /ep, method: GET, rate: 1, per: 60 }] }
---
apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: unmetered-key }
spec: { key_hash: ${keyHash(rawKey)}, rate: 3, per: 60, access_rights: { unmetered: { api_id: unmetered } } }
`);
    await start();
    const answers: [number, string][] = [];
    for (let i = 0; i < 4; i++) {
      const res = await call(`${sidecar.proxyUrl}/unmetered/ep`, { headers: { authorization: rawKey } });
      answers.push([res.status, res.status === 200 ? '' : String(res.json().error)]);
    }
    expect(answers).toEqual([[200, ''], [200, ''], [200, ''], [429, 'Rate Limit Exceeded']]);
  });

  it('reports an entry it cannot read (a broken link, a folder, a file over 4 MiB) and applies the other files', async () => {
    await writeFile(join(dir, 'one.yaml'), keylessApi('one', '/one/', upstream.url));
    await symlink('/nonexistent/gw.yaml', join(dir, 'dangling.yaml'));
    await mkdir(join(dir, 'folder.yaml'));
    await writeFile(join(dir, 'big.yaml'), `# ${'x'.repeat(MAX_FILE_BYTES)}\n`);
    await start();
    expect(await status('/one/')).toBe(200);
    const reported = async (): Promise<string[]> => (await readyz()).body.problems.map((p) => p.subject).sort();
    expect(await reported()).toEqual(['file big.yaml', 'file dangling.yaml', 'file folder.yaml']);
    expect(JSON.stringify((await readyz()).body)).toContain('split it into several files');
    await writeFile(join(dir, 'two.yaml'), keylessApi('two', '/two/', upstream.url));
    await eventually(async () => (await status('/two/')) === 200, 10_000, 'another file applied');
    await Promise.all([unlink(join(dir, 'dangling.yaml')), rm(join(dir, 'folder.yaml'), { recursive: true }), unlink(join(dir, 'big.yaml'))]);
    await eventually(async () => (await reported()).length === 0, 10_000, 'the report cleared');
  });

  it('reports a document of gw.dev with a kind or version it does not have, and leaves other tools\' documents alone', async () => {
    await writeFile(join(dir, 'one.yaml'), keylessApi('one', '/one/', upstream.url));
    await writeFile(join(dir, 'typos.yaml'), `${keylessApi('two', '/two/', upstream.url).replace('kind: ApiDefinition', 'kind: ApiDefintion')}---
${keylessApi('three', '/three/', upstream.url).replace('gw.dev/v1alpha1', 'gw.dev/v1')}---
apiVersion: kyverno.io/v1
kind: Policy
metadata: { name: not-ours }
`);
    await start();
    expect(await status('/one/')).toBe(200);
    const { body } = await readyz();
    expect(body.problems.map((p) => [p.subject, p.reason])).toEqual([
      ['file typos.yaml', expect.stringContaining('document 1: gw.dev/v1alpha1 has no kind ApiDefintion')],
      ['file typos.yaml', expect.stringContaining('document 2: gw.dev/v1 is not served')],
    ]);
    expect(await metrics()).toMatch(/^gw_config_problems\{kind="File",reason="UnknownKind"\} 2$/m);
    expect(problemsLogged(logs, 'typos.yaml')).toEqual([expect.stringContaining('has no kind ApiDefintion'), expect.stringContaining('gw.dev/v1 is not served')]);
  });

  it('puts the Keys back into a Redis that restarted empty, with no reload and no edit', async () => {
    const redis = await startRedisServer();
    const client = newRedisClient(redis.url);
    try {
      const rawKey = randomBytes(16).toString('hex');
      await writeFile(join(dir, 'private.yaml'), authApiAndKey(upstream.url, rawKey));
      logs = [];
      sidecar = await startTestSidecar({ ...sidecarOptions('default', redis.url), configDir: dir, instanceId: uniqueId('empty'), adminSecret }, { logger: collectingLogger(logs) });
      expect(await status('/private/x', { authorization: rawKey })).toBe(200);
      const loads = await reloadsOk();

      await redis.stop();
      await redis.start();
      // Failing open, the key is served from its last read while Redis is away: the sessions'
      // return is the folder loaded again, with no reload asked for.
      await eventually(async () => (await reloadsOk()) > loads, 15_000, 'the folder loaded again');
      await eventually(async () => (await client.exists(sessionKey(keyHash(rawKey)))) === 1, 15_000, 'the session stored again');
      expect(await status('/private/x', { authorization: rawKey })).toBe(200);
      expect((await readyz()).body.problems).toEqual([]);
    } finally {
      client.disconnect();
      await sidecar?.close();
      await redis.dispose();
    }
  });

  it('revokes a Key removed from the folder by hand, and keeps one whose file breaks', async () => {
    const rawKey = randomBytes(16).toString('hex');
    await writeFile(join(dir, 'private.yaml'), authApiAndKey(upstream.url, rawKey));
    await start();
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);

    await writeFile(join(dir, 'private.yaml'), `${authApiAndKey(upstream.url, rawKey)}oops: [\n`);
    await eventually(async () => (await readyz()).body.problems.length > 0, 10_000, 'YAML error reported');
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);

    // A misspelt field in the Key (is_inactive, meant to revoke it) is refused, not dropped; the session stays as it was.
    await writeFile(join(dir, 'private.yaml'), authApiAndKey(upstream.url, rawKey).replace('spec: { key_hash', 'spec: { is_inactve: true, key_hash'));
    await eventually(async () => (await readyz()).body.problems.some((p) => p.reason.includes('is_inactve')), 10_000, 'unknown Key field reported');
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);

    await writeFile(join(dir, 'private.yaml'), authApiAndKey(upstream.url, rawKey).split('---')[0]!);
    await eventually(async () => (await status('/private/x', { authorization: rawKey })) === 403, 10_000, 'key revoked');
  });

  it('keeps a key_hash with the Key holding it when a copy arrives, reports the copy, and hands the hash over when the holder goes', async () => {
    const rawKey = randomBytes(16).toString('hex');
    const [api, key] = authApiAndKey(upstream.url, rawKey).split('---\n') as [string, string];
    await writeFile(join(dir, 'api.yaml'), api);
    await writeFile(join(dir, 'key.yaml'), key);
    await start();
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);

    // A copy named first, meant to revoke the key: it is not in force while the holder is there.
    await writeFile(join(dir, 'copy.yaml'), key.replace('name: by-hand', 'name: a-copy').replace('spec: { key_hash', 'spec: { is_inactive: true, key_hash'));
    await eventually(async () => (await readyz()).body.problems.length > 0, 10_000, 'duplicate reported');
    expect((await readyz()).body.problems).toEqual([
      { subject: 'Key default/a-copy', reason: 'spec.key_hash is also that of Key default/by-hand, which holds its session: this Key is not in force', file: 'copy.yaml' },
    ]);
    expect(await metrics()).toContain('gw_config_problems{kind="Key",reason="DuplicateKeyHash"} 1');
    expect(problemsLogged(logs, 'Key default/a-copy')).toContain('spec.key_hash is also that of Key default/by-hand, which holds its session: this Key is not in force');
    expect(await status('/private/x', { authorization: rawKey })).toBe(200);

    await unlink(join(dir, 'key.yaml'));
    await eventually(async () => (await status('/private/x', { authorization: rawKey })) === 403, 10_000, 'the copy in force');
    expect((await readyz()).body.problems).toEqual([]);
  });

  it('keeps an API deleted through the admin API served until GET /gw/reload, while hand edits still apply', async () => {
    await writeFile(join(dir, 'apis.yaml'), `${keylessApi('kept', '/kept/', upstream.url)}---\n${keylessApi('other', '/other/', upstream.url)}`);
    await start();
    const deleted = await call(`${sidecar.adminUrl}/gw/apis/kept`, { method: 'DELETE', headers: admin });
    expect(deleted.json()).toEqual({ key: 'kept', status: 'ok', action: 'deleted' });

    // The folder changes again (the delete itself, then a hand edit): the deleted API stays.
    await writeFile(join(dir, 'more.yaml'), keylessApi('more', '/more/', upstream.url));
    await eventually(async () => (await status('/more/x')) === 200, 10_000, 'hand edit applied');
    expect(await status('/kept/x')).toBe(200);

    expect((await call(`${sidecar.adminUrl}/gw/reload`, { headers: admin })).status).toBe(200);
    expect(await status('/kept/x')).toBe(404);
    expect(await status('/other/x')).toBe(200);
  });

  it('keeps an api_id with the API serving it when a copy named earlier arrives, and with a valid API over a broken copy at start', async () => {
    await writeFile(join(dir, 'serving.yaml'), keylessApi('shared', '/serving/', upstream.url).replace('name: shared }', 'name: serving }'));
    await start();
    expect(await status('/serving/x')).toBe(200);
    // Named `a-copy`, first by name: a folder has no creation times, and the name must not win it the api_id.
    await writeFile(join(dir, 'zz-copy.yaml'), keylessApi('shared', '/copy/', upstream.url).replace('name: shared }', 'name: a-copy }'));
    await eventually(async () => (await readyz()).body.problems.length > 0, 10_000, 'duplicate reported');
    expect((await readyz()).body.problems).toEqual([{ subject: 'ApiDefinition default/a-copy', reason: expect.stringMatching(/already used by ApiDefinition default\/serving/), file: 'zz-copy.yaml' }]);
    expect([await status('/serving/x'), await status('/copy/x')]).toEqual([200, 404]);

    // A broken copy (misspelt field) named first, found together with the good one at a restart.
    await sidecar.close();
    await writeFile(join(dir, 'zz-copy.yaml'), keylessApi('shared', '/copy/', upstream.url).replace('name: shared }', 'name: a-copy }').replace('listen_path', 'listen_pth'));
    await start();
    expect([await status('/serving/x'), await status('/copy/x')]).toEqual([200, 404]);
    expect((await readyz()).body.problems.map((p) => p.subject)).toEqual(['ApiDefinition default/a-copy']);
  });

  it('deletes every definition claiming the api_id, so a duplicate does not take the deleted API\'s place before the reload', async () => {
    await writeFile(join(dir, 'dup-a.yaml'), keylessApi('dup', '/dup-a/', upstream.url));
    await writeFile(join(dir, 'dup-b.yaml'), `${keylessApi('dup', '/dup-b/', upstream.url).replace('name: dup }', 'name: dup-b }')}---\n${keylessApi('other', '/other/', upstream.url)}`);
    await start();
    expect((await readyz()).body.problems.map((p) => p.subject)).toEqual(['ApiDefinition default/dup-b']);
    expect([await status('/dup-a/x'), await status('/dup-b/x')]).toEqual([200, 404]);

    const deleted = await call(`${sidecar.adminUrl}/gw/apis/dup`, { method: 'DELETE', headers: admin });
    expect(deleted.json()).toEqual({ key: 'dup', status: 'ok', action: 'deleted' });
    expect((await readdir(dir)).sort()).toEqual(['dup-b.yaml']);
    // A hand edit makes the folder load again: the deleted API stays as it was, and nothing takes its id.
    await writeFile(join(dir, 'more.yaml'), keylessApi('more', '/more/', upstream.url));
    await eventually(async () => (await status('/more/x')) === 200, 10_000, 'hand edit applied');
    expect([await status('/dup-a/x'), await status('/dup-b/x'), await status('/other/x')]).toEqual([200, 404, 200]);
    expect((await call(`${sidecar.adminUrl}/gw/apis/dup`, { method: 'DELETE', headers: admin })).status).toBe(404);

    expect((await call(`${sidecar.adminUrl}/gw/reload`, { headers: admin })).status).toBe(200);
    expect([await status('/dup-a/x'), await status('/dup-b/x')]).toEqual([404, 404]);
  });

  it('keeps a deleted API open to the keys a Policy grants it until GET /gw/reload, the Policy as edited since', async () => {
    const rawKey = randomBytes(16).toString('hex');
    const policy = (apiId: string): string => `apiVersion: gw.dev/v1alpha1
kind: Policy
metadata: { name: grants }
spec: { rate: 100, per: 60, access_rights: { ${apiId}: { api_id: ${apiId} } } }
`;
    const [api] = authApiAndKey(upstream.url, rawKey).split('---');
    const key = `apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: by-policy }
spec: { key_hash: ${keyHash(rawKey)}, apply_policies: [grants] }
`;
    await writeFile(join(dir, 'private.yaml'), api!);
    await writeFile(join(dir, 'other.yaml'), keylessApi('other', '/other/', upstream.url));
    await writeFile(join(dir, 'policy.yaml'), policy('private'));
    await writeFile(join(dir, 'key.yaml'), key);
    await start();
    const auth = { authorization: rawKey };
    expect(await status('/private/x', auth)).toBe(200);

    expect((await call(`${sidecar.adminUrl}/gw/apis/private`, { method: 'DELETE', headers: admin })).status).toBe(200);
    // The folder loads again (the delete's own write, then a hand edit): the grant stays, and
    // nothing is reported about an API that is still served.
    const loads = await reloadsOk();
    await writeFile(join(dir, 'more.yaml'), keylessApi('more', '/more/', upstream.url));
    await eventually(async () => (await reloadsOk()) > loads && (await status('/more/x')) === 200, 10_000, 'hand edit applied');
    expect(await status('/private/x', auth)).toBe(200);
    expect((await readyz()).body.problems).toEqual([]);

    // The Policy now grants another API instead: the deleted API takes the edit too.
    await writeFile(join(dir, 'policy.yaml'), policy('other'));
    await eventually(async () => (await status('/private/x', auth)) === 403, 10_000, 'policy edit applied');

    expect((await call(`${sidecar.adminUrl}/gw/reload`, { headers: admin })).status).toBe(200);
    expect(await status('/private/x', auth)).toBe(404);
  });

  it('reports the examples\' Keys without key_hash on /readyz and in gw_config_problems, at warn level, and stays ready', async () => {
    for (const name of await readdir(join(REPO_ROOT, 'examples'))) await cp(join(REPO_ROOT, 'examples', name), join(dir, name));
    await start();
    const ready = await readyz();
    expect(ready.status).toBe(200);
    expect(ready.body.status).toBe('ready');
    const skipped = ready.body.problems.filter((p) => p.reason.startsWith('no spec.key_hash')).map((p) => p.subject);
    expect(skipped.sort()).toEqual(['Key default/team-blue-alice', 'Key default/team-blue-bob', 'Key default/two-policies']);
    for (const problem of ready.body.problems.filter((p) => p.subject.startsWith('Key '))) {
      expect(problem.reason).toBe(
        'no spec.key_hash; skipped: a standalone gateway cannot generate raw keys (create keys with the admin API, or set key_hash to the SHA-256 of a key you choose)',
      );
    }
    expect(await metrics()).toContain('gw_config_problems{kind="Key",reason="MissingKeyHash"} 3');
    const warnings = (): string[] => logs.filter((line) => line.includes('Key without spec.key_hash skipped'));
    expect(warnings()).toHaveLength(3);
    for (const line of warnings()) expect(JSON.parse(line).level).toBe(40);
    // A reload that finds the same problems logs none of them again; a new problem, it logs.
    await writeFile(join(dir, 'open.yaml'), keylessApi('open', '/open/', upstream.url));
    await sidecar.runtime.reload();
    expect(await status('/open/')).toBe(200);
    expect(warnings()).toHaveLength(3);
    await writeFile(join(dir, 'nameless.yaml'), 'apiVersion: gw.dev/v1alpha1\nkind: Key\nmetadata: { name: nameless }\nspec: { rate: 1, per: 1 }\n');
    await sidecar.runtime.reload();
    expect(warnings()).toHaveLength(4);
    expect((await readyz()).body.problems.filter((p) => p.reason.startsWith('no spec.key_hash'))).toHaveLength(4);
  });

  it('keeps answering while a folder of 5,000 Keys reloads: the work is spread over many turns of the event loop', async () => {
    const keys = Array.from({ length: 5_000 }, (_, i) => `apiVersion: gw.dev/v1alpha1\nkind: Key\nmetadata: { name: key-${i} }\nspec: { key_hash: ${randomBytes(32).toString('hex')}, rate: 100, per: 60, access_rights: { open: { api_id: open } } }\n`);
    await writeFile(join(dir, 'open.yaml'), keylessApi('open', '/open/', upstream.url));
    await writeFile(join(dir, 'keys.yaml'), keys.join('---\n'));
    await start();
    expect(await status('/open/')).toBe(200);
    try {
      // The longest wait between two turns of the event loop (this test and the gateway share it) while the folder reloads.
      let last = performance.now();
      let longest = 0;
      const lag = setInterval(() => {
        const now = performance.now();
        longest = Math.max(longest, now - last);
        last = now;
      }, 5);
      const started = performance.now();
      // An edit, so that the reload parses the file again (an unchanged file is not parsed again).
      await writeFile(join(dir, 'keys.yaml'), `${keys.join('---\n')}# edited\n`);
      const answered = status('/open/');
      await sidecar.runtime.reload();
      const reloadMs = performance.now() - started;
      clearInterval(lag);
      expect(await answered).toBe(200);
      // Parsed in one piece, the folder alone held the event loop for about half of the reload (1 to 4 s on a 2-core machine).
      expect(longest).toBeLessThan(reloadMs / 4);
    } finally {
      // The sessions leave the shared Redis with their Keys.
      await unlink(join(dir, 'keys.yaml'));
      await sidecar.runtime.reload();
    }
  });
});
