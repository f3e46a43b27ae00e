import { describe, expect, it } from 'vitest';
import { parseStaticTokens } from './static-tokens.ts';

describe('parseStaticTokens', () => {
  it('reads a YAML list', () => {
    const tokens = parseStaticTokens('- name: ci\n  token: ci-token-0123456789\n  permissions: ["list:apidefinitions", "list:categories"]\n', 'tokens.yaml');
    expect(tokens).toEqual([{ name: 'ci', token: 'ci-token-0123456789', permissions: ['list:apidefinitions', 'list:categories'] }]);
  });

  it('reads JSON and an empty file', () => {
    expect(parseStaticTokens('[{"name":"a","token":"aaaaaaaaaaaaaaaa","permissions":["*"]}]', 'env')).toHaveLength(1);
    expect(parseStaticTokens('', 'empty.yaml')).toEqual([]);
  });

  it.each([
    ['a short token', '[{"name":"a","token":"short","permissions":[]}]', /env: 0\.token: /],
    ['an unknown permission', '[{"name":"a","token":"aaaaaaaaaaaaaaaa","permissions":["delete:apidefinitions"]}]', /env: 0\.permissions\.0: /],
    ['an unknown field', '[{"name":"a","token":"aaaaaaaaaaaaaaaa","permissions":[],"admin":true}]', /env: 0: .*admin/],
    ['not a list', '{"name":"a"}', /env: tokens: /],
    ['bad YAML', '[unclosed', /env: not YAML or JSON/],
  ])('refuses %s naming where', (_label, text, message) => {
    expect(() => parseStaticTokens(text, 'env')).toThrow(message);
  });
});
