import { createServer } from 'node:net';
import { PortTakenError } from './errors.ts';

export interface StartOptions {
  /** Picks a candidate port; tests use it to hand out a taken one. */
  pickPort?: () => Promise<number>;
}

/** A loopback port free at the time of asking; a server that loses the race retries. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Runs `start` until it does not fail with PortTakenError (another process took a port
 * between picking and binding), at most `attempts` times.
 */
export async function withPortRetry<T>(step: string, start: () => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await start();
    } catch (err) {
      if (!(err instanceof PortTakenError) || i >= attempts) throw err;
      process.stderr.write(`gw-test-harness: ${step}: ${err.message}; retrying on another port\n`);
    }
  }
}
