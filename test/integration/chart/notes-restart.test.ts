import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNamespace } from '../../harness/index.ts';
import { CHART_DIR, helm, setArgs } from './helm.ts';

/**
 * Running injected pods are what an install or upgrade does not change (README.md#install-with-helm):
 * the notes say when to restart them.
 */
describe('NOTES.txt on running injected gateways', () => {
  const release = `notes${randomBytes(3).toString('hex')}`;
  const reinstalled = 'Installed again after an uninstall? Restart the injected workloads';
  const upgraded = 'Running injected gateways keep the image, sidecar.* values and GW_REDIS_URL they started with';
  let ns: string;
  let appNs: string;

  beforeAll(async () => {
    ns = await createNamespace('notes-release');
    appNs = await createNamespace('notes-app');
  });

  afterAll(async () => {
    if (ns) await helm(['uninstall', release, '--namespace', ns], { allowFail: true });
  });

  it('on install, to restart them after a reinstall (their token was bound to the deleted ServiceAccount); on upgrade, to apply the new values', async () => {
    const values = setArgs({ 'sidecar.namespaces': [appNs] });
    const install = await helm(['install', release, CHART_DIR, '--namespace', ns, '--skip-crds', ...values]);
    expect(install.stdout).toContain(reinstalled);
    expect(install.stdout).toContain('their ServiceAccount token was bound to the deleted account');
    expect(install.stdout).not.toContain(upgraded);
    // Without sidecar namespaces the chart makes no ServiceAccount, so a reinstall deletes none.
    const bare = await helm(['install', `${release}-bare`, CHART_DIR, '--namespace', ns, '--skip-crds', '--dry-run=server']);
    expect(bare.stdout).not.toContain(reinstalled);

    const upgrade = await helm(['upgrade', release, CHART_DIR, '--namespace', ns, '--skip-crds', '--dry-run=server', ...values]);
    expect(upgrade.stdout).toContain(upgraded);
    expect(upgrade.stdout).toContain('kubectl rollout restart deployment -n <namespace>');
    expect(upgrade.stdout).not.toContain(reinstalled);
  });
});
