import { createServer, type Server } from 'node:http';
import type { Registry } from 'prom-client';

export interface HealthChecks {
  /** The process is alive and its loops are running. */
  live(): boolean;
  /** The instance can do its job (caches synced; webhook serving). */
  ready(): boolean;
}

/** `/healthz`, `/readyz` and `/metrics` on the health listener. */
export function createHealthServer(checks: HealthChecks, registry: Registry): Server {
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET') {
      res.writeHead(405, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'method not allowed' }));
      return;
    }
    if (path === '/metrics') {
      registry.metrics().then(
        (body) => res.writeHead(200, { 'content-type': registry.contentType }).end(body),
        () => res.writeHead(500).end(),
      );
      return;
    }
    const check = path === '/healthz' ? checks.live : path === '/readyz' ? checks.ready : undefined;
    if (!check) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not found' }));
      return;
    }
    const ok = check();
    res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify({ status: ok ? 'ok' : 'unavailable' }));
  });
}
