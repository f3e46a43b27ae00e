import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { stepFailed } from './errors.ts';
import { ensureRedisServer } from './install-redis.ts';
import { freePort, withPortRetry } from './ports.ts';
import { serverDir, spawnServer, type ServerProcess } from './procs.ts';
import { ping } from './redis.ts';
import { waitReady } from './wait-ready.ts';
import { findOnPath } from './which.ts';

/**
 * Redis in the topologies GW_REDIS_URL can name besides one server: a 3-master Cluster and
 * a master + replica watched by a Sentinel, plus a password-protected server (the first
 * two take a password too, as the Helm chart's URLs can carry one). Every
 * process goes through procs.ts (own group, pid file, killed with the run) and lives in a
 * folder of the session folder that dispose() removes.
 */

const READY_TIMEOUT_MS = 20_000;
const FORM_TIMEOUT_MS = 30_000;
const run = promisify(execFile);

export interface RedisClusterHandle {
  /** `redis+cluster://[:password@]` naming the first two masters only: the client discovers the third. */
  url: string;
  ports: number[];
  /** Stops the master on `port` (no replica takes over: its slots go unserved). */
  stopNode(port: number): Promise<void>;
  dispose(): Promise<void>;
}

export interface RedisSentinelHandle {
  /** `redis+sentinel://[:password@]127.0.0.1:<sentinel>/<masterName>`. */
  url: string;
  masterName: string;
  sentinelPort: number;
  /** Ports of the two data servers (initially master, replica). */
  dataPorts: number[];
  /** The master's port as the sentinel reports it. */
  masterPort(): Promise<number>;
  /** Forces a failover and resolves with the new master's port once it acts as master. */
  failover(timeoutMs?: number): Promise<number>;
  /** Stops the master process; resolves with the new master's port once the sentinel has promoted the replica. */
  stopMaster(timeoutMs?: number): Promise<number>;
  dispose(): Promise<void>;
}

export interface PasswordRedisHandle {
  url: string;
  port: number;
  password: string;
  dispose(): Promise<void>;
}

interface Node {
  port: number;
  proc: ServerProcess;
}

/** One redis-server on a free port; `args` gets the port picked (retried if it was taken). */
async function launch(
  dir: string,
  name: string,
  args: (port: number) => Promise<string[]> | string[],
  ready: (port: number) => Promise<boolean> = ping,
): Promise<Node> {
  const binary = await ensureRedisServer();
  return withPortRetry(`start-${name}`, async () => {
    const port = await freePort();
    const proc = spawnServer({ name: 'redis-server', command: binary, args: await args(port), logPath: join(dir, `${name}-${port}.log`) });
    await waitReady({ step: `start-${name}`, proc, timeoutMs: READY_TIMEOUT_MS, ready: () => ready(port) });
    return { port, proc };
  });
}

/** With a password, replicas need it too (masterauth) to sync from their master. */
const baseArgs = (dir: string, port: number, password?: string): string[] => [
  '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--dir', dir,
  ...(password ? ['--requirepass', password, '--masterauth', password] : []),
];

const auth = (password?: string): string => (password ? `:${encodeURIComponent(password)}@` : '');

/** Readiness: PING, after AUTH when the server has a password. */
const probe = (password?: string) => (password ? (port: number) => withAdmin(port, async (r) => (await r.ping()) === 'PONG', password) : ping);

/** A short-lived admin connection that never retries: the caller polls. */
async function withAdmin<T>(port: number, use: (redis: Redis) => Promise<T>, password?: string): Promise<T> {
  const redis = new Redis({ host: '127.0.0.1', port, password, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    return await use(redis);
  } finally {
    redis.disconnect();
  }
}

async function pollUntil(step: string, logPath: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw stepFailed(step, logPath, `not done after ${timeoutMs} ms`);
    await sleep(100);
  }
}

async function stopAll(nodes: readonly Node[], dir: string): Promise<void> {
  await Promise.allSettled(nodes.map((n) => n.proc.stop(5_000)));
  rmSync(dir, { recursive: true, force: true });
}

/** Starts nodes with `start` one by one; on a failure stops those already up and rethrows. */
async function startEach(nodes: Node[], dir: string, starts: Array<() => Promise<Node>>): Promise<void> {
  try {
    for (const start of starts) nodes.push(await start());
  } catch (err) {
    await stopAll(nodes, dir);
    throw err;
  }
}

export interface TopologyOptions {
  /** requirepass (and masterauth) of the data servers; sentinels take none. */
  password?: string;
}

