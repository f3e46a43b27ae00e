import type { IncomingMessage } from 'node:http';
import { Transform, type TransformCallback } from 'node:stream';

/** Raised when a streamed request body passes settings.max_request_body_bytes. */
export class BodyTooLargeError extends Error {
  readonly code = 'body_too_large';
}

/** True when the request declares a body (Content-Length > 0 or any Transfer-Encoding). */
export function hasRequestBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  if (length !== undefined) return length !== '0';
  return req.headers['transfer-encoding'] !== undefined;
}

/** A declared Content-Length above the limit is refused before anything is sent upstream. */
export function declaredLengthExceeds(req: IncomingMessage, maxBytes: number): boolean {
  const length = req.headers['content-length'];
  return length !== undefined && Number(length) > maxBytes;
}

/**
 * The request body as a stream that fails once more than `maxBytes` have passed, so a
 * chunked (or lying) body is cut off while streaming instead of being buffered.
 */
export function limitedBody(req: IncomingMessage, maxBytes: number): Transform {
  let seen = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
      seen += chunk.length;
      if (seen > maxBytes) callback(new BodyTooLargeError(`request body exceeds ${maxBytes} bytes`));
      else callback(null, chunk);
    },
  });
  req.on('error', (err) => counter.destroy(err));
  req.pipe(counter);
  return counter;
}

/** After a 413 the rest of the body is discarded and the connection closed, so an endless body cannot hold it. */
export function refuseRestOfBody(req: IncomingMessage, res: { shouldKeepAlive: boolean }): void {
  res.shouldKeepAlive = false;
  req.unpipe();
  req.resume();
}
