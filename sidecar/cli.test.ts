import { describe, expect, it } from 'vitest';
import { splitHostPort } from '../common/listen.ts';
import { helpText, parseSidecarArgs } from './cli.ts';

/** What a gateway in a cluster (no --config) must be given: the Redis its sessions are in. */
const inCluster = { GW_REDIS_URL: 'redis://127.0.0.1:6379' };

describe('sidecar flags', () => {
  it('flag > env > default', () => {
    const options = parseSidecarArgs(['--listen', '127.0.0.1:9999'], { ...inCluster, GW_LISTEN: '0.0.0.0:1', GW_ADMIN_LISTEN: '0.0.0.0:2', GW_APIS: 'a, b' });
    expect(options).toMatchObject({ listen: '127.0.0.1:9999', adminListen: '0.0.0.0:2', healthListen: '0.0.0.0:8082', namespace: 'default' });
    expect(options).toMatchObject({ apis: new Set(['a', 'b']) });
    expect(parseSidecarArgs([], { ...inCluster, GW_APIS: '*' })).toMatchObject({ apis: '*' });
  });

  it('listens on loopback by default standalone (--config or GW_CONFIG_DIR), on every interface in a cluster', () => {
    const loopback = { listen: '127.0.0.1:8080', adminListen: '127.0.0.1:8081', healthListen: '127.0.0.1:8082' };
    expect(parseSidecarArgs(['--config', 'examples'], {})).toMatchObject(loopback);
    expect(parseSidecarArgs([], { GW_CONFIG_DIR: 'examples' })).toMatchObject(loopback);
    expect(parseSidecarArgs([], inCluster)).toMatchObject({ listen: '0.0.0.0:8080', adminListen: '0.0.0.0:8081', healthListen: '0.0.0.0:8082' });
    expect(parseSidecarArgs(['--config', 'examples', '--admin-listen', '0.0.0.0:9081'], {})).toMatchObject({ ...loopback, adminListen: '0.0.0.0:9081' });
    expect(helpText()).toContain('Default: 127.0.0.1:8081 with --config, else 0.0.0.0:8081.');
  });

  it('refuses --apis with --config: a folder is served whole', () => {
    expect(() => parseSidecarArgs(['--config', 'examples', '--apis', 'a,b'], {})).toThrow(/^--apis \(GW_APIS\) selects the compiled ConfigMaps of a cluster/);
    expect(parseSidecarArgs(['--config', 'examples'], { GW_APIS: '*' })).toMatchObject({ apis: '*' });
  });

  it('refuses a --config that is not a folder, naming the flag', () => {
    expect(() => parseSidecarArgs(['--config', 'no-such-folder-here'], {})).toThrow(/^--config \(GW_CONFIG_DIR\): no-such-folder-here is not a folder/);
    expect(() => parseSidecarArgs([], { GW_CONFIG_DIR: 'README.md' })).toThrow(/^--config \(GW_CONFIG_DIR\): README.md is not a folder/);
  });

  it('takes GW_LOG_LEVEL as one of the log levels, info by default, and refuses another naming it', () => {
    expect(parseSidecarArgs([], inCluster)).toMatchObject({ logLevel: 'info' });
    expect(parseSidecarArgs([], { ...inCluster, GW_LOG_LEVEL: 'debug' })).toMatchObject({ logLevel: 'debug' });
    expect(() => parseSidecarArgs([], { ...inCluster, GW_LOG_LEVEL: 'verbose' })).toThrow(/^GW_LOG_LEVEL: .*"fatal"\|"error"\|"warn"\|"info"\|"debug"\|"trace"\|"silent"/);
  });

  it('reads the standalone bearer tokens as JSON, and refuses a bad list naming GW_BEARER_TOKENS', () => {
    const tokens = [{ name: 'ci', token: 'ci-token-0123456789', permissions: ['list:categories'] }];
    expect(parseSidecarArgs([], { ...inCluster, GW_BEARER_TOKENS: JSON.stringify(tokens) })).toMatchObject({ bearerTokens: tokens });
    expect(parseSidecarArgs([], inCluster)).toMatchObject({ bearerTokens: [] });
    expect(() => parseSidecarArgs([], { ...inCluster, GW_BEARER_TOKENS: '[{"name":"ci"}]' })).toThrow(/^GW_BEARER_TOKENS: 0\.token: /);
    expect(() => parseSidecarArgs([], { ...inCluster, GW_LISTEN: 'nope' })).toThrow('--listen (GW_LISTEN): must be HOST:PORT');
    expect(parseSidecarArgs([], { ...inCluster, GW_LISTEN: 'off' })).toMatchObject({ listen: 'off' });
  });

  it('takes a TLS pair only whole, and the TLS listeners only from admin and proxy', () => {
    expect(parseSidecarArgs(['--tls-cert', 'c.pem', '--tls-key', 'k.pem'], inCluster)).toMatchObject({ tlsCertFile: 'c.pem', tlsKeyFile: 'k.pem' });
    expect(() => parseSidecarArgs(['--tls-cert', 'c.pem'], inCluster)).toThrow('--tls-cert (GW_TLS_CERT_FILE) and --tls-key (GW_TLS_KEY_FILE) go together');
    expect(() => parseSidecarArgs([], { ...inCluster, GW_TLS_KEY_FILE: 'k.pem' })).toThrow('go together');
    expect(parseSidecarArgs([], { ...inCluster, GW_TLS_LISTENERS: ' admin ' })).toMatchObject({ tlsListeners: new Set(['admin']) });
    expect(parseSidecarArgs(['--tls-listeners', 'proxy,admin'], inCluster)).toMatchObject({ tlsListeners: new Set(['admin', 'proxy']) });
    expect(() => parseSidecarArgs(['--tls-listeners', 'admin,health'], inCluster)).toThrow('--tls-listeners (GW_TLS_LISTENERS): must be a comma list of admin, proxy (got "admin,health")');
    expect(() => parseSidecarArgs(['--tls-listeners', ','], inCluster)).toThrow('must be a comma list');
  });

  it('takes --workers as a number or auto (the default), and refuses more than one where they cannot serve', () => {
    expect(parseSidecarArgs([], inCluster)).toMatchObject({ workers: 'auto' });
    // Standalone, where Redis is optional: the workers need it all the same.
    const folder = ['--config', 'examples'];
    const redis = ['--redis-url', 'redis://127.0.0.1:6379'];
    expect(parseSidecarArgs(['--workers', '4', ...folder, ...redis], {})).toMatchObject({ workers: 4 });
    expect(parseSidecarArgs([...folder, ...redis], { GW_WORKERS: '2' })).toMatchObject({ workers: 2 });
    expect(parseSidecarArgs(['--workers', '1', ...folder], {})).toMatchObject({ workers: 1 });
    expect(() => parseSidecarArgs(['--workers', 'many', ...folder], {})).toThrow(/^--workers \(GW_WORKERS\): must be auto or a whole number from 1 to 64$/);
    expect(() => parseSidecarArgs(['--workers', '0', ...folder], {})).toThrow(/^--workers \(GW_WORKERS\): /);
    for (const bad of ['0x2', '2e0', ' ', '+2', '2.0']) {
      expect(() => parseSidecarArgs(['--workers', bad, ...folder, ...redis], {}), JSON.stringify(bad)).toThrow(/^--workers \(GW_WORKERS\): must be auto or a whole number from 1 to 64$/);
    }
    expect(() => parseSidecarArgs(['--workers', '2', ...folder], {})).toThrow('--workers (GW_WORKERS) 2 needs --redis-url (GW_REDIS_URL)');
    expect(() => parseSidecarArgs(['--workers', '2', '--listen', 'off', ...folder, ...redis], {})).toThrow('--workers (GW_WORKERS) 2 needs the proxy listener');
    expect(() => parseSidecarArgs(['--workers', '2', '--listen', '127.0.0.1:0', ...folder, ...redis], {})).toThrow('--workers (GW_WORKERS) 2 needs a fixed proxy port');
  });

  it('takes --warm-up-requests and --session-cache-size in decimal digits only', () => {
    expect(parseSidecarArgs(['--warm-up-requests', '0', '--session-cache-size', '500'], inCluster)).toMatchObject({ warmUpRequests: 0, sessionCacheSize: 500 });
    for (const bad of ['0x10', '1e3', ' ', '-1', 'Infinity']) {
      expect(() => parseSidecarArgs([`--warm-up-requests=${bad}`], inCluster), JSON.stringify(bad)).toThrow(/^--warm-up-requests \(GW_WARM_UP_REQUESTS\): must be a whole number from 0 to 1,000,000, in decimal digits$/);
      expect(() => parseSidecarArgs([], { ...inCluster, GW_SESSION_CACHE_SIZE: bad }), JSON.stringify(bad)).toThrow(/^--session-cache-size \(GW_SESSION_CACHE_SIZE\): must be a whole number from 1 to 1,000,000, in decimal digits$/);
    }
  });

  it('refuses a gateway in a cluster without Redis, where its Keys and shared limits are, saying where an injected sidecar gets it', () => {
    expect(() => parseSidecarArgs([], {})).toThrow(/^a gateway in a cluster \(no --config\) needs --redis-url \(GW_REDIS_URL\): .*sidecar\.namespaces$/);
    expect(() => parseSidecarArgs(['--listen', 'off'], { GW_APIS: '*' })).toThrow('needs --redis-url (GW_REDIS_URL)');
    expect(parseSidecarArgs(['--redis-url', 'redis://gw-redis:6379'], {})).toMatchObject({ redisUrl: 'redis://gw-redis:6379' });
    // Standalone, an in-memory store is the embedded default.
    expect(parseSidecarArgs(['--config', 'examples'], {})).not.toHaveProperty('redisUrl', expect.anything());
  });

  it('takes the session cache size as a whole number of sessions, 10,000 by default', () => {
    expect(parseSidecarArgs([], inCluster)).toMatchObject({ sessionCacheSize: 10_000 });
    expect(parseSidecarArgs(['--session-cache-size', '50000'], inCluster)).toMatchObject({ sessionCacheSize: 50_000 });
    expect(parseSidecarArgs([], { ...inCluster, GW_SESSION_CACHE_SIZE: '200' })).toMatchObject({ sessionCacheSize: 200 });
    for (const bad of ['0', '2.5', 'many', '1000001']) expect(() => parseSidecarArgs(['--session-cache-size', bad], inCluster)).toThrow(/^--session-cache-size \(GW_SESSION_CACHE_SIZE\): /);
  });

  it('refuses two of its own listeners on one port, naming both, before anything binds', () => {
    expect(() => parseSidecarArgs(['--listen', '127.0.0.1:18303', '--health-listen', '127.0.0.1:18303'], inCluster)).toThrow(
      '--listen (GW_LISTEN) and --health-listen (GW_HEALTH_LISTEN) both listen on port 18303: give each listener a port of its own',
    );
    // Every interface overlaps any address; 8081 is the admin listener's default.
    expect(() => parseSidecarArgs(['--health-listen', '127.0.0.1:8081'], inCluster)).toThrow(/^--admin-listen \(GW_ADMIN_LISTEN\) and --health-listen/);
    // Two addresses on one port, and ports chosen by the system, do not clash.
    expect(parseSidecarArgs(['--listen', '127.0.0.1:9000', '--admin-listen', '127.0.0.2:9000', '--health-listen', '127.0.0.1:0'], inCluster)).toMatchObject({ listen: '127.0.0.1:9000' });
    expect(parseSidecarArgs(['--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--health-listen', '127.0.0.1:0'], inCluster)).toMatchObject({ healthListen: '127.0.0.1:0' });
  });

  it('refuses a GW_NAMESPACE that cannot be a namespace', () => {
    expect(() => parseSidecarArgs([], { ...inCluster, GW_NAMESPACE: 'Bad_NS' })).toThrow(/^GW_NAMESPACE: must be a namespace name/);
    expect(parseSidecarArgs([], { ...inCluster, GW_NAMESPACE: 'team-2' })).toMatchObject({ namespace: 'team-2' });
  });

  it('refuses an admin or portal key under 16 characters, naming it; empty is no key', () => {
    expect(() => parseSidecarArgs([], { ...inCluster, GW_ADMIN_SECRET: 'a' })).toThrow(/^GW_ADMIN_SECRET: must be 16 characters or more/);
    expect(() => parseSidecarArgs([], { ...inCluster, GW_PORTAL_SECRET: 'p'.repeat(15) })).toThrow(/^GW_PORTAL_SECRET: must be 16 characters or more/);
    const parsed = parseSidecarArgs([], { ...inCluster, GW_ADMIN_SECRET: 'a'.repeat(16), GW_PORTAL_SECRET: '' });
    expect(parsed).toMatchObject({ adminSecret: 'a'.repeat(16) });
    expect(parsed).not.toHaveProperty('portalSecret', expect.any(String));
  });

  it('refuses an admin or portal key no header can carry, naming it: whitespace at an end, a character outside visible ASCII', () => {
    for (const secret of ['admin-secret-0123456789\n', ' admin-secret-0123456789', 'admin-secret-0123456789 ', 'sécret-admin-0123456789', 'admin-secret\t0123456789', 'admin-secret-0123456789\r']) {
      expect(() => parseSidecarArgs([], { ...inCluster, GW_ADMIN_SECRET: secret })).toThrow(/^GW_ADMIN_SECRET: must be visible ASCII characters, with spaces only between them/);
      expect(() => parseSidecarArgs([], { ...inCluster, GW_PORTAL_SECRET: secret })).toThrow(/^GW_PORTAL_SECRET: must be visible ASCII characters/);
    }
    // Headers keep a space inside a value as sent.
    expect(parseSidecarArgs([], { ...inCluster, GW_ADMIN_SECRET: 'admin secret  0123456789~!' })).toMatchObject({ adminSecret: 'admin secret  0123456789~!' });
  });

  it('refuses a bearer token no Authorization header can carry, naming GW_BEARER_TOKENS and the entry', () => {
    for (const token of ['ci-token-0123456789\n', 'ci token 0123456789', 'ci-tøken-0123456789']) {
      const tokens = [{ name: 'ci', token, permissions: ['*'] }];
      expect(() => parseSidecarArgs([], { ...inCluster, GW_BEARER_TOKENS: JSON.stringify(tokens) })).toThrow(/^GW_BEARER_TOKENS: 0\.token: must be visible ASCII characters without spaces/);
    }
  });

  it('--help asks for help; unknown flags throw', () => {
    expect(parseSidecarArgs(['--help'], {})).toBe('help');
    expect(() => parseSidecarArgs(['--nope'], {})).toThrow();
  });

  it('help lists every flag, env var and setting', () => {
    const text = helpText();
    for (const word of ['--config', '--listen', '--admin-listen', '--health-listen', '--redis-url', '--settings', '--apis', 'GW_NAMESPACE', 'GW_ADMIN_SECRET', 'GW_DRL_THRESHOLD', 'GW_FORWARDER', '--tls-cert', '--tls-key', 'GW_TLS_LISTENERS']) {
      expect(text).toContain(word);
    }
  });

  it('splits host:port, IPv6 included', () => {
    expect(splitHostPort('0.0.0.0:8080')).toEqual({ host: '0.0.0.0', port: 8080 });
    expect(splitHostPort('[::1]:81')).toEqual({ host: '::1', port: 81 });
    expect(() => splitHostPort('nope')).toThrow(/HOST:PORT/);
  });
});