/** Three masters, no replicas, slots split by `redis-cli --cluster create`. */
export async function startRedisCluster(opts: TopologyOptions = {}): Promise<RedisClusterHandle> {
  const { password } = opts;
  const dir = serverDir('redis-cluster');
  const nodes: Node[] = [];
  // The bus port is set explicitly: port + 10000 could be above 65535 or taken.
  const clusterArgs = async (port: number): Promise<string[]> => [
    ...baseArgs(dir, port, password),
    '--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`),
    '--cluster-port', String(await freePort()), '--cluster-node-timeout', '2000',
  ];
  await startEach(nodes, dir, [0, 1, 2].map(() => () => launch(dir, 'redis-cluster', clusterArgs, probe(password))));
  const logPath = join(dir, 'cluster-create.log');
  try {
    const cli = findOnPath('redis-cli') ?? '/usr/bin/redis-cli';
    const create = await run(cli, ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], {
      timeout: FORM_TIMEOUT_MS,
      // REDISCLI_AUTH rather than -a: the password stays off the command line.
      env: password ? { ...process.env, REDISCLI_AUTH: password } : process.env,
    });
    writeFileSync(logPath, create.stdout + create.stderr);
    const formed = (port: number): Promise<boolean> => withAdmin(port, async (r) => String(await r.cluster('INFO')).includes('cluster_state:ok'), password);
    await pollUntil('form-redis-cluster', logPath, FORM_TIMEOUT_MS, async () => (await Promise.all(nodes.map((n) => formed(n.port)))).every(Boolean));
  } catch (err) {
    await stopAll(nodes, dir);
    throw err;
  }
  const ports = nodes.map((n) => n.port);
  return {
    url: `redis+cluster://${auth(password)}127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}`,
    ports,
    stopNode: async (port) => nodes.find((n) => n.port === port)?.proc.stop(5_000),
    dispose: () => stopAll(nodes, dir),
  };
}

const replicationField = (info: string, field: string): string | undefined => new RegExp(`^${field}:(.*)$`, 'm').exec(info)?.[1]?.trim();

function sentinelConfig(dir: string, port: number, masterName: string, masterPort: number, password?: string): string[] {
  const path = join(dir, `sentinel-${port}.conf`);
  // Sentinel rewrites its own config file (it must be writable): one per attempt.
  writeFileSync(
    path,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${masterName} 127.0.0.1 ${masterPort} 1`,
      `sentinel down-after-milliseconds ${masterName} 1000`,
      `sentinel failover-timeout ${masterName} 10000`,
      ...(password ? [`sentinel auth-pass ${masterName} ${password}`] : []),
      '',
    ].join('\n'),
  );
  return [path, '--sentinel'];
}

/** A master and one replica, watched by one sentinel (quorum 1). */
export async function startRedisSentinel(opts: TopologyOptions & { masterName?: string } = {}): Promise<RedisSentinelHandle> {
  const { password, masterName = 'mymaster' } = opts;
  const dir = serverDir('redis-sentinel');
  const nodes: Node[] = [];
  await startEach(nodes, dir, [() => launch(dir, 'redis-master', (port) => baseArgs(dir, port, password), probe(password))]);
  const first = nodes[0]!.port;
  const replicaLinked = async (port: number): Promise<boolean> =>
    replicationField(await withAdmin(port, (r) => r.info('replication'), password), 'master_link_status') === 'up';
  await startEach(nodes, dir, [() => launch(dir, 'redis-replica', (port) => [...baseArgs(dir, port, password), '--replicaof', '127.0.0.1', String(first)], replicaLinked)]);
  await startEach(nodes, dir, [() => launch(dir, 'redis-sentinel', (port) => sentinelConfig(dir, port, masterName, first, password))]);
  const sentinelPort = nodes[2]!.port;
  const sentinelLog = nodes[2]!.proc.logPath;
  const dataPorts = [first, nodes[1]!.port];
  const askSentinel = <T>(use: (r: Redis) => Promise<T>): Promise<T> => withAdmin(sentinelPort, use);
  const masterPort = async (): Promise<number> => {
    const addr = (await askSentinel((r) => r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', masterName))) as [string, string];
    return Number(addr[1]);
  };
  // A failover needs a replica the sentinel has seen and found healthy.
  const replicaKnown = (): Promise<boolean> =>
    askSentinel(async (r) => {
      const replicas = (await r.call('SENTINEL', 'REPLICAS', masterName)) as string[][];
      return replicas.some((fields) => fields[fields.indexOf('flags') + 1] === 'slave');
    });
  try {
    await pollUntil('sentinel-sees-replica', sentinelLog, FORM_TIMEOUT_MS, replicaKnown);
  } catch (err) {
    await stopAll(nodes, dir);
    throw err;
  }
  const newMaster = async (before: number, deadline: number): Promise<number> => {
    let after = before;
    await pollUntil('sentinel-new-master', sentinelLog, Math.max(1, deadline - Date.now()), async () => {
      after = await masterPort();
      if (after === before) return false;
      return replicationField(await withAdmin(after, (r) => r.info('replication'), password), 'role') === 'master';
    });
    return after;
  };
  const failover = async (timeoutMs = 30_000): Promise<number> => {
    const before = await masterPort();
    const deadline = Date.now() + timeoutMs;
    // NOGOODSLAVE until the sentinel has a recent INFO from the replica: retry.
    await pollUntil('sentinel-failover', sentinelLog, timeoutMs, () => askSentinel(async (r) => (await r.call('SENTINEL', 'FAILOVER', masterName)) === 'OK'));
    return newMaster(before, deadline);
  };
  const stopMaster = async (timeoutMs = 30_000): Promise<number> => {
    const before = await masterPort();
    const deadline = Date.now() + timeoutMs;
    await nodes.find((n) => n.port === before)?.proc.stop(5_000);
    return newMaster(before, deadline);
  };
  return {
    url: `redis+sentinel://${auth(password)}127.0.0.1:${sentinelPort}/${masterName}`,
    masterName,
    sentinelPort,
    dataPorts,
    masterPort,
    failover,
    stopMaster,
    dispose: () => stopAll(nodes, dir),
  };
}

