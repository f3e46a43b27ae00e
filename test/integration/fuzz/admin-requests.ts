import { request } from 'node:http';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { expect } from 'vitest';
import { testEnv } from '../../harness/index.ts';
import { anyText, fuzzParameters, trickyKeys } from '../../support/fuzz.ts';

/**
 * Requests to the admin operations built from their parts (method, path with its
 * parameter and query, headers, body), each part mostly right and sometimes wrong, so
 * a run reaches every check an operation makes; and the properties every answer must
 * hold: never a 5xx, and a refusal always in the operation's own error shape.
 */

export interface AdminRequest {
  method: string;
  path: string;
  headers: [string, string][];
  body: Buffer | undefined;
}

export interface AdminAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

export interface Secrets {
  admin: string;
  portal: string;
  bearer: string;
}

type Credential = 'admin' | 'portal' | 'bearer';

export interface Operation {
  name: string;
  method: string;
  /** The path with `{}` where the parameter goes, if any. */
  path: string;
  header: string;
  credential: Credential;
  /** Parameter values that name something that exists. */
  knownIds: readonly string[];
  /** Bodies worth sending besides arbitrary ones. */
  bodies: fc.Arbitrary<unknown>;
}

const keyFields = ['alias', 'rate', 'per', 'quota_max', 'access_rights', 'apply_policies', 'meta_data', 'expires', 'tags', 'is_inactive', 'smoothing', 'org_id'];

/** Create-key bodies: a valid one with some fields replaced by anything. */
export const keyBodies = (apiId: string): fc.Arbitrary<unknown> =>
  fc
    .tuple(fc.dictionary(fc.constantFrom(...keyFields, ...trickyKeys), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }), fc.boolean())
    .map(([changes, grants]) => ({ rate: 5, per: 1, ...(grants ? { access_rights: { [apiId]: { api_id: apiId } } } : {}), ...changes }));

export const tagBodies: fc.Arbitrary<unknown> = fc.oneof(
  anyText(40).map((Name) => ({ Name })),
  fc.record({ Name: fc.jsonValue({ maxDepth: 1 }) }),
  fc.constant({ Name: 'x'.repeat(300) }),
);

export const adminOperations = (ids: { api: string; product: string }): Operation[] => [
  { name: 'create key', method: 'POST', path: '/admin/org/keys', header: 'Admin-Auth', credential: 'admin', knownIds: [], bodies: keyBodies(ids.api) },
  { name: 'portal tags', method: 'POST', path: '/portal-api/products/{}/tags', header: 'Authorization', credential: 'portal', knownIds: [ids.product], bodies: tagBodies },
  { name: 'categories of one API', method: 'GET', path: '/api/apis/oas/{}/categories', header: 'Authorization', credential: 'bearer', knownIds: [ids.api], bodies: fc.constant(undefined) },
  { name: 'all categories', method: 'GET', path: '/api/apis/categories', header: 'Authorization', credential: 'bearer', knownIds: [], bodies: fc.constant(undefined) },
  { name: 'delete API', method: 'DELETE', path: '/gw/apis/{}', header: 'X-GW-Authorization', credential: 'admin', knownIds: [ids.api], bodies: fc.constant(undefined) },
  { name: 'reload', method: 'GET', path: '/gw/reload', header: 'X-GW-Authorization', credential: 'admin', knownIds: [], bodies: fc.constant(undefined) },
];

/** Header values Node's client sends as given: no CR, LF or NUL. */
const headerValue = fc.string({ unit: fc.constantFrom(...' \t!"#%&\'()*+,-./0123456789:;<=>?@ABCZ[\\]^_`abcz{|}~é\u00ff'), maxLength: 40 });
const headerName = fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,15}$/).filter((n) => !/^(host|content-length|transfer-encoding|connection|expect|upgrade)$/i.test(n));

function credentialValue(credential: Credential, secrets: Secrets): string {
  return credential === 'bearer' ? `Bearer ${secrets.bearer}` : secrets[credential];
}

