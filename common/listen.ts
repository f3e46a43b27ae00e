import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Listening and draining for every server of both binaries (the sidecar's listeners, the
 * operator's health server and its HTTPS webhook).
 */
type Listener = Pick<Server, 'listen' | 'once' | 'off' | 'address' | 'listening' | 'close' | 'closeAllConnections' | 'closeIdleConnections'>;

/** `host:port` (IPv6 as `[::1]:8080`) for server.listen. */
export function splitHostPort(address: string): { host: string; port: number } {
  const match = /^\[?([^\]]*)\]?:(\d+)$/.exec(address);
  if (match === null) throw new Error(`invalid listen address "${address}": expected HOST:PORT`);
  return { host: match[1] ?? '', port: Number(match[2]) };
}

/**
 * How a listener of one worker of several binds (docs/architecture.md#workers): `exclusive`,
 * its own socket rather than one node:cluster shares through the primary; `reusePort`, one
 * of several sockets on the same port that the kernel spreads connections over.
 */
export interface ListenOptions {
  exclusive?: boolean;
  reusePort?: boolean;
}

/** Listen on `host:port` (port 0: any free port) and report where. */
export function listen(server: Listener, address: string, options: ListenOptions = {}): Promise<AddressInfo> {
  const { host, port } = splitHostPort(address);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host, ...options }, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

export const urlOf = (info: AddressInfo, scheme: 'http' | 'https' = 'http'): string =>
  `${scheme}://${info.family === 'IPv6' ? `[${info.address}]` : info.address}:${info.port}`;

/** Stop accepting, let in-flight requests finish within `drainMs`, then cut what is left. */
export function drain(server: Listener, drainMs: number): Promise<void> {
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
