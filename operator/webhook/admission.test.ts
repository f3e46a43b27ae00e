import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { admissionResponse } from './admission.ts';
import { DEFAULT_SIDECAR_RESOURCES } from './sidecar-resources.ts';

const log = pino({ level: 'silent' });
const options = { image: 'gw-sidecar:test', redisUrl: undefined, envSecretName: undefined, resources: DEFAULT_SIDECAR_RESOURCES };

const review = (object: unknown, kind = { group: '', version: 'v1', kind: 'Pod' }) =>
  JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid: 'uid-1', kind, namespace: 'ns', operation: 'CREATE', object },
  });

interface Answer {
  response: { uid: string; allowed: boolean; patchType?: string; patch?: string; status?: { code: number; message: string } };
}

describe('admissionResponse', () => {
  it('answers an annotated pod with a base64 JSONPatch that adds the sidecar', () => {
    const { status, body, result } = admissionResponse(
      review({ metadata: { annotations: { 'gw.dev/inject': 'true', 'gw.dev/apis': 'a1' } }, spec: { containers: [{ name: 'app' }] } }),
      options,
      log,
    );
    expect(status).toBe(200);
    expect(result).toBe('injected');
    const answer = body as Answer;
    expect(answer.response).toMatchObject({ uid: 'uid-1', allowed: true, patchType: 'JSONPatch' });
    const patch = JSON.parse(Buffer.from(answer.response.patch!, 'base64').toString('utf8')) as Array<{ path: string }>;
    expect(patch.map((op) => op.path)).toEqual(['/spec/initContainers', '/metadata/annotations/gw.dev~1injected', '/metadata/labels', '/spec/volumes', '/spec/serviceAccountName']);
    expect(answer.response).not.toHaveProperty('warnings');
  });

  it('answers with the warnings of the injection, which kubectl prints', () => {
    const { body, result } = admissionResponse(
      review({ metadata: { annotations: { 'gw.dev/inject': 'true' } }, spec: { serviceAccountName: 'shop', containers: [{ name: 'app' }] } }),
      { ...options, serviceAccountName: 'gw-sidecar' },
      log,
    );
    expect(result).toBe('injected');
    expect((body as Answer & { response: { warnings?: string[] } }).response.warnings).toEqual([expect.stringMatching(/^gw-sidecar runs as ServiceAccount shop, /)]);
  });

  it('moves the sidecar of a re-invoked pod back first, counting nothing injected', () => {
    const pod = {
      metadata: { annotations: { 'gw.dev/inject': 'true', 'gw.dev/injected': 'true' } },
      spec: { initContainers: [{ name: 'later', image: 'l' }, { name: 'gw-sidecar', image: 'gw', restartPolicy: 'Always' }], containers: [{ name: 'app' }] },
    };
    const { body, result } = admissionResponse(review(pod), options, log);
    expect(result).toBe('unchanged');
    const answer = body as Answer;
    expect(JSON.parse(Buffer.from(answer.response.patch!, 'base64').toString('utf8'))).toEqual([{ op: 'move', from: '/spec/initContainers/1', path: '/spec/initContainers/0' }]);
  });

  it('allows other pods and other kinds without a patch', () => {
    for (const text of [review({ metadata: {}, spec: { containers: [] } }), review({ metadata: {} }, { group: 'apps', version: 'v1', kind: 'Deployment' })]) {
      const { body, result } = admissionResponse(text, options, log);
      expect((body as Answer).response).toEqual({ uid: 'uid-1', allowed: true });
      expect(result).toBe('unchanged');
    }
  });

  it('denies a pod with an invalid api list, saying why', () => {
    const { body, result } = admissionResponse(review({ metadata: { annotations: { 'gw.dev/inject': 'true', 'gw.dev/apis': 'a;b' } }, spec: { containers: [] } }), options, log);
    const answer = body as Answer;
    expect(result).toBe('denied');
    expect(answer.response.allowed).toBe(false);
    expect(answer.response.status?.code).toBe(400);
    expect(answer.response.status?.message).toContain('gw.dev/apis');
  });

  it('rejects bodies that are not AdmissionReviews with 400 and a JSON error', () => {
    for (const text of ['not json', '{}', JSON.stringify({ apiVersion: 'admission.k8s.io/v1beta1', kind: 'AdmissionReview', request: {} }), '[]']) {
      const { status, body, result } = admissionResponse(text, options, log);
      expect(status).toBe(400);
      expect(result).toBe('malformed');
      expect((body as { error: string }).error).toMatch(/JSON|AdmissionReview/);
    }
  });
});