function authHeaders(op: Operation, secrets: Secrets): fc.Arbitrary<[string, string][]> {
  const right = credentialValue(op.credential, secrets);
  return fc.oneof(
    { weight: 4, arbitrary: fc.constant<[string, string][]>([[op.header, right]]) },
    fc.constant<[string, string][]>([[op.header.toLowerCase(), right]]),
    fc.constant<[string, string][]>([]),
    fc.constant<[string, string][]>([
      [op.header, right],
      [op.header, right],
    ]),
    headerValue.map((wrong): [string, string][] => [[op.header, wrong]]),
    headerValue.map((wrong): [string, string][] => [
      [op.header, right],
      [op.header, wrong],
    ]),
    fc.constantFrom('Bearer ', 'Bearer', 'bearer ', 'Basic ').map((prefix): [string, string][] => [[op.header, `${prefix}${right}`]]),
  );
}

const contentTypes = fc.oneof(
  { weight: 4, arbitrary: fc.constant<[string, string][]>([['Content-Type', 'application/json']]) },
  fc.constantFrom('application/json; charset=utf-8', 'APPLICATION/JSON', 'text/plain', 'application/jsonx', '', 'application/json; charset=latin1').map((v): [string, string][] => [['Content-Type', v]]),
  fc.constant<[string, string][]>([]),
  fc.constant<[string, string][]>([
    ['Content-Type', 'application/json'],
    ['Content-Type', 'text/plain'],
  ]),
);

const bodyBytes = (bodies: fc.Arbitrary<unknown>): fc.Arbitrary<Buffer | undefined> =>
  fc.oneof(
    { weight: 4, arbitrary: bodies.map((b) => (b === undefined ? undefined : Buffer.from(JSON.stringify(b)))) },
    fc.jsonValue({ maxDepth: 3 }).map((v) => Buffer.from(JSON.stringify(v))),
    anyText(40).map((t) => Buffer.from(t)),
    fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)),
    // Invalid UTF-8 inside otherwise valid JSON.
    fc.constant(Buffer.concat([Buffer.from('{"Name":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}')])),
    fc.constant(Buffer.alloc(0)),
    fc.constant(undefined),
  );

const segment = (knownIds: readonly string[]): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 3, arbitrary: knownIds.length > 0 ? fc.constantFrom(...knownIds) : fc.constant('x') },
    { weight: 3, arbitrary: anyText(20).map(encodeURIComponent) },
    fc.constantFrom('', '..', '.', '%2e%2e', '%2F', 'a%2Fb', '%00', '%ZZ', '%', 'a/b', '~', 'a;b', 'x'.repeat(300), '%C3%A9', '%FF'),
  );

const queries = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  anyText(20).map((q) => `?${encodeURIComponent(q)}`),
  fc.constantFrom('?', '?a=1&a=2', '#frag', '?%ZZ'),
);

const methods = (op: Operation): fc.Arbitrary<string> =>
  fc.oneof({ weight: 6, arbitrary: fc.constant(op.method) }, fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD'));

export function requestsFor(op: Operation, secrets: Secrets): fc.Arbitrary<AdminRequest> {
  return fc
    .record({
      method: methods(op),
      param: segment(op.knownIds),
      trailing: fc.constantFrom('', '', '', '/', '//'),
      query: queries,
      auth: authHeaders(op, secrets),
      type: contentTypes,
      extra: fc.array(fc.tuple(headerName, headerValue), { maxLength: 2 }),
      body: bodyBytes(op.bodies),
    })
    .map(({ method, param, trailing, query, auth, type, extra, body }) => ({
      method,
      path: `${op.path.replace('{}', param)}${trailing}${query}`,
      headers: [...auth, ...type, ...extra],
      body,
    }));
}

/** One request on a fresh connection, headers sent as the raw list given (repeats included). */
export function send(baseUrl: string, req: AdminRequest): Promise<AdminAnswer> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const headers = ['Host', `${hostname}:${port}`, ...req.headers.flat()];
    if (req.body !== undefined) headers.push('Content-Length', String(req.body.length));
    const outgoing = request({ host: hostname, port, method: req.method, path: req.path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
    });
    outgoing.setTimeout(15_000, () => outgoing.destroy(new Error(`${req.method} ${req.path} timed out`)));
    outgoing.on('error', reject);
    outgoing.end(req.body);
  });
}

