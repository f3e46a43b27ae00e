import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';

/**
 * Listening and draining for every server of both binaries (the sidecar's listeners, the
 * operator's health server and its HTTPS webhook).
 */
type Listener = Pick<Server, 'listen' | 'prependListener' | 'once' | 'off' | 'address' | 'listening' | 'close' | 'closeAllConnections' | 'closeIdleConnections'>;

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

/** A listener that cannot bind names the option that gave its address (Node's error names only the address). */
export function listenNamed(option: string, listening: Promise<AddressInfo>): Promise<AddressInfo> {
  return listening.catch((error: unknown) => {
    if (error instanceof Error) error.message = `${option}: ${error.message}`;
    throw error;
  });
}

export const urlOf = (info: AddressInfo, scheme: 'http' | 'https' = 'http'): string =>
  `${scheme}://${info.family === 'IPv6' ? `[${info.address}]` : info.address}:${info.port}`;

/** How often a drain closes the keep-alive connections that have gone idle since it began. */
const DRAIN_IDLE_CHECK_MS = 100;

/** What a drain cuts or closes besides the server's own connections. */
export interface DrainTargets {
  /**
   * The sockets the server handed to its 'upgrade' listeners (WebSocket tunnels), while open.
   * Node no longer counts them as its connections, so closeAllConnections() leaves them, yet
   * server.close() waits for them: one open tunnel kept a stopping gateway from ever finishing
   * its stop.
   */
  upgraded?: ReadonlySet<Duplex>;
  /** The answers in flight (sidecar/bounded-server.ts `answersInFlight`), to close their connections after them. */
  answering?: Iterable<ServerResponse>;
}

/**
 * Stop accepting, let in-flight requests finish within `drainMs`, then cut what is left.
 * A keep-alive connection would otherwise carry new requests for the whole drain and be cut
 * mid-request at its end: each answer not begun yet says `Connection: close` and closes its
 * connection, and a connection whose answer went out before goes once it is idle.
 */
export function drain(server: Listener, drainMs: number, { upgraded = new Set(), answering = [] }: DrainTargets = {}): Promise<void> {
  if (!server.listening) return Promise.resolve();
  return new Promise((resolve) => {
    const closeAfterAnswer = (_req: IncomingMessage, res: ServerResponse): void => {
      res.shouldKeepAlive = false;
    };
    for (const res of answering) if (!res.headersSent) res.shouldKeepAlive = false;
    // Ahead of the handler, which may answer at once.
    server.prependListener('request', closeAfterAnswer);
    const idle = setInterval(() => server.closeIdleConnections(), DRAIN_IDLE_CHECK_MS);
    const timer = setTimeout(() => {
      server.closeAllConnections();
      for (const socket of upgraded) socket.destroy();
    }, drainMs);
    server.close(() => {
      clearTimeout(timer);
      clearInterval(idle);
      server.off('request', closeAfterAnswer);
      resolve();
    });
    server.closeIdleConnections();
  });
}
