/**
 * The C peer of the proxy rows (issue 13): Debian's nginx, installed by the bench as
 * redis-server is, proxying to the same upstream with a `limit_req` that never refuses, so
 * it does the per-request work of a rate-limited proxy (a shared-memory counter per client)
 * next to gw's. The workers suite also runs it as its upstream.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDebianPackages } from '../harness/install-debian.ts';
import { freePort } from '../harness/ports.ts';
import { childPids, waitFor } from './http-load.ts';

const NGINX = '/usr/sbin/nginx';

/**
 * What the server does with a request: proxy it to `upstream` behind the `limit_req` (the
 * peer row), or answer it itself with a fixed JSON body the size of the echo upstream's (an
 * upstream that costs the machine less than the echo server's Node process).
 */
function site(upstream: string | null): { http: string; location: string } {
  if (upstream === null) {
    const body = JSON.stringify({ method: 'GET', path: '/bench', query: '', headers: { host: '127.0.0.1', 'x-request-id': '0'.repeat(36) }, body: '' });
    return { http: '', location: `default_type application/json;\n      return 200 '${body}';` };
  }
  return {
    http: `limit_req_zone $binary_remote_addr zone=bench:1m rate=1000000r/s;
  upstream echo { server ${new URL(upstream).host}; keepalive 64; keepalive_requests 1000000; }`,
    location: `limit_req zone=bench burst=1000000 nodelay;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://echo;`,
  };
}

function config(dir: string, port: number, upstream: string | null, workers: number): string {
  const { http, location } = site(upstream);
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
  ${http}
  server {
    listen 127.0.0.1:${port};
    # nginx closes a client connection after 1,000 requests by default, failing the request
    # a load generator has already sent on it. gw and the forwarder keep connections open.
    keepalive_requests 1000000;
    location / {
      ${location}
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

/**
 * nginx with `workers` worker processes on a free loopback port, in front of `upstream`, or
 * answering by itself when it is null.
 */
export async function startNginx(upstream: string | null, workers: number): Promise<RunningNginx> {
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
  return { url, pids: [master, ...childPids(master)], stop };
}
