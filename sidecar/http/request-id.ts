import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { REQUEST_ID_HEADER } from './respond.ts';

/** A client's own request id is kept when it is one a log line can carry as it is. */
const acceptableRequestId = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The request's id: the client's X-Request-Id when acceptable, else a new one. It is put on
 * the request, so an upstream sees the id the answer and the logs carry.
 */
export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers[REQUEST_ID_HEADER];
  const id = typeof given === 'string' && acceptableRequestId.test(given) ? given : randomUUID();
  req.headers[REQUEST_ID_HEADER] = id;
  return id;
}
