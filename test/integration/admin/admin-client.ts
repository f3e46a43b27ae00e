import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdminHandler, type AdminDeps } from '../../../sidecar/admin/index.ts';

/**
 * The admin handler on a loopback server, and a raw HTTP client for it: headers go as a
 * raw list so a test can repeat one, and bodies as given bytes (bad UTF-8, huge ones).
 */
export interface AdminResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: unknown;
}

export interface CallOptions {
  headers?: [string, string][];
  body?: string | Buffer;
}

export interface AdminServer {
  url: string;
  call(method: string, path: string, options?: CallOptions): Promise<AdminResponse>;
  close(): Promise<void>;
}

export async function startAdmin(deps: AdminDeps): Promise<AdminServer> {
  const server: Server = createServer(createAdminHandler(deps));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const call = (method: string, path: string, options: CallOptions = {}): Promise<AdminResponse> =>
    new Promise((resolve, reject) => {
      // With a raw header list Node adds no Host header of its own.
      const headers = ['Host', `127.0.0.1:${port}`, ...(options.headers ?? []).flat()];
      if (options.body !== undefined) headers.push('Content-Length', String(Buffer.byteLength(options.body)));
      const req = request({ host: '127.0.0.1', port, method, path, headers, timeout: 20_000 }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path} timed out`)));
      req.on('error', reject);
      req.end(options.body);
    });
  return {
    url: `http://127.0.0.1:${port}`,
    call,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export const json = (value: unknown): string => JSON.stringify(value);
export const jsonType: [string, string] = ['Content-Type', 'application/json'];
