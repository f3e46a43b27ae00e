import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { defaultGatewaySettings, gatewaySettingsSchema } from '../crds/settings.ts';
import { envVarOf } from '../common/settings-loader.ts';

/** Everything the sidecar process is told at start, from flags and their environment variables. */
export interface SidecarOptions {
  configDir: string | undefined;
  listen: string;
  adminListen: string;
  healthListen: string;
  redisUrl: string | undefined;
  settingsFile: string | undefined;
  /** `'*'` or the api_ids served. */
  apis: '*' | ReadonlySet<string>;
  namespace: string;
  instanceId: string;
  adminSecret: string | undefined;
  portalSecret: string | undefined;
  kubeconfig: string | undefined;
}

interface FlagSpec {
  flag: string;
  env: string;
  value: string;
  help: string;
  fallback?: string;
  /** Listeners: the port of the default address, whose host depends on the mode (defaultHost). */
  port?: number;
}

/**
 * Where listeners bind when given no address: loopback standalone, so a gateway started on
 * a workstation does not open its admin port to the network; every interface in a
 * cluster, where the pod's address is how anything reaches it (the injected sidecar and
 * the chart's admin gateway set their addresses explicitly anyway).
 */
const defaultHost = (standalone: boolean): string => (standalone ? '127.0.0.1' : '0.0.0.0');

const flags: Record<string, FlagSpec> = {
  config: { flag: 'config', env: 'GW_CONFIG_DIR', value: 'DIR', help: 'Folder of resource YAML (standalone mode); without it, config comes from Kubernetes.' },
  listen: { flag: 'listen', env: 'GW_LISTEN', value: 'HOST:PORT', help: 'Proxy listener; "off" for a gateway that serves only the admin operations (no proxy, no share of a DRL limit).', port: 8080 },
  'admin-listen': { flag: 'admin-listen', env: 'GW_ADMIN_LISTEN', value: 'HOST:PORT', help: 'Admin listener (the admin operations).', port: 8081 },
  'health-listen': { flag: 'health-listen', env: 'GW_HEALTH_LISTEN', value: 'HOST:PORT', help: '/healthz, /readyz and /metrics.', port: 8082 },
  'redis-url': { flag: 'redis-url', env: 'GW_REDIS_URL', value: 'URL', help: 'Redis for counters and sessions; without it, an in-memory store (one process).' },
  settings: { flag: 'settings', env: 'GW_SETTINGS', value: 'FILE', help: 'Gateway settings file (YAML or JSON).' },
  apis: { flag: 'apis', env: 'GW_APIS', value: 'IDS', help: 'Comma list of api_ids this sidecar serves; * for all in its namespace.', fallback: '*' },
};

const envOnly: [string, string][] = [
  ['GW_NAMESPACE', 'Namespace whose compiled ConfigMaps are watched (the pod namespace). Default: default.'],
  ['GW_INSTANCE_ID', 'This gateway instance (the pod name). Default: hostname-pid.'],
  ['GW_ADMIN_SECRET', 'Admin key for Admin-Auth and X-GW-Authorization.'],
  ['GW_PORTAL_SECRET', 'API key for the portal Authorization header.'],
  ['GW_BEARER_TOKENS', 'Standalone only: JSON array of {name, token, permissions} for the category reads (in a cluster: TokenReview).'],
  ['KUBECONFIG', 'Kubeconfig file outside a cluster (in a pod, the service account is used).'],
  ['GW_LOG_LEVEL', 'pino log level. Default: info.'],
];

export function helpText(): string {
  const lines = ['Usage: gw-sidecar [flags]', '', 'Flags (each also settable by its environment variable; the flag wins):'];
  for (const spec of Object.values(flags)) {
    const address = spec.port ? ` Default: ${defaultHost(true)}:${spec.port} with --config, else ${defaultHost(false)}:${spec.port}.` : '';
    const fallback = spec.fallback ? ` Default: ${spec.fallback}.` : address;
    lines.push(`  --${spec.flag} ${spec.value}`.padEnd(32) + `${spec.env.padEnd(20)} ${spec.help}${fallback}`);
  }
  lines.push('  --help'.padEnd(32) + ''.padEnd(20) + ' Show this text.', '', 'Environment:');
  for (const [name, help] of envOnly) lines.push(`  ${name.padEnd(50)} ${help}`);
  lines.push('', 'Gateway settings (settings file keys; each also GW_<OPTION>, which wins over the file):');
  for (const [option, schema] of Object.entries(gatewaySettingsSchema.shape)) {
    const fallback = JSON.stringify(defaultGatewaySettings[option as keyof typeof defaultGatewaySettings]);
    lines.push(`  ${option} / ${envVarOf(option)}`.padEnd(52) + ` ${schema.description ?? ''} Default: ${fallback}.`);
  }
  return lines.join('\n');
}

function parseApis(value: string): '*' | ReadonlySet<string> {
  const ids = value.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  return ids.length === 0 || ids.includes('*') ? '*' : new Set(ids);
}

/** Flags win over environment variables, which win over defaults. `null`: --help was asked for. */
/** The proxy listener address of a gateway that serves only the admin operations. */
export const PROXY_OFF = 'off';

export function parseSidecarArgs(argv: string[], env: NodeJS.ProcessEnv): SidecarOptions | null {
  const options = Object.fromEntries(Object.keys(flags).map((name) => [name, { type: 'string' as const }]));
  const { values } = parseArgs({ args: argv, options: { ...options, help: { type: 'boolean' } }, strict: true });
  if (values.help === true) return null;
  const pick = (name: string): string | undefined => {
    const spec = flags[name];
    const fromFlag = (values as Record<string, string | boolean | undefined>)[name];
    if (typeof fromFlag === 'string') return fromFlag;
    return (spec ? env[spec.env] : undefined) || spec?.fallback;
  };
  const configDir = pick('config');
  const address = (name: string): string => pick(name) ?? `${defaultHost(configDir !== undefined)}:${flags[name]!.port!}`;
  return {
    configDir,
    listen: address('listen'),
    adminListen: address('admin-listen'),
    healthListen: address('health-listen'),
    redisUrl: pick('redis-url'),
    settingsFile: pick('settings'),
    apis: parseApis(pick('apis') ?? '*'),
    namespace: env.GW_NAMESPACE || 'default',
    instanceId: env.GW_INSTANCE_ID || `${hostname()}-${process.pid}`,
    adminSecret: env.GW_ADMIN_SECRET || undefined,
    portalSecret: env.GW_PORTAL_SECRET || undefined,
    kubeconfig: env.KUBECONFIG || undefined,
  };
}

