import { Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LabelPairCounter } from './label-pair-counter.ts';
import { metricsText } from './metrics-text.ts';

describe('LabelPairCounter', () => {
  const setup = () => {
    const registry = new Registry();
    const counter = new LabelPairCounter({ name: 'test_requests_total', help: 'Requests.', labelNames: ['api', 'code_class'], registers: [registry] });
    return { registry, counter };
  };

  it('exposes each label pair with its count, as a prom-client counter given the same counts does', async () => {
    const { registry, counter } = setup();
    const theirs = new Registry();
    const plain = new Counter({ name: 'test_requests_total', help: 'Requests.', labelNames: ['api', 'code_class'], registers: [theirs] });
    for (const [api, codeClass] of [['a', '2xx'], ['a', '2xx'], ['a', '2xx'], ['a', '4xx'], ['b', '2xx']] as const) {
      counter.inc(api, codeClass);
      plain.inc({ api, code_class: codeClass });
    }
    const text = await metricsText(registry);
    expect(text).toBe(await theirs.metrics());
    expect(text).toContain('# TYPE test_requests_total counter');
    expect(text).toMatch(/^test_requests_total\{api="a",code_class="2xx"\} 3$/m);
    expect(text).toMatch(/^test_requests_total\{api="a",code_class="4xx"\} 1$/m);
    expect(text).toMatch(/^test_requests_total\{api="b",code_class="2xx"\} 1$/m);
    expect(text.split('\n').filter((line) => line.startsWith('test_requests_total{'))).toHaveLength(3);
    expect(await registry.getMetricsAsJSON()).toEqual(await theirs.getMetricsAsJSON());
  });

  it('gives running totals: reading twice neither doubles nor loses a count', async () => {
    const { counter } = setup();
    counter.inc('a', '2xx');
    expect((await counter.get()).values).toEqual([{ labels: { api: 'a', code_class: '2xx' }, value: 1 }]);
    counter.inc('a', '2xx');
    expect((await counter.get()).values).toEqual([{ labels: { api: 'a', code_class: '2xx' }, value: 2 }]);
    expect((await counter.get()).values).toEqual([{ labels: { api: 'a', code_class: '2xx' }, value: 2 }]);
  });

  it('exposes nothing before the first count', async () => {
    const { registry } = setup();
    expect(await metricsText(registry)).not.toMatch(/^test_requests_total\{/m);
  });

  it('drops the series of the first label values refused, keeps the others in order, and counts a dropped pair again from zero', async () => {
    const { registry, counter } = setup();
    for (const [api, codeClass] of [['a', '2xx'], ['b', '2xx'], ['a', '4xx'], ['c', '2xx'], ['b', '5xx']] as const) counter.inc(api, codeClass);
    counter.retainFirst((api) => api !== 'b');
    expect((await counter.get()).values).toEqual([
      { labels: { api: 'a', code_class: '2xx' }, value: 1 },
      { labels: { api: 'a', code_class: '4xx' }, value: 1 },
      { labels: { api: 'c', code_class: '2xx' }, value: 1 },
    ]);
    expect(await metricsText(registry)).not.toContain('api="b"');
    counter.inc('b', '2xx');
    expect(counter.snapshot().counts).toEqual([1, 1, 1, 1]);
  });
});

