import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

describe('DEP0060 suppression', () => {
  it('drops only the util._extend warning', () => {
    const module = new URL('./suppress-dep0060.ts', import.meta.url).pathname;
    const script = `await import('${module}'); (await import('node:util')).default._extend({}, {}); process.emitWarning('kept', 'Warning', 'GWTEST');`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
    expect(run.status).toBe(0);
    expect(run.stderr).not.toContain('DEP0060');
    expect(run.stderr).toContain('GWTEST');
  });
});
