import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LabelPairCounter } from './label-pair-counter.ts';

describe('LabelPairCounter', () => {
  const setup = () => {
    const registry = new Registry();
    const counter = new LabelPairCounter({ name: 'test_requests_total', help: 'Requests.', labelNames: ['api', 'code_class'], registers: [registry] });
    return { registry, counter };
  };

  it('exposes each label pair with its count, as a prom-client counter would', async () => {
    const { registry, counter } = setup();
    for (let i = 0; i < 3; i++) counter.inc('a', '2xx');
    counter.inc('a', '4xx');
    counter.inc('b', '2xx');
    const text = await registry.metrics();
    expect(text).toContain('# TYPE test_requests_total counter');
    expect(text).toMatch(/^test_requests_total\{api="a",code_class="2xx"\} 3$/m);
    expect(text).toMatch(/^test_requests_total\{api="a",code_class="4xx"\} 1$/m);
    expect(text).toMatch(/^test_requests_total\{api="b",code_class="2xx"\} 1$/m);
    expect(text.split('\n').filter((line) => line.startsWith('test_requests_total{'))).toHaveLength(3);
  });

  it('gives running totals: collecting twice neither doubles nor loses a count', async () => {
    const { counter } = setup();
    counter.inc('a', '2xx');
    expect((await counter.counter.get()).values).toEqual([{ labels: { api: 'a', code_class: '2xx' }, value: 1 }]);
    counter.inc('a', '2xx');
    expect((await counter.counter.get()).values).toEqual([{ labels: { api: 'a', code_class: '2xx' }, value: 2 }]);
    expect((await counter.counter.get()).values).toEqual([{ labels: { api: 'a', code_class: '2xx' }, value: 2 }]);
  });

  it('exposes nothing before the first count', async () => {
    const { registry } = setup();
    expect(await registry.metrics()).not.toMatch(/^test_requests_total\{/m);
  });
});
