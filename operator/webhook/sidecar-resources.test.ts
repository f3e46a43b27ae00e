import { describe, expect, it } from 'vitest';
import { DEFAULT_SIDECAR_RESOURCES, quantityValue, sidecarNodeOptionsFor, sidecarResourcesFor, sidecarResourcesSchema, type SidecarResources } from './sidecar-resources.ts';

describe('sidecar resources', () => {
  it('reads every form of a Kubernetes quantity, as the API server does', () => {
    expect(quantityValue('100m')).toBeCloseTo(0.1);
    expect(quantityValue('2')).toBe(2);
    expect(quantityValue('0.5')).toBe(0.5);
    expect(quantityValue('128Mi')).toBe(128 * 2 ** 20);
    expect(quantityValue('1G')).toBe(1e9);
    // Leading dot, trailing dot, a sign, a decimal exponent, the smallest decimal suffixes.
    expect(quantityValue('.5')).toBe(0.5);
    expect(quantityValue('1.')).toBe(1);
    expect(quantityValue('+128Mi')).toBe(128 * 2 ** 20);
    expect(quantityValue('-1')).toBe(-1);
    expect(quantityValue('1e3')).toBe(1000);
    expect(quantityValue('2E9')).toBe(2e9);
    expect(quantityValue('5e-1')).toBe(0.5);
    expect(quantityValue('1.5e+2')).toBe(150);
    expect(quantityValue('500u')).toBeCloseTo(5e-4);
    expect(quantityValue('7n')).toBeCloseTo(7e-9);
    // E alone is exa; with digits, an exponent.
    expect(quantityValue('2E')).toBe(2e18);
    for (const bad of ['', 'lots', '.', '+', '1.5.5', '10mb', ' 1Gi', '1Gi;', '128mi', '1e', '1e1.5', '1Ki5', '--1', 'e3']) expect(quantityValue(bad), bad).toBeNull();
  });

  it('refuses a negative quantity and one above what a sidecar can use, naming the annotation', () => {
    const sized = (annotation: string, value: string) => sidecarResourcesFor({ [annotation]: value }, DEFAULT_SIDECAR_RESOURCES);
    expect(sized('gw.dev/sidecar-memory-limit', '1000Ei')).toEqual({
      error: 'annotation gw.dev/sidecar-memory-limit: the gw-sidecar memory limit 1000Ei is above 1Ti, more than a gateway sidecar can use: check the suffix',
    });
    expect(sized('gw.dev/sidecar-cpu-limit', '2e3')).toEqual({ error: expect.stringContaining('the gw-sidecar cpu limit 2e3 is above 1000') as string });
    expect(sized('gw.dev/sidecar-cpu-request', '-1')).toEqual({ error: 'annotation gw.dev/sidecar-cpu-request: the gw-sidecar cpu request -1 is negative' });
    // The forms Kubernetes takes are taken, up to the bound itself.
    expect(sized('gw.dev/sidecar-cpu-limit', '1e3')).toMatchObject({ limits: { cpu: '1e3' } });
    expect(sized('gw.dev/sidecar-cpu-limit', '.5')).toMatchObject({ limits: { cpu: '.5' } });
    expect(sized('gw.dev/sidecar-memory-limit', '+128Mi')).toMatchObject({ limits: { memory: '+128Mi' } });
    expect(sized('gw.dev/sidecar-memory-limit', '2e9')).toMatchObject({ limits: { memory: '2e9' } });
    expect(sized('gw.dev/sidecar-memory-limit', '1Ti')).toMatchObject({ limits: { memory: '1Ti' } });
    // The operator's default is held to the same bounds.
    expect(sidecarResourcesSchema.safeParse({ limits: { memory: '2Ti' } }).error?.issues[0]?.message).toBe('the gw-sidecar memory limit 2Ti is above 1Ti, more than a gateway sidecar can use: check the suffix');
    expect(sidecarResourcesSchema.safeParse({ requests: { cpu: '-50m' } }).error?.issues[0]?.message).toBe('the gw-sidecar cpu request -50m is negative');
  });

  it('keeps the default without annotations, and puts each annotation on top of it', () => {
    expect(sidecarResourcesFor({}, DEFAULT_SIDECAR_RESOURCES)).toEqual(DEFAULT_SIDECAR_RESOURCES);
    expect(sidecarResourcesFor({
      'gw.dev/sidecar-cpu-request': '200m',
      'gw.dev/sidecar-cpu-limit': '1',
      'gw.dev/sidecar-memory-request': '128Mi',
      'gw.dev/sidecar-memory-limit': '512Mi',
    }, DEFAULT_SIDECAR_RESOURCES)).toEqual({ requests: { cpu: '200m', memory: '128Mi' }, limits: { cpu: '1', memory: '512Mi' } });
  });

  it('brings a default request down to a lower annotated limit, as Kubernetes does for a limit alone', () => {
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-cpu-limit': '20m' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ requests: { cpu: '20m', memory: '64Mi' }, limits: { cpu: '20m', memory: '256Mi' } });
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-limit': '80Mi' }, { requests: { memory: '96Mi' }, limits: { memory: '256Mi' } }))
      .toEqual({ requests: { memory: '80Mi' }, limits: { memory: '80Mi' } });
  });

  it('refuses a quantity it cannot read, and an annotated request above its limit, naming them', () => {
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-limit': 'lots' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ error: expect.stringContaining('annotation gw.dev/sidecar-memory-limit must be a Kubernetes quantity') as string });
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-request': '1Gi', 'gw.dev/sidecar-memory-limit': '512Mi' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ error: 'the gw-sidecar memory request 1Gi is above its limit 512Mi' });
  });

  it('refuses what Kubernetes takes but no annotation means: a fraction of a byte, a cpu limit of 0', () => {
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-request': '0.5' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ error: 'annotation gw.dev/sidecar-memory-request: the gw-sidecar memory request 0.5 is not a whole number of bytes: give it in Mi or Gi, such as 128Mi' });
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-limit': '1.1Gi' }, DEFAULT_SIDECAR_RESOURCES)).toEqual({ error: expect.stringContaining('memory limit 1.1Gi is not a whole number of bytes') as string });
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-cpu-limit': '0' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ error: 'annotation gw.dev/sidecar-cpu-limit: a gw-sidecar cpu limit of 0 sets no limit and brings the cpu request down to 0: leave the annotation out for the default, or give a limit such as 500m' });
    // Whole bytes in any form, a memory request of 0, a cpu request of 0: taken.
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-limit': '0.5Gi', 'gw.dev/sidecar-memory-request': '0', 'gw.dev/sidecar-cpu-request': '0' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ requests: { cpu: '0', memory: '0' }, limits: { memory: '0.5Gi' } });
  });

  it('sizes the old space in NODE_OPTIONS to the pod\'s memory limit, in the proportion the default has', () => {
    const chart = '--max-semi-space-size=8 --max-old-space-size=160';
    const sized = (limit: string | undefined, options: string | undefined = chart, defaults: SidecarResources = DEFAULT_SIDECAR_RESOURCES) =>
      sidecarNodeOptionsFor(options, defaults, { ...defaults, limits: limit === undefined ? {} : { memory: limit } });
    expect(sized('256Mi')).toBe(chart);
    expect(sized('128Mi')).toBe('--max-semi-space-size=8 --max-old-space-size=80');
    expect(sized('87Mi')).toBe('--max-semi-space-size=8 --max-old-space-size=54');
    expect(sized('1Gi')).toBe('--max-semi-space-size=8 --max-old-space-size=640');
    expect(sized('0.5Gi', '--max_old_space_size=100 --trace-warnings')).toBe('--max_old_space_size=200 --trace-warnings');
    // Never below 16 MiB, whatever the limit.
    expect(sized('16Mi')).toBe('--max-semi-space-size=8 --max-old-space-size=16');
    // Nothing to scale from or to: the options as configured.
    expect(sized(undefined)).toBe(chart);
    expect(sized('128Mi', '--max-semi-space-size=8')).toBe('--max-semi-space-size=8');
    expect(sidecarNodeOptionsFor(undefined, DEFAULT_SIDECAR_RESOURCES, { limits: { memory: '128Mi' } })).toBeUndefined();
    expect(sized('128Mi', chart, { requests: { memory: '64Mi' } })).toBe(chart);
  });
});
