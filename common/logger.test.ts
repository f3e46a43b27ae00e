import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from './logger.ts';

function logged(write: (log: ReturnType<typeof createLogger>) => void): string {
  let out = '';
  const log = createLogger('t', 'info', new Writable({ write: (chunk: Buffer, _e, done) => { out += chunk.toString(); done(); } }));
  write(log);
  return out;
}

describe('the logger', () => {
  it('logs an error under err with its type, message and stack, but never a failed command\'s arguments, however deep', () => {
    const auth = Object.assign(new Error('WRONGPASS invalid username-password pair'), { command: { name: 'auth', args: ['s3cret-pw'] } });
    const cluster = Object.assign(new Error('Failed to refresh slots cache.'), { lastNodeError: auth });
    const line = JSON.parse(logged((log) => log.warn({ err: cluster }, 'redis error'))) as {
      err: { type: string; message: string; stack: string; lastNodeError: { message: string; command: unknown } };
    };
    expect(line.err).toMatchObject({ type: 'Error', message: 'Failed to refresh slots cache.' });
    expect(line.err.stack).toContain('Failed to refresh slots cache.');
    expect(line.err.lastNodeError).toMatchObject({ message: 'WRONGPASS invalid username-password pair', command: { name: 'auth' } });
    expect(JSON.stringify(line)).not.toContain('s3cret-pw');
  });

  it('redacts credentials logged as fields', () => {
    const out = logged((log) => log.info({ headers: { authorization: 'raw-key-1' }, password: 'pw-2' }, 'request'));
    expect(out).not.toContain('raw-key-1');
    expect(out).not.toContain('pw-2');
    expect(out).toContain('[redacted]');
  });
});
