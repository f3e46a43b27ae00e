import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { GatewaySettings } from '../../../crds/settings.ts';
import { startGwProcess, type GwProcess } from './processes.ts';
import { logTail as tail, waitReady } from './ready.ts';
import { freePort } from './wait.ts';

export interface GwStackOptions {
  kubeconfig: string;
  /** Identities of their own for the two processes (as their pods' ServiceAccounts); `kubeconfig` otherwise. */
  operatorKubeconfig?: string;
  /** GW_RELEASE_NAME of the operator: with the chart's identity, the chart's (its Role names the Lease after it). */
  operatorReleaseName?: string;
  sidecarKubeconfig?: string;
  redisUrl: string;
  /** The namespace the operator watches and the sidecar runs in (its "pod namespace"). */
  namespace: string;
  /** Gateway settings given to the operator's settings file (copied into every compiled config). */
  settings: Partial<GatewaySettings>;
  /** api_ids the sidecar serves (the pod's `gw.dev/apis` annotation); `*` for all. */
  apis: readonly string[] | '*';
  /** Folder for the settings file and the process logs (a fresh temporary one by default). */
  dir?: string;
  readyTimeoutMs?: number;
  /** GW_LOG_LEVEL of both processes (default info). */
  logLevel?: string;
}

export interface GwStack {
  operator: GwProcess;
  sidecar: GwProcess;
  proxyUrl: string;
  adminUrl: string;
  healthUrl: string;
  operatorHealthUrl: string;
  adminSecret: string;
  portalSecret: string;
  dir: string;
  /** The last lines of both logs, for a failure message. */
  logTails(lines?: number): string;
  /** Stops the sidecar, then the operator (each SIGTERM, then SIGKILL after the grace period). */
  stop(): Promise<void>;
}

const loopback = async (): Promise<string> => `127.0.0.1:${await freePort()}`;

/**
 * The operator and one sidecar as local processes against a control plane and a Redis,
 * configured only through the environment a pod would give them (the chart's settings
 * file for the operator; namespace, instance id, served APIs and secrets for the sidecar).
 * Resolves once both report ready on their health listeners.
 */
export async function startGwStack(o: GwStackOptions): Promise<GwStack> {
  const dir = o.dir ?? mkdtempSync(join(tmpdir(), 'gw-stack-'));
  const settingsFile = join(dir, 'settings.yaml');
  writeFileSync(settingsFile, stringify(o.settings));
  const adminSecret = randomBytes(16).toString('hex');
  const portalSecret = randomBytes(16).toString('hex');
  const [operatorHealth, proxy, admin, health] = await Promise.all([loopback(), loopback(), loopback(), loopback()]);
  const timeoutMs = o.readyTimeoutMs ?? 60_000;
  const operator = startGwProcess({
    name: 'gw-operator',
    script: 'operator/main.ts',
    logPath: join(dir, 'operator.log'),
    env: {
      KUBECONFIG: o.operatorKubeconfig ?? o.kubeconfig,
      GW_REDIS_URL: o.redisUrl,
      GW_WATCH_NAMESPACES: o.namespace,
      GW_SETTINGS: settingsFile,
      GW_OPERATOR_NAMESPACE: o.namespace,
      GW_INSTANCE_ID: `gw-operator-${randomBytes(3).toString('hex')}`,
      GW_HEALTH_LISTEN: operatorHealth,
      // No kubelet runs pods here, so there is nothing to inject into; the webhook has its own tests.
      GW_WEBHOOK: 'false',
      GW_LEADER_ELECTION: 'true',
      GW_LOG_LEVEL: o.logLevel ?? 'info',
      ...(o.operatorReleaseName === undefined ? {} : { GW_RELEASE_NAME: o.operatorReleaseName }),
    },
  });
  let sidecar: GwProcess | undefined;
  const stop = async (): Promise<void> => {
    await sidecar?.stop();
    await operator.stop();
  };
  try {
    sidecar = startGwProcess({
      name: 'gw-sidecar',
      script: 'sidecar/main.ts',
      logPath: join(dir, 'sidecar.log'),
      env: {
        KUBECONFIG: o.sidecarKubeconfig ?? o.kubeconfig,
        GW_NAMESPACE: o.namespace,
        GW_INSTANCE_ID: `gw-sidecar-${randomBytes(3).toString('hex')}`,
        GW_APIS: o.apis === '*' ? '*' : o.apis.join(','),
        GW_REDIS_URL: o.redisUrl,
        GW_ADMIN_SECRET: adminSecret,
        GW_PORTAL_SECRET: portalSecret,
        GW_LISTEN: proxy,
        GW_ADMIN_LISTEN: admin,
        GW_HEALTH_LISTEN: health,
        // The tests count gateways (DRL shares): one process each, as an injected sidecar runs.
        GW_WORKERS: '1',
        GW_LOG_LEVEL: o.logLevel ?? 'info',
      },
    });
    await Promise.all([waitReady(operator, `http://${operatorHealth}/readyz`, timeoutMs), waitReady(sidecar, `http://${health}/readyz`, timeoutMs)]);
  } catch (err) {
    await stop();
    throw err;
  }
  const started = sidecar;
  return {
    operator,
    sidecar: started,
    proxyUrl: `http://${proxy}`,
    adminUrl: `http://${admin}`,
    healthUrl: `http://${health}`,
    operatorHealthUrl: `http://${operatorHealth}`,
    adminSecret,
    portalSecret,
    dir,
    logTails: (lines = 30) => `--- operator ---\n${tail(operator, lines)}\n--- sidecar ---\n${tail(started, lines)}`,
    stop,
  };
}
