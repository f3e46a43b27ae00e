import { describe, expect, it } from 'vitest';
import { OptionsError } from '../common/cli.ts';
import { helpText, parseOptions } from './options.ts';

const base = { GW_REDIS_URL: 'redis://127.0.0.1:6379', GW_WEBHOOK_SERVICE: 'gw-webhook' };

describe('operator options', () => {
  it('reads the environment, with defaults', () => {
    const options = parseOptions([], { ...base, GW_WATCH_NAMESPACES: 'a, b,,c', GW_OPERATOR_NAMESPACE: 'gw-system' });
    expect(options).toMatchObject({
      redisUrl: 'redis://127.0.0.1:6379',
      watchNamespaces: ['a', 'b', 'c'],
      namespace: 'gw-system',
      healthListen: '0.0.0.0:8082',
      webhookListen: '0.0.0.0:9443',
      webhookFailurePolicy: 'Fail',
      leaderElection: true,
      webhook: true,
      resyncSeconds: 30,
      orphanSessionSweepSeconds: 300,
    });
    expect(parseOptions([], base)).toMatchObject({ watchNamespaces: [] });
  });

  it('lets flags win over the environment', () => {
    const options = parseOptions(['--webhook-failure-policy', 'Ignore', '--leader-election', 'false', '--resync-seconds', '2'], {
      ...base,
      GW_WEBHOOK_FAILURE_POLICY: 'Fail',
    });
    expect(options).toMatchObject({ webhookFailurePolicy: 'Ignore', leaderElection: false, resyncSeconds: 2 });
  });

  it('names the flag and variable of an invalid value', () => {
    expect(() => parseOptions([], { ...base, GW_WEBHOOK_FAILURE_POLICY: 'Maybe' })).toThrow(/--webhook-failure-policy \(GW_WEBHOOK_FAILURE_POLICY\)/);
    expect(() => parseOptions([], { GW_WEBHOOK: 'false' })).toThrow(/^--redis-url \(GW_REDIS_URL\): is required$/);
    expect(() => parseOptions([], { ...base, GW_HEALTH_LISTEN: 'nope' })).toThrow(OptionsError);
    expect(() => parseOptions(['--no-such-flag'], base)).toThrow(OptionsError);
    expect(() => parseOptions([], { GW_REDIS_URL: 'redis://r:6379' })).toThrow(/--webhook-service|GW_WEBHOOK_URL/);
    expect(() => parseOptions([], { ...base, GW_WEBHOOK_URL: 'http://127.0.0.1:1/mutate' })).toThrow(/^--webhook-url \(GW_WEBHOOK_URL\): must be an https:\/\/ URL/);
    // Namespaces no object can be in: the operator would start, say it is ready, and do nothing.
    expect(() => parseOptions(['--watch-namespaces', 'apps,Demo'], base)).toThrow(/^--watch-namespaces \(GW_WATCH_NAMESPACES\): 1: must be a namespace name/);
    expect(() => parseOptions(['--watch-namespaces', 'x_y'], base)).toThrow(/^--watch-namespaces \(GW_WATCH_NAMESPACES\): 0: must be a namespace name/);
    expect(() => parseOptions(['--namespace', 'Bad_NS'], base)).toThrow(/^--namespace \(GW_OPERATOR_NAMESPACE\): must be a namespace name/);
    expect(() => parseOptions(['--namespace', 'x'.repeat(64)], base)).toThrow(/must be a namespace name/);
    expect(parseOptions(['--watch-namespaces', ' apps , team-2 '], base)).toMatchObject({ watchNamespaces: ['apps', 'team-2'] });
    expect(() => parseOptions([], { ...base, GW_LOG_LEVEL: 'verbose' })).toThrow(/^GW_LOG_LEVEL: /);
    expect(parseOptions([], { ...base, GW_LOG_LEVEL: 'warn' })).toMatchObject({ logLevel: 'warn' });
  });

  it('refuses a namespace list of commas alone, which would watch every namespace', () => {
    for (const list of [',', ' , ', ' ']) {
      expect(() => parseOptions(['--watch-namespaces', list], base)).toThrow(/^--watch-namespaces \(GW_WATCH_NAMESPACES\): names no namespace \(leave it unset to watch all\)$/);
      expect(() => parseOptions([], { ...base, GW_WATCH_NAMESPACES: list })).toThrow(/names no namespace/);
    }
  });

  it('refuses periods a timer cannot hold (it would fire every millisecond) and periods under a second', () => {
    for (const [flag, variable] of [['resync-seconds', 'GW_RESYNC_SECONDS'], ['orphan-session-sweep-seconds', 'GW_ORPHAN_SESSION_SWEEP_SECONDS'], ['lease-duration-seconds', 'GW_LEASE_DURATION_SECONDS']]) {
      expect(() => parseOptions([`--${flag}`, '3000000'], base)).toThrow(new RegExp(`^--${flag} \\(${variable}\\): must be a (whole number|number of seconds) from 1 to 2,147,483, in decimal digits$`));
      expect(() => parseOptions([`--${flag}`, '0'], base)).toThrow(new RegExp(`^--${flag} \\(${variable}\\): must be a (whole number|number of seconds) from 1 to 2,147,483`));
    }
    expect(() => parseOptions(['--resync-seconds', '0.001'], base)).toThrow(/^--resync-seconds \(GW_RESYNC_SECONDS\): must be a number of seconds from 1 to 2,147,483/);
    expect(() => parseOptions(['--lease-duration-seconds', '1.5'], base)).toThrow(/^--lease-duration-seconds \(GW_LEASE_DURATION_SECONDS\): must be a whole number from 1 to 2,147,483/);
    expect(parseOptions(['--resync-seconds', '2147483', '--orphan-session-sweep-seconds', '1.5'], base)).toMatchObject({ resyncSeconds: 2_147_483, orphanSessionSweepSeconds: 1.5 });
  });

  it('takes numbers in decimal digits only: no hex, exponent, sign, Infinity or blank', () => {
    const numeric = [['resync-seconds', 'GW_RESYNC_SECONDS'], ['lease-duration-seconds', 'GW_LEASE_DURATION_SECONDS'], ['concurrency', 'GW_RECONCILE_CONCURRENCY'], ['sidecar-warm-up-requests', 'GW_SIDECAR_WARM_UP_REQUESTS'], ['sidecar-session-cache-size', 'GW_SIDECAR_SESSION_CACHE_SIZE']];
    for (const [flag, variable] of numeric) {
      for (const bad of ['0x10', '1e2', '+5', '-5', 'Infinity', ' ', ' 7', '7 ', '1_000', '.5', '5.']) {
        expect(() => parseOptions([`--${flag}=${bad}`], base), `--${flag} ${JSON.stringify(bad)}`).toThrow(new RegExp(`^--${flag} \\(${variable}\\): must be a .* in decimal digits$`));
        expect(() => parseOptions([], { ...base, [variable!]: bad }), `${variable}=${JSON.stringify(bad)}`).toThrow(new RegExp(`^--${flag} \\(${variable}\\): must be`));
      }
    }
    expect(parseOptions(['--concurrency', '007', '--sidecar-warm-up-requests', '0'], base)).toMatchObject({ concurrency: 7, sidecarWarmUpRequests: 0 });
    expect(() => parseOptions(['--concurrency', '1001'], base)).toThrow(/^--concurrency \(GW_RECONCILE_CONCURRENCY\): must be a whole number from 1 to 1,000, in decimal digits$/);
  });

  it('refuses an empty flag, which would hide its variable', () => {
    expect(() => parseOptions(['--health-listen='], { ...base, GW_HEALTH_LISTEN: '127.0.0.1:9000' })).toThrow(/^--health-listen \(GW_HEALTH_LISTEN\): is empty; leave the flag out for its default$/);
    expect(parseOptions([], { ...base, GW_HEALTH_LISTEN: '' })).toMatchObject({ healthListen: '0.0.0.0:8082' });
  });

  it('reads the sidecar resources as JSON, the numbers Helm writes included, and refuses what is not resources', () => {
    expect(parseOptions([], base)).toMatchObject({ sidecarResources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '256Mi' } } });
    expect(parseOptions([], { ...base, GW_SIDECAR_RESOURCES: '{"requests":{"cpu":1},"limits":{"memory":"1Gi"}}' }))
      .toMatchObject({ sidecarResources: { requests: { cpu: '1' }, limits: { memory: '1Gi' } } });
    for (const bad of ['{', '{"limits":{"memory":"lots"}}', '{"limits":{"gpu":"1"}}', '[]']) {
      expect(() => parseOptions([], { ...base, GW_SIDECAR_RESOURCES: bad })).toThrow(/--sidecar-resources \(GW_SIDECAR_RESOURCES\)/);
    }
  });

  it('refuses a default no sidecar could run with: a memory limit under 64Mi, a request above its limit', () => {
    const refusal = (resources: string): string => {
      try {
        parseOptions([], { ...base, GW_SIDECAR_RESOURCES: resources });
      } catch (error) {
        expect(error).toBeInstanceOf(OptionsError);
        return (error as Error).message;
      }
      throw new Error(`${resources} was taken`);
    };
    expect(refusal('{"limits":{"memory":"32Mi"}}')).toBe('--sidecar-resources (GW_SIDECAR_RESOURCES): the gw-sidecar memory limit 32Mi is under 64Mi, less than its Node process holds idle (about 55 MiB): it would be killed as it starts');
    expect(refusal('{"requests":{"memory":"512Mi"},"limits":{"memory":"256Mi"}}')).toContain('the gw-sidecar memory request 512Mi is above its limit 256Mi');
    expect(refusal('{"requests":{"cpu":"2"},"limits":{"cpu":"500m"}}')).toContain('the gw-sidecar cpu request 2 is above its limit 500m');
    expect(parseOptions([], { ...base, GW_SIDECAR_RESOURCES: '{"requests":{"memory":"64Mi"},"limits":{"memory":"64Mi"}}' }))
      .toMatchObject({ sidecarResources: { limits: { memory: '64Mi' } } });
  });

  it('accepts the Sentinel and Cluster URLs the chart renders', () => {
    const sentinel = 'redis+sentinel://:s3cret@sentinel-0:26379,sentinel-1:26379/mymaster/2';
    expect(parseOptions([], { ...base, GW_REDIS_URL: sentinel })).toMatchObject({ redisUrl: sentinel });
    const cluster = 'rediss+cluster://:s3cret@node-0:6379,node-1:6379';
    expect(parseOptions([], { ...base, GW_REDIS_URL: cluster, GW_SIDECAR_REDIS_URL: sentinel })).toMatchObject({ redisUrl: cluster, sidecarRedisUrl: sentinel });
  });

  it('refuses a bad Redis URL without repeating it (it may hold a password)', () => {
    const bad = (env: NodeJS.ProcessEnv): string => {
      try {
        parseOptions([], { ...base, ...env });
      } catch (error) {
        expect(error).toBeInstanceOf(OptionsError);
        return (error as Error).message;
      }
      throw new Error('no error');
    };
    const noMaster = bad({ GW_REDIS_URL: 'redis+sentinel://:s3cret@sentinel-0:26379' });
    expect(noMaster).toMatch(/--redis-url \(GW_REDIS_URL\): a redis\+sentinel:\/\/ URL needs the path/);
    expect(noMaster).not.toContain('s3cret');
    expect(bad({ GW_REDIS_URL: 'http://:s3cret@redis:6379' })).toMatch(/--redis-url \(GW_REDIS_URL\): GW_REDIS_URL must start with redis:\/\//);
    expect(bad({ GW_SIDECAR_REDIS_URL: 'redis+cluster://:s3cret@node-0:6379/1' })).toMatch(/--sidecar-redis-url \(GW_SIDECAR_REDIS_URL\): a redis\+cluster/);
  });

  it('--help lists every flag with its variable', () => {
    expect(parseOptions(['--help'], {})).toBe('help');
    const text = helpText();
    for (const needle of ['--redis-url', 'GW_REDIS_URL', '--watch-namespaces', 'GW_WATCH_NAMESPACES', '--webhook-url', 'GW_LEADER_ELECTION', 'GW_SIDECAR_IMAGE']) {
      expect(text).toContain(needle);
    }
  });
});
