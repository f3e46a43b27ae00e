import { describe, expect, it } from 'vitest';
import { DEFAULT_SIDECAR_RESOURCES, quantityValue, sidecarResourcesFor } from './sidecar-resources.ts';

describe('sidecar resources', () => {
  it('reads the plain forms of a Kubernetes quantity', () => {
    expect(quantityValue('100m')).toBeCloseTo(0.1);
    expect(quantityValue('2')).toBe(2);
    expect(quantityValue('0.5')).toBe(0.5);
    expect(quantityValue('128Mi')).toBe(128 * 2 ** 20);
    expect(quantityValue('1G')).toBe(1e9);
    for (const bad of ['', 'lots', '-1', '1.5.5', '10mb', ' 1Gi', '1Gi;']) expect(quantityValue(bad)).toBeNull();
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
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-limit': '48Mi' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ requests: { cpu: '50m', memory: '48Mi' }, limits: { memory: '48Mi' } });
  });

  it('refuses a quantity it cannot read, and an annotated request above its limit, naming them', () => {
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-limit': 'lots' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ error: expect.stringContaining('annotation gw.dev/sidecar-memory-limit must be a Kubernetes quantity') as string });
    expect(sidecarResourcesFor({ 'gw.dev/sidecar-memory-request': '1Gi', 'gw.dev/sidecar-memory-limit': '512Mi' }, DEFAULT_SIDECAR_RESOURCES))
      .toEqual({ error: 'the gw-sidecar memory request 1Gi is above its limit 512Mi' });
  });
});
