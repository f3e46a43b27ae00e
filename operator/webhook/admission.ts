import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import { injectionPatch, type SidecarOptions } from './injector.ts';

/** What became of one admission review, as counted by gw_operator_webhook_reviews_total. */
export type ReviewResult = 'injected' | 'unchanged' | 'denied' | 'malformed';

const MAX_BODY_BYTES = 3 * 1024 * 1024;

const admissionReviewSchema = z.object({
  apiVersion: z.literal('admission.k8s.io/v1'),
  kind: z.literal('AdmissionReview'),
  request: z.object({
    uid: z.string().min(1),
    kind: z.object({ group: z.string(), version: z.string(), kind: z.string() }),
    namespace: z.string().optional(),
    operation: z.string(),
    object: z.record(z.string(), z.unknown()).nullable().optional(),
  }),
});

function reply(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

/**
 * The mutating webhook endpoint (`POST /mutate`): an AdmissionReview for a Pod comes
 * back allowed with the injection JSONPatch (possibly empty) and any warnings kubectl prints, or denied with the reason
 * when the pod's annotations are invalid. A malformed review gets 400 with a JSON error.
 */
export function admissionHandler(options: SidecarOptions, log: Logger, count: (result: ReviewResult) => void) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/mutate' || req.method !== 'POST') count('malformed');
    if (path !== '/mutate') return reply(res, 404, { error: 'not found' });
    if (req.method !== 'POST') return reply(res, 405, { error: 'method not allowed' });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        count('malformed');
        reply(res, 413, { error: 'admission review too large' });
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (res.headersSent) return;
      const answer = admissionResponse(Buffer.concat(chunks).toString('utf8'), options, log);
      count(answer.result);
      reply(res, answer.status, answer.body);
    });
  };
}

/** A request body → the HTTP status and body of the answer. */
export function admissionResponse(text: string, options: SidecarOptions, log: Logger): { status: number; body: unknown; result: ReviewResult } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { status: 400, body: { error: 'body is not JSON' }, result: 'malformed' };
  }
  const parsed = admissionReviewSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { status: 400, body: { error: `not an admission.k8s.io/v1 AdmissionReview: ${issue?.path.join('.') ?? ''}: ${issue?.message ?? ''}` }, result: 'malformed' };
  }
  const { result, body } = review(parsed.data.request, options, log);
  return { status: 200, body, result };
}

function review(request: z.infer<typeof admissionReviewSchema>['request'], options: SidecarOptions, log: Logger): { result: ReviewResult; body: unknown } {
  const base = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' };
  const isPod = request.kind.group === '' && request.kind.kind === 'Pod';
  if (!isPod || !request.object) return { result: 'unchanged', body: { ...base, response: { uid: request.uid, allowed: true } } };
  const injection = injectionPatch(request.object as V1Pod, options);
  if ('denied' in injection) {
    log.info({ namespace: request.namespace, reason: injection.denied }, 'pod injection denied');
    return { result: 'denied', body: { ...base, response: { uid: request.uid, allowed: false, status: { code: 400, reason: 'BadRequest', message: injection.denied } } } };
  }
  const warnings = injection.warnings ? { warnings: injection.warnings } : {};
  if (injection.patch.length === 0) return { result: 'unchanged', body: { ...base, response: { uid: request.uid, allowed: true, ...warnings } } };
  // A re-invoked pod's patch only moves the sidecar it has already: nothing is injected.
  const injected = injection.patch.some((op) => op.op === 'add');
  log.info({ namespace: request.namespace }, injected ? 'gateway sidecar injected' : 'gateway sidecar moved first among the init containers');
  return { result: injected ? 'injected' : 'unchanged', body: {
    ...base,
    response: {
      uid: request.uid,
      allowed: true,
      ...warnings,
      patchType: 'JSONPatch',
      patch: Buffer.from(JSON.stringify(injection.patch)).toString('base64'),
    },
  } };
}
