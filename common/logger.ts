import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * The one logger factory of operator and sidecar: JSON lines on stdout. Paths that could
 * carry a credential are redacted, so a raw key never reaches a log line even when a
 * request or header object is logged whole.
 */
export function createLogger(component: string, level = process.env.GW_LOG_LEVEL ?? 'info'): Logger {
  return pino({
    name: component,
    level,
    redact: {
      paths: [
        'req.headers.authorization',
        'req.headers["admin-auth"]',
        'req.headers["x-gw-authorization"]',
        'headers.authorization',
        'headers["admin-auth"]',
        'headers["x-gw-authorization"]',
        'rawKey',
        'key',
        'token',
        'password',
        'secret',
      ],
      censor: '[redacted]',
    },
  });
}
