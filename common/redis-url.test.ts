import { EventEmitter } from 'node:events';
import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import type { Logger } from './logger.ts';
import { ErrorLogGate, RedisUrlError, createRedisClient, handleConnectionErrors, parseRedisUrl, reconnectBackoff } from './redis-url.ts';

describe('parseRedisUrl', () => {
  it.each([
    ['redis://127.0.0.1:6379', { mode: 'standalone', url: 'redis://127.0.0.1:6379' }],
    ['rediss://:pw@redis.example:6380/2', { mode: 'standalone', url: 'rediss://:pw@redis.example:6380/2' }],
    [
      'redis+sentinel://:s3cret@s1:26379,s2:26380/mymaster',
      { mode: 'sentinel', sentinels: [{ host: 's1', port: 26379 }, { host: 's2', port: 26380 }], name: 'mymaster', password: 's3cret', db: 0, tls: false },
    ],
    ['redis+sentinel://s1,[::1]:5000/gw-master/3', { mode: 'sentinel', sentinels: [{ host: 's1', port: 26379 }, { host: '::1', port: 5000 }], name: 'gw-master', password: undefined, db: 3, tls: false }],
    ['rediss+cluster://:p%40ss@n1:7000,n2:7001,n3', { mode: 'cluster', nodes: [{ host: 'n1', port: 7000 }, { host: 'n2', port: 7001 }, { host: 'n3', port: 6379 }], password: 'p@ss', tls: true }],
  ])('%s', (url, want) => {
    expect(parseRedisUrl(url)).toEqual(want);
  });

  it.each([
    ['http://redis:6379', 'must start with redis://'],
    ['redis+sentinel://:pw@s1:26379', 'needs the path /<master name>'],
    ['redis+sentinel://s1:26379/master/x', 'needs the path /<master name>'],
    ['redis+cluster://n1:6379/1', 'takes no path'],
    ['redis+cluster://:hunter2@n1:99999', 'invalid host:port "n1:99999"'],
    ['redis+cluster://:hunter2@n1:6379,,n2', 'invalid host:port ""'],
    ['redis://:hunter2@127.0.0.1:notaport', 'is not a valid URL'],
    ['redis://:hunter2@127.0.0.1:99999', 'is not a valid URL'],
    ['redis://:hunter2@127.0.0.1:0', 'from 1 to 65535'],
    ['redis://:hunter2%ZZ@127.0.0.1:6379', 'malformed %-escape'],
    ['redis://:hunter2@127.0.0.1:6379/abc', 'database number'],
    ['rediss://:hunter2@:6379', 'is not a valid URL'],
  ])('rejects %s with a message that does not repeat the password', (url, message) => {
    expect(() => parseRedisUrl(url)).toThrow(RedisUrlError);
    expect(() => parseRedisUrl(url)).toThrow(message);
    try {
      parseRedisUrl(url);
    } catch (err) {
      expect((err as Error).message).not.toMatch(/hunter2|:pw@/);
    }
  });
});

describe('createRedisClient', () => {
  it('makes a sentinel client that asks the sentinels for the master', () => {
    const client = createRedisClient('redis+sentinel://:pw@s1:26379,s2:26379/mymaster/1', { lazyConnect: true, commandTimeout: 250 });
    expect(client).toBeInstanceOf(Redis);
    expect((client as Redis).options).toMatchObject({ sentinels: [{ host: 's1', port: 26379 }, { host: 's2', port: 26379 }], name: 'mymaster', db: 1, password: 'pw', commandTimeout: 250 });
    client.disconnect();
  });

  it('makes a cluster client with the options on every node and the cluster-level ones lifted', () => {
    const client = createRedisClient('rediss+cluster://:pw@n1:7000,n2:7001', { lazyConnect: true, enableAutoPipelining: true, commandTimeout: 250 });
    expect(client).toBeInstanceOf(Cluster);
    const cluster = client as Cluster;
    expect(cluster.options).toMatchObject({ lazyConnect: true, enableAutoPipelining: true });
    expect(cluster.options.redisOptions).toMatchObject({ password: 'pw', commandTimeout: 250, tls: {} });
    client.disconnect();
  });
});

describe('reconnectBackoff', () => {
  it('tries again within 1 s, whatever the attempt, so a gateway counts again within a second of Redis being back', () => {
    const waits = Array.from({ length: 50 }, (_, i) => reconnectBackoff(i + 1));
    expect(waits.slice(0, 4)).toEqual([200, 400, 800, 1000]);
    expect(Math.max(...waits)).toBe(1000);
  });
});

describe('handleConnectionErrors', () => {
  it('logs one line per interval for every connection that shares a gate, a connection made anew included', () => {
    let now = 0;
    const gate = new ErrorLogGate(5_000, () => now);
    const lines: string[] = [];
    const log = { warn: (_fields: unknown, msg: string) => lines.push(msg) } as unknown as Logger;
    const refused = new Error('connect ECONNREFUSED 127.0.0.1:7001');
    // A master's feed dropped and made again at each slot refresh, 10 times a second for 4 s.
    for (; now < 4_000; now += 100) {
      const connection = new EventEmitter();
      handleConnectionErrors(connection as unknown as Redis, log, gate);
      connection.emit('error', refused);
    }
    expect(lines).toEqual(['redis unavailable']);
    for (; now < 10_000; now += 100) {
      const connection = new EventEmitter();
      handleConnectionErrors(connection as unknown as Redis, log, gate);
      connection.emit('error', refused);
    }
    // At 0 and at 5 s.
    expect(lines).toHaveLength(2);
  });

  it('a gate is idle once its interval has passed since its last line', () => {
    let now = 0;
    const gate = new ErrorLogGate(5_000, () => now);
    expect(gate.take()).toBe(true);
    now = 4_999;
    expect(gate.idle).toBe(false);
    now = 5_000;
    expect(gate.idle).toBe(true);
  });
});
