import type { ServerResponse } from 'node:http';
import type { GatewayError } from '../http/errors.ts';
import type { RefusalShape } from '../http/respond.ts';
import { type AdminError, errorMessage } from './errors.ts';

/**
 * The three error body shapes of the admin operations (docs/behaviour.md#admin-operations): the dashboard operations
 * (`/admin/…`, `/api/…`), the gateway operations (`/gw/…`) and the portal (`/portal-api/…`).
 */
export type ErrorShape = 'dashboard' | 'gateway' | 'portal';

export function errorBody(shape: ErrorShape, message: string): unknown {
  switch (shape) {
    case 'dashboard':
      return { Status: 'Error', Message: message, Meta: null };
    case 'gateway':
      return { status: 'error', message };
    case 'portal':
      return { errors: [message] };
  }
}

/** Which shape an error on a path gets when no route claims it (unknown route, wrong method). */
export function shapeOfPath(path: string): ErrorShape {
  if (path.startsWith('/gw/')) return 'gateway';
  if (path.startsWith('/portal-api/')) return 'portal';
  return 'dashboard';
}

/**
 * The admin listener's own refusals (bounded-server.ts: header bounds, a bad Host or target,
 * an unreadable request) in the shape of the operation the target names, their status and code
 * kept; a target Node could not read gets the dashboard shape.
 */
export const adminRefusalShape: RefusalShape = (error: GatewayError, target: string | null): GatewayError => {
  const body = errorBody(shapeOfPath(pathOf(target)), error.message);
  return { ...error, body: Buffer.from(JSON.stringify(body)) };
};

/** The path of an origin-form or absolute-form target; '' for any other (authority-form, `*`, none). */
function pathOf(target: string | null): string {
  if (target === null) return '';
  if (target.startsWith('/')) return target;
  return URL.parse(target)?.pathname ?? '';
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    'cache-control': 'no-store',
  });
  res.end(payload);
}

export function sendError(res: ServerResponse, shape: ErrorShape, error: AdminError, headers: Record<string, string> = {}): void {
  sendJson(res, error.def.status, errorBody(shape, errorMessage(error)), { ...headers, 'x-gw-error-code': error.def.code });
}
