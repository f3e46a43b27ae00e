import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { STATUS_CODES } from 'node:http';
import { gatewayErrors, type GatewayError } from './errors.ts';

/** The header that carries a gateway error's stable code, as the admin operations' errors do. */
export const ERROR_CODE_HEADER = 'x-gw-error-code';

/** The header that carries a request's id, to the upstream and on the answer (README.md#the-sidecar-gw-sidecar). */
export const REQUEST_ID_HEADER = 'x-request-id';

/** Headers an answer carries besides its own: the X-RateLimit-*, the request id; absent sets are null. */
type ExtraHeaders = (Record<string, string> | null)[];

/**
 * Answer a gateway error as JSON; extra headers (X-RateLimit-*, the request id) ride along. The
 * code is set with setHeader so whoever counts the answer can read it back from the response.
 */
export function sendError(res: ServerResponse, error: GatewayError, ...extra: ExtraHeaders): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.setHeader(ERROR_CODE_HEADER, error.code);
  res.writeHead(error.status, Object.assign({}, ...extra, { 'content-type': 'application/json', 'content-length': error.body.length }));
  res.end(error.body);
}

/** The same error on a raw socket, for refused connection upgrades. */
export function sendErrorOnSocket(socket: Duplex, error: GatewayError, ...extra: ExtraHeaders): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const lines = [`HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? ''}`, 'content-type: application/json', `content-length: ${error.body.length}`, `${ERROR_CODE_HEADER}: ${error.code}`, 'connection: close'];
  for (const headers of extra) for (const [name, value] of Object.entries(headers ?? {})) lines.push(`${name}: ${value}`);
  socket.end(`${lines.join('\r\n')}\r\n\r\n${error.body.toString()}`);
}

/**
 * How a listener answers its own refusals: the error as given (the gateway's JSON shape), or
 * in a shape of its own for the request-target (null when no request line was read).
 */
export type RefusalShape = (error: GatewayError, target: string | null) => GatewayError;

export const gatewayShape: RefusalShape = (error) => error;

/** The request-target of the request line the bytes begin with, if they begin with one (RFC 9112 §3). */
const requestLine = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ (\S+) HTTP\/\d\.\d\r?\n/;

function targetOf(rawPacket: unknown): string | null {
  if (!Buffer.isBuffer(rawPacket)) return null;
  // The request line counts toward the header bound (bounded-server.ts): past it, no target is read.
  const match = requestLine.exec(rawPacket.subarray(0, 16 * 1024).toString('latin1'));
  return match?.[1] ?? null;
}

/**
 * Node's answer to a request it could not parse, in the listener's JSON shape instead of an
 * empty body. Node gives no parsed request, only the bytes it was reading (`rawPacket`): the
 * target is read from their request line when they start with one.
 */
export function clientErrorAnswer(shape: RefusalShape, refused?: (error: GatewayError) => void) {
  return (err: Error & { code?: string; rawPacket?: unknown }, socket: Duplex): void => {
    if (err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    // No request was read, so no id of the client's: a new one, as for a request without one.
    const id = { [REQUEST_ID_HEADER]: randomUUID() };
    const error = err.code === 'HPE_HEADER_OVERFLOW' ? gatewayErrors.headersTooLarge
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? gatewayErrors.requestTimeout : gatewayErrors.badRequest;
    refused?.(error);
    sendErrorOnSocket(socket, shape(error, targetOf(err.rawPacket)), id);
  };
}
