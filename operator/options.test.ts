import { describe, expect, it } from 'vitest';
import { helpText, OptionsError, parseOptions } from './options.ts';

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
    expect(() => parseOptions([], { GW_WEBHOOK: 'false' })).toThrow(/--redis-url \(GW_REDIS_URL\)/);
    expect(() => parseOptions([], { ...base, GW_HEALTH_LISTEN: 'nope' })).toThrow(OptionsError);
    expect(() => parseOptions(['--no-such-flag'], base)).toThrow(OptionsError);
    expect(() => parseOptions([], { GW_REDIS_URL: 'redis://r:6379' })).toThrow(/--webhook-service|GW_WEBHOOK_URL/);
    expect(() => parseOptions([], { ...base, GW_WEBHOOK_URL: 'http://127.0.0.1:1/mutate' })).toThrow(/GW_WEBHOOK_URL/);
  });

  it('--help lists every flag with its variable', () => {
    expect(parseOptions(['--help'], {})).toBe('help');
    const text = helpText();
    for (const needle of ['--redis-url', 'GW_REDIS_URL', '--watch-namespaces', 'GW_WATCH_NAMESPACES', '--webhook-url', 'GW_LEADER_ELECTION', 'GW_SIDECAR_IMAGE']) {
      expect(text).toContain(needle);
    }
  });
});