/** One server that requires `password` (AUTH). */
export async function startRedisWithPassword(password: string): Promise<PasswordRedisHandle> {
  const dir = serverDir('redis-auth');
  const nodes: Node[] = [];
  await startEach(nodes, dir, [() => launch(dir, 'redis-auth', (port) => baseArgs(dir, port, password), probe(password))]);
  const port = nodes[0]!.port;
  return { url: `redis://${auth(password)}127.0.0.1:${port}`, port, password, dispose: () => stopAll(nodes, dir) };
}

export interface TlsRedisHandle {
  /** `rediss://<user>:<password>@127.0.0.1:<port>`: the ACL user gw runs as, over TLS. */
  url: string;
  /** `redis://<user>:<password>@127.0.0.1:<plainPort>`: the same user on the plain port, for clients in the test's own process (which cannot be told a CA through GW_REDIS_URL). */
  plainUrl: string;
  port: number;
  /** PEM of the CA that signed the server's certificate (clients must trust it). */
  ca: string;
  /** The default user, which may do anything: for the test's own reads (ACL LOG, keys). */
  admin(): Redis;
  dispose(): Promise<void>;
}

export interface TlsRedisOptions {
  /** Folder holding `ca.crt` and `<serverCert>.crt`/`.key` (test/harness/certs.ts CertIssuer). */
  certDir: string;
  serverCert: string;
  user: string;
  password: string;
  /** ACL rules of `user` after `on >password`, e.g. `~gw:* -@all +get`. */
  rules: string[];
}

/**
 * One server with a TLS port and a plain one, that knows an ACL user besides the default
 * one, whose password only the harness holds.
 */
export async function startRedisTls(opts: TlsRedisOptions): Promise<TlsRedisHandle> {
  const dir = serverDir('redis-tls');
  const nodes: Node[] = [];
  const ca = readFileSync(join(opts.certDir, 'ca.crt'), 'utf8');
  const adminPassword = `admin-${Date.now().toString(36)}`;
  const connectAdmin = (port: number, retry: boolean): Redis =>
    new Redis({ host: '127.0.0.1', port, password: adminPassword, tls: { ca }, lazyConnect: true, maxRetriesPerRequest: retry ? 1 : 0, ...(retry ? {} : { retryStrategy: () => null }) });
  const ready = async (port: number): Promise<boolean> => {
    const redis = connectAdmin(port, false);
    // A server not listening yet is the answer `false`: connect() rejects with it, and the
    // client's error event would otherwise be reported as unhandled.
    redis.on('error', () => undefined);
    try {
      await redis.connect();
      return (await redis.ping()) === 'PONG';
    } catch {
      return false;
    } finally {
      redis.disconnect();
    }
  };
  let plainPort = 0;
  const args = async (port: number): Promise<string[]> => [
    '--port', String((plainPort = await freePort())), '--tls-port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--dir', dir,
    '--tls-cert-file', join(opts.certDir, `${opts.serverCert}.crt`), '--tls-key-file', join(opts.certDir, `${opts.serverCert}.key`),
    '--tls-ca-cert-file', join(opts.certDir, 'ca.crt'), '--tls-auth-clients', 'no',
    '--requirepass', adminPassword,
    '--user', opts.user, 'on', `>${opts.password}`, ...opts.rules,
  ];
  await startEach(nodes, dir, [() => launch(dir, 'redis-tls', args, ready)]);
  const port = nodes[0]!.port;
  const admins: Redis[] = [];
  return {
    url: `rediss://${encodeURIComponent(opts.user)}:${encodeURIComponent(opts.password)}@127.0.0.1:${port}`,
    plainUrl: `redis://${encodeURIComponent(opts.user)}:${encodeURIComponent(opts.password)}@127.0.0.1:${plainPort}`,
    port,
    ca,
    admin: () => {
      const redis = connectAdmin(port, true);
      admins.push(redis);
      return redis;
    },
    dispose: async () => {
      for (const redis of admins) redis.disconnect();
      await stopAll(nodes, dir);
    },
  };
}
