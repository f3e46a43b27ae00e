import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { sessionKey } from '../../../common/redis-keys.ts';
import { RedisSessionStore } from '../../../common/session-store.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { CertIssuer, serverExt } from '../../harness/certs.ts';
import { startRedisTls, type TlsRedisHandle } from '../../harness/index.ts';
import { freePort } from '../../harness/ports.ts';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { keyHashOf, request } from '../../support/limits-fixtures.ts';
import { call, eventually } from '../sidecar/helpers.ts';
import { uniqueId } from '../limits/helpers.ts';
import { burstOutcomes, startGateway, stopAllGateways, waitReady } from './gateways.ts';

/**
 * The least-privilege Redis user of the README's Redis section, word for word: its keys
 * (`gw:*`), the one channel of session changes, and only the commands gw sends, the Lua
 * script's own included (Redis checks those against the user too).
 */
const ACL_RULES = [
  'resetkeys', '~gw:*', 'resetchannels', '&__redis__:invalidate', '-@all',
  '+fcall', '+function|load', '+evalsha', '+eval', '+get', '+set', '+del', '+multi', '+exec', '+info', '+ping',
  '+client|id', '+client|tracking', '+client|caching', '+subscribe',
  '+zadd', '+zrem', '+zrangebyscore', '+zremrangebyscore', '+zcard', '+zcount', '+zrange',
  '+pexpire', '+pexpireat', '+incr', '+decr', '+exists', '+hmget', '+hset', '+time', '+scan',
];
const README = new URL('../../../README.md', import.meta.url).pathname;

const root = new URL('../../../', import.meta.url).pathname;
const user = 'gw';
const password = 'gw-acl-pw-7c1e';
let dir: string;
let redis: TlsRedisHandle;
let admin: Redis;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gw-redis-tls-'));
  const issuer = new CertIssuer(dir);
  await issuer.createCa('gw-redis-test-ca');
  await issuer.issue('redis', '/CN=redis', serverExt(['127.0.0.1', 'localhost']));
  redis = await startRedisTls({ certDir: dir, serverCert: 'redis', user, password, rules: ACL_RULES });
  admin = redis.admin();
});

