import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { splitHostPort } from './cli.ts';

/** Listen on `host:port` (port 0: any free port) and report where. */
export function listen(server: Server, address: string): Promise<AddressInfo> {
  const { host, port } = splitHostPort(address);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

export const urlOf = (info: AddressInfo): string =>
  `http://${info.family === 'IPv6' ? `[${info.address}]` : info.address}:${info.port}`;

/** The proxy listener address of a gateway that serves only the admin operations. */
export const PROXY_OFF = 'off';

/** Stop accepting, let in-flight requests finish within `drainMs`, then cut what is left. */
export function drain(server: Server, drainMs: number): Promise<void> {
  if (!server.listening) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => server.closeAllConnections(), drainMs);
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
  });
}
