import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadLocalSettings, resolveSettings, SettingsError } from './settings-loader.ts';

function settingsFile(text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'gw-settings-')), 'settings.yaml');
  writeFileSync(path, text);
  return path;
}

describe('settings layers', () => {
  it('defaults < compiled < file < env', () => {
    const local = loadLocalSettings(settingsFile('drl_threshold: 3\nforwarder: http-proxy\n'), { GW_DRL_THRESHOLD: '7' });
    const settings = resolveSettings({ drl_threshold: 1, rate_limit_response_headers: 'rate_limits', forwarder: 'undici' }, local);
    expect(settings.drl_threshold).toBe(7);
    expect(settings.forwarder).toBe('http-proxy');
    expect(settings.rate_limit_response_headers).toBe('rate_limits');
    expect(settings.redis_timeout_ms).toBe(250);
  });

  it('reads booleans and numbers from the environment', () => {
    const settings = resolveSettings(undefined, loadLocalSettings(undefined, { GW_ENABLE_REDIS_ROLLING_LIMITER: 'true', GW_UPSTREAM_TIMEOUT_MS: '1500' }));
    expect(settings.enable_redis_rolling_limiter).toBe(true);
    expect(settings.upstream_timeout_ms).toBe(1500);
  });

  it('names the option and its origin when a value is invalid', () => {
    expect(() => loadLocalSettings(undefined, { GW_DRL_THRESHOLD: '-1' })).toThrow(/invalid setting drl_threshold \(from GW_DRL_THRESHOLD\)/);
    expect(() => loadLocalSettings(settingsFile('forwarder: nginx\n'), {})).toThrow(/invalid setting forwarder \(from .*settings\.yaml\)/);
    expect(() => loadLocalSettings(settingsFile('no_such_option: 1\n'), {})).toThrow(SettingsError);
    expect(() => loadLocalSettings(settingsFile('- a list\n'), {})).toThrow(/expected a mapping/);
  });

  it('refuses a wait longer than a Node timer keeps, which would fire at once and spin', () => {
    for (const name of ['UPSTREAM_TIMEOUT_MS', 'THROTTLE_MAX_WAIT_MS', 'STREAM_RATE_LIMIT_MAX_WAIT_MS']) {
      expect(() => loadLocalSettings(undefined, { [`GW_${name}`]: '99999999999' })).toThrow(new RegExp(`invalid setting ${name.toLowerCase()} \\(from GW_${name}\\): .*2147483647`));
      expect(resolveSettings(undefined, loadLocalSettings(undefined, { [`GW_${name}`]: '2147483647' }))).toMatchObject({ [name.toLowerCase()]: 2_147_483_647 });
    }
  });
});
