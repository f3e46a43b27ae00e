import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import { continueBody } from '../http/body-limit.ts';
import { AdminError, adminErrors } from './errors.ts';

/**
 * Reading what a client sent, strictly. Node folds repeated headers (it keeps the first
 * `Authorization` and joins custom ones with ", "), which would hide a second credential,
 * so repeats are counted on the raw header list.
 */
export function singleHeader(req: IncomingMessage, name: string): string | undefined {
  let value: string | undefined;
  let seen = 0;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() !== name) continue;
    seen += 1;
    if (seen > 1) throw new AdminError(adminErrors.duplicateHeader, name);
    value = raw[i + 1];
  }
  return value;
}

/** Only `application/json`, with no charset or utf-8; an absent Content-Type is read as JSON. */
function checkContentType(req: IncomingMessage): void {
  const contentType = singleHeader(req, 'content-type');
  if (contentType === undefined) return;
  const [mediaType, ...params] = contentType.split(';').map((part) => part.trim().toLowerCase());
  if (mediaType !== 'application/json') throw new AdminError(adminErrors.unsupportedMediaType);
  for (const param of params) {
    if (param.startsWith('charset=') && !['charset=utf-8', 'charset="utf-8"'].includes(param)) {
      throw new AdminError(adminErrors.unsupportedMediaType);
    }
  }
}

/** The body is read as it comes: a compressed one would only fail later as bytes that are not UTF-8. */
function checkContentEncoding(req: IncomingMessage): void {
  const encoding = singleHeader(req, 'content-encoding')?.trim().toLowerCase();
  if (encoding !== undefined && encoding !== '' && encoding !== 'identity') throw new AdminError(adminErrors.unsupportedEncoding);
}

/**
 * JSON nested deeper than this is refused: no field of any admin body comes near it, and a
 * body nested thousands deep (it fits in the size limit) would exhaust the stack where the
 * value is serialised again to be stored.
 */
const MAX_BODY_DEPTH = 64;

/**
 * What makes a parsed body unfit to store, with where it is: nesting deeper than `limit`, or a
 * string (a value or a field name) with an unpaired surrogate, which JSON's `\\uD800` escapes can
 * say but UTF-8 cannot carry, so the API server or a folder file would keep something else than
 * the answer echoes. Iterative, so no depth can overflow it.
 */
function bodyProblem(value: unknown, limit: number): string | null {
  const illFormed = (where: string): string => `${where}: must not contain unpaired surrogates`;
  const pending: [unknown, number, string][] = [[value, 1, 'body']];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [item, depth, where] = next;
    if (typeof item === 'string' && !item.isWellFormed()) return illFormed(where);
    if (typeof item !== 'object' || item === null) continue;
    if (depth > limit) return `body: nested more than ${limit} levels deep`;
    const entries = Array.isArray(item) ? item.entries() : Object.entries(item);
    for (const [name, child] of entries) {
      const childWhere = where === 'body' ? String(name) : `${where}.${name}`;
      if (typeof name === 'string' && !name.isWellFormed()) return illFormed(`${where} (a field name)`);
      pending.push([child, depth + 1, childWhere]);
    }
  }
  return null;
}

/**
 * The body, asked for only now (100 Continue) that the request's headers passed: its auth,
 * its content type and its declared length.
 */
function readRaw(req: IncomingMessage, res: ServerResponse, limit: number): Promise<Buffer> {
  const tooLarge = (): AdminError => new AdminError(adminErrors.bodyTooLarge, `at most ${limit} bytes`);
  const declared = Number(req.headers['content-length'] ?? '0');
  if (declared > limit) return Promise.reject(tooLarge());
  continueBody(req, res);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        // Keep draining (discarding) so the 413 can still be written on this connection.
        req.resume();
        reject(tooLarge());
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(Buffer.concat(chunks, size)));
    // A client that hangs up mid-body fails the stream (ECONNRESET), or may end it without an error.
    const clientClosed = (): void => {
      if (!req.complete) reject(new AdminError(adminErrors.clientClosed));
    };
    req.once('error', clientClosed);
    req.once('close', clientClosed);
  });
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The request body as parsed JSON: content type and encoding, size, UTF-8, syntax and depth checked in that order. */
export async function readJsonBody(req: IncomingMessage, res: ServerResponse, limit: number): Promise<unknown> {
  checkContentType(req);
  checkContentEncoding(req);
  const raw = await readRaw(req, res, limit);
  if (raw.length === 0) throw new AdminError(adminErrors.bodyEmpty);
  let text: string;
  try {
    text = utf8.decode(raw);
  } catch {
    throw new AdminError(adminErrors.bodyNotUtf8);
  }
  if (text.trim() === '') throw new AdminError(adminErrors.bodyEmpty);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new AdminError(adminErrors.bodyMalformed);
  }
  const problem = bodyProblem(body, MAX_BODY_DEPTH);
  if (problem !== null) throw new AdminError(adminErrors.bodyInvalid, problem);
  return body;
}

/** A parsed body checked against a schema; the first problem is reported with the field it is in. */
export function validBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const where = issue.path.length > 0 ? issue.path.join('.') : 'body';
  throw new AdminError(adminErrors.bodyInvalid, `${where}: ${issue.message}`);
}