afterAll(async () => {
  await redis?.dispose();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** What Redis refused the user since the last reset (ACL LOG), as "reason object". */
async function deniedSinceReset(): Promise<string[]> {
  const entries = (await admin.call('ACL', 'LOG')) as unknown[][];
  return entries.map((entry) => {
    const fields = new Map<string, unknown>();
    for (let i = 0; i < entry.length; i += 2) fields.set(String(entry[i]), entry[i + 1]);
    return `${String(fields.get('reason'))} ${String(fields.get('object'))}`;
  });
}

describe('a least-privilege ACL user', () => {
  afterEach(stopAllGateways);

  it('is the one the README documents', async () => {
    expect(await readFile(README, 'utf8')).toContain(`ACL SETUSER gw on >PASSWORD ${ACL_RULES.join(' ')}`);
  });

  // Each algorithm sends its own commands: the sliding log with smoothing and a quota (one
  // script), the sentinel through MULTI and through a pipeline, the fixed window, and the DRL
  // with its heartbeats. A command the rules miss would be an error, and an entry in ACL LOG.
  const algorithms: [string, Partial<GatewaySettings>][] = [
    ['sliding log', { enable_redis_rolling_limiter: true }],
    ['sentinel (MULTI)', { enable_sentinel_rate_limiter: true }],
    ['sentinel (pipeline)', { enable_sentinel_rate_limiter: true, enable_non_transactional_rate_limiter: true }],
    ['fixed window', { enable_fixed_window_rate_limiter: true }],
    ['DRL with heartbeats', { drl_threshold: 1 }],
  ];
  it.each(algorithms)('runs the %s exactly, with limits, smoothing and a quota, and is refused nothing', async (_name, algorithm) => {
    await admin.call('ACL', 'LOG', 'RESET');
    const target = api(uniqueId('acl-api'), {
      api_limit: { rate: 1000, per: 60 },
      smoothing: { enabled: true, threshold: 10, step: 10, trigger: 0.5, delay: 30 },
    });
    const policyName = uniqueId('acl-policy');
    const keyPolicy = policy(policyName, { rate: { rate: 5, per: 60 }, quota_max: 3, quota_renewal_rate: 3600 });
    const settings = { ...algorithm, redis_failure_mode: 'closed' as const, redis_timeout_ms: 2000 };
    const gateway = startGateway(config({ settings, apis: [target], policies: [keyPolicy] }), redis.plainUrl, { heartbeatIntervalMs: 100 });
    await waitReady(gateway.redis);

    // Keyless: the API limit alone, far away.
    expect(await burstOutcomes([gateway], request(target, null), 10)).toEqual({ allowed: 10 });
    // A key whose quota (3) runs out before its rate (5).
    const key = request(target, { session: session({ apply_policies: [policyName] }), raw: uniqueId('acl-key') });
    const outcomes = [];
    for (let i = 0; i < 5; i++) outcomes.push((await gateway.engine.decide(key)).outcome);
    expect(outcomes).toEqual(['allowed', 'allowed', 'allowed', 'quota_exceeded', 'quota_exceeded']);
    // The effective-limits read peeks the same keys with the script's other mode.
    const explained = await gateway.engine.explain(key);
    expect([explained.refusedBy, explained.quota?.used]).toEqual(['quota', 3]);

    // The sentinel trims its logs in the background, the DRL beats: give both time to run.
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(gateway.logs.join('')).not.toMatch(/NOPERM/);
    expect(await deniedSinceReset()).toEqual([]);
    expect(await admin.keys(`gw:*${target.api_id}*`)).not.toEqual([]);
  });

  it('stores, reads and deletes sessions, and may touch no key outside gw:*', async () => {
    await admin.call('ACL', 'LOG', 'RESET');
    const gateway = startGateway(config({}), redis.plainUrl);
    await waitReady(gateway.redis);
    const store = new RedisSessionStore(gateway.redis);
    const hash = keyHashOf(uniqueId('raw'));
    const stored = session({ alias: 'acl' });
    await store.put(hash, stored);
    expect(await store.get(hash)).toEqual(stored);
    // The operator's pass over every session, for those of Keys deleted without their finalizer
    // (operator/keys/orphan-sessions.ts), scans them as this user too.
    const scanned: string[] = [];
    for await (const page of (gateway.redis as Redis).scanStream({ match: 'gw:session:*', count: 1000 })) scanned.push(...(page as string[]));
    expect(scanned).toContain(sessionKey(hash));
    await store.delete(hash);
    expect(await store.get(hash)).toBeNull();
    expect(await deniedSinceReset()).toEqual([]);

    // The rules bite: another key, and a command gw never sends, are refused.
    await expect(gateway.redis.set('not-gw', '1')).rejects.toThrow(/NOPERM/);
    await expect(gateway.redis.call('FLUSHALL')).rejects.toThrow(/NOPERM/);
    expect(await admin.exists('not-gw')).toBe(0);
  });
});

describe('gw-sidecar on rediss:// as that user (the CA given by NODE_EXTRA_CA_CERTS)', () => {
  let upstream: EchoUpstream;
  let config: string;
  let child: ChildProcess | undefined;
  /** Every process started, so a test that fails before stopping its own leaves none behind. */
  const started: ChildProcess[] = [];

  beforeAll(async () => {
    upstream = await startEchoUpstream();
    config = join(dir, 'config');
    await mkdir(config);
    const apiYaml = (id: string, keyless: boolean, limit: string): string => `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: ${id} }
spec: { api_id: ${id}, name: ${id}, use_keyless: ${keyless}, ${limit} proxy: { listen_path: /${id}/, target_url: '${upstream.url}', strip_listen_path: true } }
`;
    await writeFile(join(config, 'apis.yaml'), `${apiYaml('tls-open', true, 'global_rate_limit: { rate: 2, per: 60 },')}---\n${apiYaml('tls-keyed', false, '')}`);
  });

  afterAll(async () => {
    for (const sidecar of started) if (sidecar.exitCode === null && sidecar.signalCode === null) sidecar.kill('SIGKILL');
    await upstream?.close();
  });

  /** A gw-sidecar process on the config folder; `output` collects what it prints. */
  async function startSidecarProcess(env: Record<string, string>): Promise<{ listen: number; adminPort: number; health: number; output: () => string }> {
    const [listen, adminPort, health] = await Promise.all([freePort(), freePort(), freePort()]);
    let output = '';
    child = spawn(
      process.execPath,
      ['sidecar/main.ts', '--config', config, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${adminPort}`, '--health-listen', `127.0.0.1:${health}`],
      { cwd: root, env: { PATH: process.env.PATH, GW_LOG_LEVEL: 'info', GW_ADMIN_SECRET: 'tls-admin-secret', GW_WORKERS: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    started.push(child);
    child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
    return { listen, adminPort, health, output: () => output };
  }

  async function stopSidecarProcess(): Promise<void> {
    child!.kill('SIGTERM');
    expect(await new Promise((resolve) => child!.once('exit', resolve))).toBe(0);
  }

  it.each([
    ['a CA it does not trust', () => redis.url, (): Record<string, string> => ({}), /^(connecting|reconnecting): .*certificate/],
    ['a wrong password', () => redis.url.replace(encodeURIComponent(password), 'not-the-password'), () => ({ NODE_EXTRA_CA_CERTS: join(dir, 'ca.crt') }), /^(connecting|reconnecting): WRONGPASS/],
  ])('with %s, /readyz names the cause beside the connection state (failing open, it stays ready)', async (_case, url, env, cause) => {
    const { health, output } = await startSidecarProcess({ GW_REDIS_URL: url(), GW_REDIS_FAILURE_MODE: 'open', ...env() });
    const redisProblem = async (): Promise<string | undefined> => {
      const ready = await call(`http://127.0.0.1:${health}/readyz`).catch(() => undefined);
      if (ready?.status !== 200) return undefined;
      return (ready.json() as { problems: { subject: string; reason: string }[] }).problems.find((p) => p.subject === 'Redis')?.reason;
    };
    await eventually(async () => cause.test((await redisProblem()) ?? ''), 20_000, `the Redis problem names the cause: ${await redisProblem()}`);
    expect(await redisProblem()).toMatch(/; requests admitted \(redis_failure_mode open\)$/);
    expect(output()).not.toContain(password);
    await stopSidecarProcess();
  });

  it('limits exactly over TLS, creates and serves a key with its quota, and is refused nothing', async () => {
    await admin.call('ACL', 'LOG', 'RESET');
    const { listen, adminPort, health, output: printed } = await startSidecarProcess({ GW_REDIS_URL: redis.url, NODE_EXTRA_CA_CERTS: join(dir, 'ca.crt'), GW_REDIS_FAILURE_MODE: 'closed' });
    const proxy = `http://127.0.0.1:${listen}`;
    await eventually(async () => (await call(`http://127.0.0.1:${health}/readyz`).catch(() => ({ status: 0 }))).status === 200, 20_000, 'ready');

    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await call(`${proxy}/tls-open/x`)).status);
    expect(statuses, printed()).toEqual([200, 200, 429]);

    const created = await call(`http://127.0.0.1:${adminPort}/admin/org/keys`, {
      method: 'POST',
      headers: { 'admin-auth': 'tls-admin-secret', 'content-type': 'application/json' },
      body: JSON.stringify({ alias: 'tls-key', quota_max: 1, quota_renewal_rate: 3600, access_rights: { 'tls-keyed': { api_id: 'tls-keyed', api_name: 'tls-keyed' } } }),
    });
    expect(created.status, created.text).toBe(200);
    const { key_id: raw, key_hash: hash } = created.json() as { key_id: string; key_hash: string };
    expect(await admin.exists(`gw:session:${hash}`)).toBe(1);
    await eventually(async () => (await call(`${proxy}/tls-keyed/x`, { headers: { authorization: raw } })).status === 200, 10_000, 'the new key served');
    expect((await call(`${proxy}/tls-keyed/x`, { headers: { authorization: raw } })).status).toBe(403);

    const output = printed();
    expect(output).toContain('redis connected');
    // Session changes are reported to it, within these rules (docs/architecture.md#sessions).
    expect(output).toContain('Redis reports session changes');
    expect(output).not.toMatch(/NOPERM|certificate|self.signed/i);
    expect(output).not.toContain(password);
    expect(await deniedSinceReset()).toEqual([]);
    await stopSidecarProcess();
  });
});
