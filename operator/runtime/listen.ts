import type { Server } from 'node:net';

/** Listens on HOST:PORT (port 0 = any free port); rejects on EADDRINUSE and the like. */
export function listen(server: Server, hostPort: string): Promise<void> {
  const colon = hostPort.lastIndexOf(':');
  const host = hostPort.slice(0, colon) || '0.0.0.0';
  const port = Number(hostPort.slice(colon + 1));
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    (server as Server & { closeAllConnections?: () => void }).closeAllConnections?.();
  });
}
