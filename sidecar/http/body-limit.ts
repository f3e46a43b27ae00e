import type { IncomingMessage, ServerResponse } from 'node:http';
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

/** Node's test for a 100-continue expectation, which it applies to HTTP/1.1 requests only. */
const continueExpectation = /(?:^|\W)100-continue(?:$|\W)/i;

/** Requests whose client has been told to send its body (100 Continue). */
const continued = new WeakSet<IncomingMessage>();

const expectsContinue = (req: IncomingMessage): boolean => {
  const expectation = req.headers.expect;
  return expectation !== undefined && req.httpVersion === '1.1' && continueExpectation.test(expectation);
};

/**
 * A client that waits for 100 Continue before sending its body is told to send it now; any
 * other request, or one told already, is left alone. The listeners leave this to the code that
 * reads the body, so that a request refused on its headers (auth, limits, a declared length
 * over the bound) is answered without its body ever being sent (RFC 9110 §10.1.1).
 */
export function continueBody(req: IncomingMessage, res: ServerResponse): void {
  if (continued.has(req) || !expectsContinue(req)) return;
  continued.add(req);
  res.writeContinue();
}

/**
 * The client still waits to be asked for its body, so none of it will come. Node closes such
 * a connection after the answer (the client may send the body anyway, which would otherwise
 * be read as a request of its own).
 */
export const bodyWithheld = (req: IncomingMessage): boolean => expectsContinue(req) && !continued.has(req);

/**
 * The request body as a stream that fails once more than `maxBytes` have passed, so a
 * chunked (or lying) body is cut off while streaming instead of being buffered. A client
 * waiting for 100 Continue is told to send it.
 */
export function limitedBody(req: IncomingMessage, res: ServerResponse, maxBytes: number): Transform {
  let seen = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
      seen += chunk.length;
      if (seen > maxBytes) callback(new BodyTooLargeError(`request body exceeds ${maxBytes} bytes`));
      else callback(null, chunk);
    },
  });
  req.on('error', (err) => counter.destroy(err));
  // Whoever reads the body (undici, http-proxy) listens for its errors while it reads. One that
  // comes after it let go (a client leaving mid-body once its 502 was sent) has nobody left to
  // tell, and an 'error' event without a listener would end the process.
  counter.on('error', () => undefined);
  req.pipe(counter);
  continueBody(req, res);
  return counter;
}

/**
 * How much of a body answered early is read and thrown away. Past this many bytes reading
 * on is not worth it: the connection is closed after the answer, which a client still
 * sending may then lose.
 */
export const MAX_DISCARDED_BODY_BYTES = 64 * 1024 * 1024;

type End = ServerResponse['end'];

/**
 * After an answer given before the body was read (413, 502, an admin refusal): the rest of
 * the body is read and thrown away, up to `maxBytes`, and the exchange ends only then. A
 * connection closed while its client is still sending is reset by the kernel, and the
 * reset destroys the answer before the client has read it; Node closes the connection as
 * soon as an exchange the client marked as its last (`Connection: close`) ends. So the
 * answer is written at once, but `res.end()` takes effect once the body is in. On a
 * keep-alive connection the next request then finds the connection clean. A body that was
 * never asked for (100 Continue) is not waited for: its client waits for this answer.
 */
export function refuseRestOfBody(req: IncomingMessage, res: ServerResponse, maxBytes = MAX_DISCARDED_BODY_BYTES): void {
  req.unpipe();
  if (req.complete) return;
  if (declaredLengthExceeds(req, maxBytes) || bodyWithheld(req)) {
    res.shouldKeepAlive = false;
    req.resume();
    return;
  }
  const endExchange = res.end.bind(res) as () => ServerResponse;
  let answered = false;
  let bodyDone = false;
  const endWhenBoth = (): void => {
    if (answered && bodyDone) endExchange();
  };
  res.end = ((chunk?: unknown, encoding?: unknown, callback?: unknown) => {
    const done = [chunk, encoding, callback].find((arg): arg is () => void => typeof arg === 'function');
    if (done) res.once('finish', done);
    if (chunk !== undefined && typeof chunk !== 'function') res.write(chunk as Buffer | string, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');
    answered = true;
    endWhenBoth();
    return res;
  }) as End;
  const onBodyDone = (): void => {
    if (bodyDone) return;
    bodyDone = true;
    endWhenBoth();
  };
  let discarded = 0;
  const onData = (chunk: Buffer): void => {
    discarded += chunk.length;
    if (discarded <= maxBytes) return;
    req.off('data', onData);
    // Not read to its end, the body would otherwise keep this connection busy.
    res.once('finish', () => req.socket.destroy());
    onBodyDone();
  };
  req.on('data', onData);
  req.once('end', onBodyDone);
  req.once('close', onBodyDone);
  req.resume();
}
