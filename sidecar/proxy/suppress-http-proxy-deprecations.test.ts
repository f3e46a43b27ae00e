import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

describe("http-proxy's deprecation warnings", () => {
  it('drops only util._extend (DEP0060) and url.parse (DEP0169)', () => {
    const module = new URL('./suppress-http-proxy-deprecations.ts', import.meta.url).pathname;
    const script = [
      `await import('${module}');`,
      `(await import('node:util')).default._extend({}, {});`,
      `(await import('node:url')).default.parse('/a?b=1');`,
      `process.emitWarning('kept', 'Warning', 'GWTEST');`,
      `process.emitWarning('kept too', { type: 'DeprecationWarning', code: 'DEP9999' });`,
    ].join(' ');
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
    expect(run.status).toBe(0);
    expect(run.stderr).not.toContain('DEP0060');
    expect(run.stderr).not.toContain('DEP0169');
    expect(run.stderr).toContain('GWTEST');
    expect(run.stderr).toContain('DEP9999');
  });

  it('is needed: without it this Node warns for both', () => {
    const script = `(await import('node:util')).default._extend({}, {}); (await import('node:url')).default.parse('/a?b=1');`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
    expect(run.stderr).toContain('DEP0060');
    expect(run.stderr).toContain('DEP0169');
  });
});
