import { createConnection } from 'node:net';
import { join } from 'node:path';
import { rmSync } from 'node:fs';
import { ensureRedisServer } from './install-redis.ts';
import { freePort, withPortRetry, type StartOptions } from './ports.ts';
import { serverDir, spawnServer, type ServerProcess } from './procs.ts';
import { waitReady } from './wait-ready.ts';

export interface RedisHandle {
  url: string;
  port: number;
  /** Stops the server (data is not kept: no persistence). */
  stop(): Promise<void>;
  /** Starts it again on the same port after stop(). */
  start(): Promise<void>;
  /** Pids of the running server processes (empty while stopped). */
  pids(): number[];
  /** Stops the server and removes its folder. */
  dispose(): Promise<void>;
}

const READY_TIMEOUT_MS = 20_000;

export interface RedisStartOptions extends StartOptions {
  /** More of redis-server's command-line settings, such as `['--rename-command', 'FUNCTION', '']`. */
  settings?: readonly string[];
}

/** One Redis on a free loopback port, without persistence, killed with the run. */
export async function startRedisServer(opts: RedisStartOptions = {}): Promise<RedisHandle> {
  const pickPort = opts.pickPort ?? freePort;
  const binary = await ensureRedisServer();
  const dir = serverDir('redis');
  let proc: ServerProcess | undefined;
  const launch = async (port: number): Promise<void> => {
    const p = spawnServer({
      name: 'redis-server',
      command: binary,
      args: ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--dir', dir, ...(opts.settings ?? [])],
      logPath: join(dir, 'redis.log'),
    });
    proc = p;
    await waitReady({ step: 'start-redis', proc: p, timeoutMs: READY_TIMEOUT_MS, ready: () => ping(port) });
  };
  const port = await withPortRetry('start-redis', async () => {
    const candidate = await pickPort();
    await launch(candidate);
    return candidate;
  });
  const stop = async (): Promise<void> => {
    await proc?.stop();
    proc = undefined;
  };
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop,
    start: async () => {
      if (proc && !proc.hasExited()) return;
      await launch(port);
    },
    pids: () => (proc && !proc.hasExited() ? [proc.pid] : []),
    dispose: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** PING over a raw socket: readiness needs no client library and no reconnect logic. */
export function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('error', () => done(false));
    socket.on('data', (chunk) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
    socket.write('PING\r\n');
  });
}
