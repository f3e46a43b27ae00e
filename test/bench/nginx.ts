/**
 * The C peer of the proxy rows (issue 13): Debian's nginx, installed by the bench as
 * redis-server is, proxying to the same upstream with a `limit_req` that never refuses, so
 * it does the per-request work of a rate-limited proxy (a shared-memory counter per client)
 * next to gw's.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDebianPackages } from '../harness/install-debian.ts';
import { freePort } from '../harness/ports.ts';
import { waitFor } from './http-load.ts';

const NGINX = '/usr/sbin/nginx';

function config(dir: string, port: number, upstream: string, workers: number): string {
  return `worker_processes ${workers};
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  limit_req_zone $binary_remote_addr zone=bench:1m rate=1000000r/s;
  upstream echo { server ${new URL(upstream).host}; keepalive 64; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:${port};
    # nginx closes a client connection after 1,000 requests by default; autocannon counts the
    # request that meets the close as an error. gw and the forwarder keep connections open.
    keepalive_requests 1000000;
    location / {
      limit_req zone=bench burst=1000000 nodelay;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://echo;
    }
  }
}
`;
}

export interface RunningNginx {
  url: string;
  /** The master's and its workers' process ids. */
  pids: number[];
  stop(): Promise<void>;
}

/** nginx with `workers` worker processes in front of `upstream`, on a free loopback port. */
export async function startNginx(upstream: string, workers: number): Promise<RunningNginx> {
  await ensureDebianPackages({ step: 'install-nginx', packages: ['nginx-light'], provides: [NGINX] });
  const dir = await mkdtemp(join(tmpdir(), 'gw-bench-nginx-'));
  // Run as root, nginx's workers run as nobody, and reach their temp folders through this one.
  await chmod(dir, 0o755);
  const port = await freePort();
  await writeFile(join(dir, 'nginx.conf'), config(dir, port, upstream, workers));
  const child: ChildProcess = spawn(NGINX, ['-c', join(dir, 'nginx.conf'), '-p', dir], { stdio: ['ignore', 'ignore', 'inherit'] });
  const stop = async (): Promise<void> => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  };
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitFor(`${url}/`);
  } catch (err) {
    await stop();
    throw err;
  }
  const master = child.pid!;
  const workerPids = readFileSync(`/proc/${master}/task/${master}/children`, 'utf8').trim().split(' ').filter(Boolean).map(Number);
  return { url, pids: [master, ...workerPids], stop };
}
