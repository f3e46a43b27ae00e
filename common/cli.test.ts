import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { booleanOption, cliHelpRows, jsonOption, listenOption, OptionsError, parseCli, redisUrlOption } from './cli.ts';

const table = {
  listen: { flag: 'listen', value: 'HOST:PORT', env: 'T_LISTEN', help: 'where to listen', schema: listenOption.default('127.0.0.1:1') },
  verbose: { flag: 'verbose', env: 'T_VERBOSE', help: 'say more', schema: booleanOption.default(false) },
  redis: { flag: 'redis-url', env: 'T_REDIS', help: 'Redis', schema: redisUrlOption.optional() },
  ids: { env: 'T_IDS', help: 'JSON list of ids', schema: jsonOption(z.array(z.string()), '["a"]').default([]) },
};

describe('one option table per binary', () => {
  it('takes the flag over its variable, the variable over the default, and an empty variable as unset', () => {
    expect(parseCli(table, ['--listen', '[::1]:81'], { T_LISTEN: '0.0.0.0:2', T_VERBOSE: 'true' })).toEqual({ listen: '[::1]:81', verbose: true, ids: [] });
    expect(parseCli(table, [], { T_LISTEN: '', T_IDS: '["x","y"]' })).toEqual({ listen: '127.0.0.1:1', verbose: false, ids: ['x', 'y'] });
    expect(parseCli(table, ['--help'], { T_LISTEN: 'nonsense' })).toBe('help');
  });

  it('refuses a bad value naming its flag and variable, and a URL without repeating it', () => {
    expect(() => parseCli(table, [], { T_LISTEN: 'nope' })).toThrow(new OptionsError('--listen (T_LISTEN): must be HOST:PORT'));
    expect(() => parseCli(table, [], { T_LISTEN: '127.0.0.1:99999' })).toThrow(new OptionsError('--listen (T_LISTEN): the port must be from 0 to 65535'));
    expect(() => parseCli(table, [], { T_IDS: '[1]' })).toThrow(/^T_IDS: /);
    expect(() => parseCli(table, [], { T_IDS: '{' })).toThrow('T_IDS: must be JSON such as ["a"]');
    expect(() => parseCli(table, ['--no-such-flag'], {})).toThrow(OptionsError);
    const bad = (() => {
      try {
        parseCli(table, [], { T_REDIS: 'http://:s3cret@host:6379' });
      } catch (error) {
        return (error as Error).message;
      }
      return 'accepted';
    })();
    expect(bad).toMatch(/^--redis-url \(T_REDIS\): /);
    expect(bad).not.toContain('s3cret');
  });

  it('runs the check between options after each option is valid', () => {
    const check = (v: { verbose: boolean; redis?: string }) => (v.verbose && !v.redis ? { option: 'redis' as const, message: 'verbose needs Redis' } : undefined);
    expect(() => parseCli(table, ['--verbose', 'true'], {}, check)).toThrow('--redis-url (T_REDIS): verbose needs Redis');
    expect(parseCli(table, ['--verbose', 'true', '--redis-url', 'redis://r:6379'], {}, check)).toMatchObject({ redis: 'redis://r:6379' });
  });

  it('lists every option in --help, flag, value and variable', () => {
    const rows = cliHelpRows(table);
    expect(rows).toHaveLength(4);
    expect(rows[0]).toMatch(/^ {2}--listen HOST:PORT +T_LISTEN +where to listen$/);
    expect(rows[3]).toMatch(/^ +T_IDS +JSON list of ids$/);
  });
});