/** The error shape a path's answers use, from the operation families of the README's Errors paragraph. */
function shapeFor(path: string): 'dashboard' | 'gateway' | 'portal' {
  if (path.startsWith('/gw/')) return 'gateway';
  if (path.startsWith('/portal-api/')) return 'portal';
  return 'dashboard';
}

/** No 5xx; a refusal carries its code header and exactly the operation's error body. */
export function expectOwnShape(req: AdminRequest, answer: AdminAnswer): void {
  const what = `${req.method} ${req.path} -> ${answer.status} ${answer.text}`;
  expect(answer.status, what).toBeGreaterThanOrEqual(200);
  expect(answer.status, what).toBeLessThan(500);
  if (answer.status < 400 || req.method === 'HEAD') return;
  expect(answer.headers['content-type'], what).toBe('application/json');
  expect(typeof answer.headers['x-gw-error-code'], what).toBe('string');
  const body = JSON.parse(answer.text) as Record<string, unknown>;
  switch (shapeFor(req.path)) {
    case 'dashboard':
      expect(Object.keys(body).sort(), what).toEqual(['Message', 'Meta', 'Status']);
      expect(body.Status, what).toBe('Error');
      expect(body.Meta, what).toBeNull();
      expect(typeof body.Message === 'string' && body.Message.length > 0, what).toBe(true);
      break;
    case 'gateway':
      expect(Object.keys(body).sort(), what).toEqual(['message', 'status']);
      expect(body.status, what).toBe('error');
      expect(typeof body.message === 'string' && body.message.length > 0, what).toBe(true);
      break;
    case 'portal':
      expect(Object.keys(body), what).toEqual(['errors']);
      expect(Array.isArray(body.errors) && body.errors.length > 0 && body.errors.every((e) => typeof e === 'string'), what).toBe(true);
      break;
  }
}

/** A Redis database of the suite's own on the harness Redis, emptied: its keys are the suite's to compare. */
export async function ownDatabase(db: number): Promise<{ url: string; redis: Redis }> {
  const url = new URL(testEnv().redisUrl);
  url.pathname = `/${db}`;
  const redis = new Redis(url.toString(), { maxRetriesPerRequest: 1 });
  await redis.flushdb();
  return { url: url.toString(), redis };
}

/** Every key of the database with its value (DUMP), to tell any write apart. */
export async function databaseState(redis: Redis): Promise<Record<string, string>> {
  const keys = (await redis.keys('*')).sort();
  return Object.fromEntries(await Promise.all(keys.map(async (key) => [key, (await redis.dumpBuffer(key))?.toString('hex') ?? ''] as const)));
}

export interface FuzzTarget {
  adminUrl: string;
  healthUrl: string;
  /** Everything an operation may write (files or resources, Redis keys). */
  state(): Promise<unknown>;
  /** Puts the state back after an accepted write, so later runs start from the same place. */
  restore(): Promise<void>;
}

/** The properties of one operation over `runs` generated requests, then the sidecar still healthy. */
export async function fuzzOperation(op: Operation, secrets: Secrets, target: FuzzTarget, runs: number): Promise<void> {
  await fc.assert(
    fc.asyncProperty(requestsFor(op, secrets), async (req) => {
      const before = await target.state();
      const answer = await send(target.adminUrl, req);
      expectOwnShape(req, answer);
      const after = await target.state();
      if (answer.status >= 400) expect(after, `${req.method} ${req.path} -> ${answer.status}`).toEqual(before);
      else if (JSON.stringify(after) !== JSON.stringify(before)) await target.restore();
    }),
    fuzzParameters(runs),
  );
  expect((await fetch(`${target.healthUrl}/healthz`)).status).toBe(200);
}
