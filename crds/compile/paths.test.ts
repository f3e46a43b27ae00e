import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { oasPathPattern, regexPathPattern } from './paths.ts';

const pathRegexModule = fileURLToPath(new URL('./path-regex.ts', import.meta.url));
const pathsModule = fileURLToPath(new URL('./paths.ts', import.meta.url));

describe('path patterns', () => {
  it.each(['/(a+)+$', '/.*\\.json', '/users/[0-9]+', '/x{2,16}', '/{id}/items/{item}', '/(?<=a)b'])('accepts %s', (path) => {
    expect(regexPathPattern(path)).toMatchObject({ ok: true });
  });

  it.each([
    ['a backreference', '/(a+)\\1'],
    ['a lookahead', '/(?=a)a'],
    ['a negative lookahead', '/(?!admin)[a-z]+'],
    ['a counted repetition over 16', '/[0-9]{1,20}'],
  ])('refuses %s, saying why', (_name, path) => {
    expect(regexPathPattern(path)).toEqual({ ok: false, message: expect.stringContaining('could take exponential time to match') });
  });

  it('still reports a pattern that does not compile as such', () => {
    expect(regexPathPattern('/(a')).toEqual({ ok: false, message: expect.stringContaining('Unterminated group') });
  });

  // In a child process with a deadline: a match that backtracks without end cannot be stopped
  // from inside the process running it, and must not hang the test run.
  it('matches a pattern that backtracks exponentially, and OAS placeholders in a row, in linear time', () => {
    const script = `
      import { pathRegex } from ${JSON.stringify(pathRegexModule)};
      import { oasPathPattern, regexPathPattern } from ${JSON.stringify(pathsModule)};
      const nested = pathRegex(regexPathPattern('/(a+)+$').pattern);
      const placeholders = pathRegex(oasPathPattern('/{a}{b}{c}{d}{e}{f}{g}{h}x').pattern);
      console.log(JSON.stringify([
        nested.test('/' + 'a'.repeat(64) + '!'), nested.test('/' + 'a'.repeat(64)),
        placeholders.test('/' + 'a'.repeat(2000)), placeholders.test('/' + 'a'.repeat(2000) + 'x'),
      ]));`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { timeout: 30_000, encoding: 'utf8' });
    expect(run.signal, run.stderr).toBeNull();
    expect(JSON.parse(run.stdout)).toEqual([false, true, false, true]);
  });

  it('escapes an OAS path\'s literal text', () => {
    expect(oasPathPattern('/a.b/{id}')).toEqual({ ok: true, pattern: '^(?:/a\\.b/(.*))$' });
  });
});
