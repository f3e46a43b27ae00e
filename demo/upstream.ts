import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A small JSON echo server: the demo's upstream, and the upstream of the sidecar's
 * integration tests and benchmark. It answers every request with what it received.
 * `?delay_ms=N` answers late (timeouts); `?ratelimit=1` adds its own X-RateLimit-*
 * headers and `?request_id=1` its own X-Request-Id (so replacing them can be seen).
 */
export interface EchoUpstream {
  url: string;
  port: number;
  server: Server;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

async function echo(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://upstream');
  const body = await readBody(req);
  const delay = Number(url.searchParams.get('delay_ms') ?? 0);
  if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
  const payload = JSON.stringify({ method: req.method, path: url.pathname, query: url.search, headers: req.headers, body });
  const headers: Record<string, string | number> = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
  };
  if (url.searchParams.get('request_id') === '1') headers['x-request-id'] = 'upstream-own';
  if (url.searchParams.get('ratelimit') === '1') {
    Object.assign(headers, { 'x-ratelimit-limit': '999', 'x-ratelimit-remaining': '998', 'x-ratelimit-reset': '1' });
  }
  if (!res.destroyed) res.writeHead(200, headers).end(payload);
}

export function startEchoUpstream(port = 0, host = '127.0.0.1'): Promise<EchoUpstream> {
  const server = createServer((req, res) => {
    echo(req, res).catch(() => res.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const info = server.address() as AddressInfo;
      resolve({
        url: `http://${host}:${info.port}`,
        port: info.port,
        server,
        close: () =>
          new Promise((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}

// `npm run upstream`: the echo server alone, on the port examples/ names (GW_DEMO_UPSTREAM_PORT
// for another), for a gateway run by hand on a copy of examples/ (README.md#the-sidecar-gw-sidecar).
if (import.meta.main) {
  const upstream = await startEchoUpstream(Number(process.env.GW_DEMO_UPSTREAM_PORT || 9000));
  process.stdout.write(`echo upstream on ${upstream.url} (Ctrl-C stops it)\n`);
}
