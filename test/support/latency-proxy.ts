import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

export interface LatencyProxy {
  /** The target's URL through the proxy (same scheme, credentials and path). */
  url: string;
  /** How late each byte sent to the target from now on arrives. */
  delayMs: number;
  /** While true, a new connection is closed at once, as by a server that is down. */
  refusing: boolean;
  /** Closes every connection open now, as a dropped link would; new ones pass. */
  cut(): void;
  close(): Promise<void>;
}

/**
 * A loopback TCP proxy to `url`'s server (Redis, the API server: TLS passes through as it is)
 * that hands on every byte sent to it `delayMs` late,
 * in order: a link with that much latency, so each round trip a client waits for costs at
 * least `delayMs`. Answers come back at once. It starts with no delay.
 */
export async function latencyProxy(url: string): Promise<LatencyProxy> {
  const target = new URL(url);
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    if (proxy.refusing) {
      client.destroy();
      return;
    }
    const upstream = connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    // One delay for every chunk while it stays the same, so the chunks keep their order.
    client.on('data', (chunk) => void setTimeout(() => upstream.write(chunk), proxy.delayMs));
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const proxied = new URL(url);
  proxied.host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  const proxy: LatencyProxy = {
    url: proxied.toString(),
    delayMs: 0,
    refusing: false,
    cut: () => {
      for (const socket of sockets) socket.destroy();
    },
    close: async () => {
      proxy.cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}
