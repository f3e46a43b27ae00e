import { describe, expect, it } from 'vitest';
import { Sampler } from './sampler.ts';

describe('Sampler', () => {
  it('says yes to exactly one call in every, on the every-th', () => {
    const sampler = new Sampler(8);
    const answers = Array.from({ length: 24 }, () => sampler.next());
    expect(answers.flatMap((yes, i) => (yes ? [i + 1] : []))).toEqual([8, 16, 24]);
  });
});
