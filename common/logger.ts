import type { DestinationStream } from 'pino';
import { pino, stdSerializers, type Logger } from 'pino';

export type { Logger };

/** Replaces every `command` found in `value` (nested errors included) by its name alone. */
function dropCommandArgs(value: unknown, depth = 0): void {
  if (value === null || typeof value !== 'object' || depth > 8) return;
  const record = value as Record<string, unknown>;
  for (const [field, inner] of Object.entries(record)) {
    if (field === 'command' && inner !== null && typeof inner === 'object') {
      record.command = { name: (inner as { name?: unknown }).name };
    } else {
      dropCommandArgs(inner, depth + 1);
    }
  }
}

/**
 * An error as pino serialises it (type, message, stack, its own fields), less what a client
 * library keeps of the command that failed: ioredis puts a failed command's arguments on its
 * errors (and on the node errors a Cluster error holds), and the AUTH/HELLO of a refused
 * connection carries the Redis password.
 */
function errorWithoutCommandArgs(err: Error): ReturnType<typeof stdSerializers.err> {
  const serialized = stdSerializers.err(err);
  dropCommandArgs(serialized);
  return serialized;
}

/**
 * The one logger factory of operator and sidecar: JSON lines on stdout (or `destination`).
 * Paths that could carry a credential are redacted, so a raw key never reaches a log line
 * even when a request or header object is logged whole; errors always go under `err`.
 */
export function createLogger(component: string, level = 'info', destination?: DestinationStream): Logger {
  const options = {
    name: component,
    level,
    serializers: { err: errorWithoutCommandArgs },
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
  };
  return destination ? pino(options, destination) : pino(options);
}
