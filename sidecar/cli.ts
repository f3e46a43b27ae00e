import { statSync } from 'node:fs';
import { hostname } from 'node:os';
import { z } from 'zod';
import { cliHelpRows, jsonOption, listenOption, logLevelOption, namespaceOption, optionName, OptionsError, parseCli, redisUrlOption, wholeNumberOption, type CliTable, type CliValues } from '../common/cli.ts';
import { envVarOf } from '../common/settings-loader.ts';
import { defaultGatewaySettings, gatewaySettingsSchema } from '../crds/settings.ts';
import { staticTokensSchema } from './admin/bearer.ts';
import { splitHostPort } from '../common/listen.ts';
import { workersOption, type WorkerNeeds } from './workers/count.ts';
import { SESSION_CACHE_DEFAULT_SIZE } from './auth/session-cache.ts';
import { WARM_UP_DEADLINE_MS, WARM_UP_DEFAULT_REQUESTS } from './warm-up-bounds.ts';

/** The proxy listener address of a gateway that serves only the admin operations. */
export const PROXY_OFF = 'off';

/**
 * Where listeners bind when given no address: loopback standalone, so a gateway started on
 * a workstation does not open its admin port to the network; every interface in a
 * cluster, where the pod's address is how anything reaches it (the injected sidecar and
 * the chart's admin gateway set their addresses explicitly anyway).
 */
const defaultHost = (standalone: boolean): string => (standalone ? '127.0.0.1' : '0.0.0.0');
const listenerPorts = { listen: 8080, adminListen: 8081, healthListen: 8082 } as const;
type Listener = keyof typeof listenerPorts;
const defaultAddress = (listener: Listener): string =>
  ` Default: ${defaultHost(true)}:${listenerPorts[listener]} with --config, else ${defaultHost(false)}:${listenerPorts[listener]}.`;

/**
 * Where this gateway's instance id is read from. Its default takes the process id, so the
 * primary of several workers hands its own to them: each names itself after it, and counts
 * its siblings under it (sidecar/main.ts).
 */
export const INSTANCE_ID_ENV = 'GW_INSTANCE_ID';

/** The listeners that can serve TLS; the health listener stays plain HTTP for the kubelet's probes. */
export const TLS_LISTENERS = ['admin', 'proxy'] as const;
export type TlsListener = (typeof TLS_LISTENERS)[number];

const isTlsListener = (name: string): name is TlsListener => (TLS_LISTENERS as readonly string[]).includes(name);

const tlsListenersOption = z.string().transform((value, ctx) => {
  const names = value.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  if (names.length === 0 || !names.every(isTlsListener)) {
    ctx.addIssue({ code: 'custom', message: `must be a comma list of admin, proxy (got "${value}")` });
    return z.NEVER;
  }
  return new Set(names) as ReadonlySet<TlsListener>;
});

function parseApis(value: string): '*' | ReadonlySet<string> {
  const ids = value.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  return ids.length === 0 || ids.includes('*') ? '*' : new Set(ids);
}

/**
 * An admin or portal key. Guessing is cheap (the admin listener answers thousands of tries a
 * second), so a key is at least as long as a bearer token (16): the chart generates 40. Empty
 * is no key: its operations refuse every call (warned of at start).
 *
 * It must be what a header can carry: Node drops the whitespace around a header's value and
 * reads it as latin1, while a key is compared as UTF-8. A key ending in a line break (a file
 * written by echo, made a Secret with --from-file) or holding `é` started, then refused every
 * call; a space inside reaches the gateway as sent.
 */
const secretOption = z
  .string()
  .refine((secret) => secret === '' || secret.length >= 16, 'must be 16 characters or more (empty: no key, and its operations refuse every call)')
  .refine(
    (secret) => /^([\x21-\x7e]( *[\x21-\x7e])*)?$/.test(secret),
    'must be visible ASCII characters, with spaces only between them, or no header can carry it and every call is refused (a line break at its end: write its file with printf, not echo)',
  )
  .optional();

/** The sidecar's options: one table drives parsing, validation, their type and `--help` (common/cli.ts). */
const table = {
  configDir: { flag: 'config', value: 'DIR', env: 'GW_CONFIG_DIR', help: 'Folder of resource YAML (standalone mode); without it, config comes from Kubernetes.', schema: z.string().optional() },
  listen: {
    flag: 'listen',
    value: 'HOST:PORT',
    env: 'GW_LISTEN',
    help: `Proxy listener HOST:PORT; "off" for a gateway that serves only the admin operations (no proxy, no share of a DRL limit).${defaultAddress('listen')}`,
    schema: z.union([z.literal(PROXY_OFF), listenOption]).optional(),
  },
  adminListen: { flag: 'admin-listen', value: 'HOST:PORT', env: 'GW_ADMIN_LISTEN', help: `Admin listener HOST:PORT (the admin operations).${defaultAddress('adminListen')}`, schema: listenOption.optional() },
  healthListen: { flag: 'health-listen', value: 'HOST:PORT', env: 'GW_HEALTH_LISTEN', help: `HOST:PORT of /healthz, /readyz and /metrics.${defaultAddress('healthListen')}`, schema: listenOption.optional() },
  tlsCertFile: { flag: 'tls-cert', value: 'FILE', env: 'GW_TLS_CERT_FILE', help: 'PEM certificate (chain) of the TLS listeners; with --tls-key. Re-read when the file changes.', schema: z.string().min(1).optional() },
  tlsKeyFile: { flag: 'tls-key', value: 'FILE', env: 'GW_TLS_KEY_FILE', help: 'PEM private key of --tls-cert. Re-read when the file changes.', schema: z.string().min(1).optional() },
  tlsListeners: {
    flag: 'tls-listeners',
    value: 'LIST',
    env: 'GW_TLS_LISTENERS',
    help: 'Listeners that serve TLS when a certificate is given: admin, proxy, or both. Default: admin,proxy.',
    schema: tlsListenersOption.optional(),
  },
  redisUrl: { flag: 'redis-url', value: 'URL', env: 'GW_REDIS_URL', help: 'Redis for counters and sessions: required in a cluster; with --config, without it an in-memory store (one process).', schema: redisUrlOption.optional() },
  workers: {
    flag: 'workers',
    value: 'N|auto',
    env: 'GW_WORKERS',
    help: 'Gateway processes sharing the listeners, each counted as a gateway by DRL. auto: one per CPU this process may use (its cgroup CPU limit included), no more than one per 128 MiB of its memory limit beyond the first, and 1 without Redis. More than one needs --redis-url. Default: auto (the injected sidecar is given 1).',
    schema: workersOption.default('auto'),
  },
  warmUpRequests: {
    flag: 'warm-up-requests',
    value: 'N',
    env: 'GW_WARM_UP_REQUESTS',
    help: `Requests sent through a loopback copy of the request path before /readyz turns ready, so the first users meet compiled code (docs/architecture.md#warm-up); at most ${WARM_UP_DEADLINE_MS / 1000} s. 0: none. Default: ${WARM_UP_DEFAULT_REQUESTS}.`,
    schema: wholeNumberOption(0, 1_000_000).default(WARM_UP_DEFAULT_REQUESTS),
  },
  sessionCacheSize: {
    flag: 'session-cache-size',
    value: 'N',
    env: 'GW_SESSION_CACHE_SIZE',
    help: `Sessions each gateway process keeps, at about 4.5 KB of heap each (docs/architecture.md#sessions). Past this many keys in use at once, the ones that come back least often are read from Redis again at each of their requests. Default: ${SESSION_CACHE_DEFAULT_SIZE}.`,
    schema: wholeNumberOption(1, 1_000_000).default(SESSION_CACHE_DEFAULT_SIZE),
  },
  settingsFile: { flag: 'settings', value: 'FILE', env: 'GW_SETTINGS', help: 'Gateway settings file (YAML or JSON).', schema: z.string().optional() },
  apis: {
    flag: 'apis',
    value: 'IDS',
    env: 'GW_APIS',
    help: 'In a cluster: comma list of api_ids this sidecar serves; * for all in its namespace. Default: *.',
    schema: z.string().default('*').transform(parseApis),
  },
  namespace: { env: 'GW_NAMESPACE', help: 'Namespace whose compiled ConfigMaps are watched (the pod namespace). Default: default.', schema: namespaceOption.default('default') },
  instanceId: { env: INSTANCE_ID_ENV, help: 'This gateway instance (the pod name). Default: hostname-pid.', schema: z.string().min(1).default(`${hostname()}-${process.pid}`) },
  adminSecret: { env: 'GW_ADMIN_SECRET', help: 'Admin key for Admin-Auth and X-GW-Authorization: 16 characters or more, visible ASCII (spaces only between them).', schema: secretOption },
  portalSecret: { env: 'GW_PORTAL_SECRET', help: 'API key for the portal Authorization header: 16 characters or more, visible ASCII (spaces only between them).', schema: secretOption },
  bearerTokens: {
    env: 'GW_BEARER_TOKENS',
    help: 'Standalone only: JSON array of {name, token, permissions} for the category reads (in a cluster: TokenReview): get:apidefinitions reads one API\'s categories, list:apidefinitions and list:categories all of them, * everything.',
    schema: jsonOption(staticTokensSchema, '[{"name":"ci","token":"…","permissions":["get:apidefinitions","list:apidefinitions","list:categories"]}]').default([]),
  },
  kubeconfig: { env: 'KUBECONFIG', help: 'Kubeconfig file outside a cluster (in a pod, the service account is used).', schema: z.string().optional() },
  logLevel: { env: 'GW_LOG_LEVEL', help: 'Log level: fatal, error, warn, info, debug, trace or silent. Default: info.', schema: logLevelOption },
} satisfies CliTable;

/** How a listener's refusal names the option that gave its address (common/listen.ts listenNamed). */
export const listenerOptionNames = { proxy: optionName(table.listen), admin: optionName(table.adminListen), health: optionName(table.healthListen) };

/** Everything the sidecar process is told at start: the table's values, every listener resolved to an address. */
export type SidecarOptions = Omit<CliValues<typeof table>, Listener> & Record<Listener, string>;

export function helpText(): string {
  const lines = ['Usage: gw-sidecar [flags]', '', 'Flags and environment variables (a flag wins over its variable):', ...cliHelpRows(table)];
  lines.push('  --help'.padEnd(33) + 'Show this text.');
  lines.push('', 'Gateway settings (settings file keys; each also GW_<OPTION>, which wins over the file):');
  for (const [option, schema] of Object.entries(gatewaySettingsSchema.shape)) {
    const fallback = JSON.stringify(defaultGatewaySettings[option as keyof typeof defaultGatewaySettings]);
    lines.push(`  ${option} / ${envVarOf(option)}`.padEnd(52) + ` ${schema.description ?? ''} Default: ${fallback}.`);
  }
  return lines.join('\n');
}

/** Flags win over environment variables, which win over defaults. 'help': --help was given. */
export function parseSidecarArgs(argv: string[], env: NodeJS.ProcessEnv): SidecarOptions | 'help' {
  const values = parseCli(table, argv, env);
  if (values === 'help') return values;
  if ((values.tlsCertFile === undefined) !== (values.tlsKeyFile === undefined)) {
    throw new OptionsError('--tls-cert (GW_TLS_CERT_FILE) and --tls-key (GW_TLS_KEY_FILE) go together: give both or neither');
  }
  if (values.configDir !== undefined && !isFolder(values.configDir)) {
    throw new OptionsError(`--config (GW_CONFIG_DIR): ${values.configDir} is not a folder (the folder of resource YAML files a standalone gateway serves)`);
  }
  if (values.configDir === undefined && values.redisUrl === undefined) {
    // In a cluster the Keys' sessions are only in Redis (the operator writes them there), so
    // an in-memory store would refuse every key and count each pod's limits on its own.
    throw new OptionsError(
      'a gateway in a cluster (no --config) needs --redis-url (GW_REDIS_URL): the operator writes the Keys\' sessions to Redis, and every gateway counts its limits there. ' +
        "An injected sidecar takes it from the chart's env Secret, which the chart makes in the namespaces of sidecar.namespaces",
    );
  }
  if (values.configDir !== undefined && values.apis !== '*') {
    throw new OptionsError('--apis (GW_APIS) selects the compiled ConfigMaps of a cluster; a standalone gateway serves every API of its --config folder: keep only those APIs there');
  }
  const address = (listener: Listener): string => values[listener] ?? `${defaultHost(values.configDir !== undefined)}:${listenerPorts[listener]}`;
  const options = { ...values, listen: address('listen'), adminListen: address('adminListen'), healthListen: address('healthListen') };
  const refusal = listenerClash(options) ?? workersRefusal(options);
  if (refusal) throw new OptionsError(refusal);
  return options;
}

/** Several workers given what they cannot share: why, or undefined. */
function workersRefusal(options: Pick<SidecarOptions, 'redisUrl' | 'listen' | 'workers'>): string | undefined {
  if (options.workers === 'auto' || options.workers === 1) return undefined;
  const needs = workerNeeds(options);
  const refusal = !needs.redis
    ? 'needs --redis-url (GW_REDIS_URL): without Redis each process would count limits on its own'
    : needs.proxy === 'off'
      ? 'needs the proxy listener: with --listen off only one process serves (the admin operations)'
      : needs.proxy === 'any-port'
        ? 'needs a fixed proxy port: the workers share it through SO_REUSEPORT, so port 0 cannot be chosen by each'
        : undefined;
  return refusal && `--workers (GW_WORKERS) ${options.workers} ${refusal}`;
}

const wildcardHosts = new Set(['', '0.0.0.0', '::']);

/**
 * Two of the gateway's own listeners on one port (other than 0) of overlapping addresses: the
 * second would fail to bind at start with EADDRINUSE, which names neither option.
 */
function listenerClash(options: Record<Listener, string>): string | undefined {
  const bound = (Object.keys(listenerPorts) as Listener[])
    .filter((listener) => options[listener] !== PROXY_OFF)
    .map((listener) => ({ listener, ...splitHostPort(options[listener]) }));
  for (const [i, a] of bound.entries()) {
    for (const b of bound.slice(i + 1)) {
      if (a.port === 0 || a.port !== b.port) continue;
      if (a.host === b.host || wildcardHosts.has(a.host) || wildcardHosts.has(b.host)) {
        return `${optionName(table[a.listener])} and ${optionName(table[b.listener])} both listen on port ${a.port}: give each listener a port of its own`;
      }
    }
  }
  return undefined;
}

function isFolder(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** What decides whether several workers can serve (sidecar/workers/count.ts). */
export function workerNeeds(options: Pick<SidecarOptions, 'redisUrl' | 'listen'>): WorkerNeeds {
  const proxy = options.listen === PROXY_OFF ? 'off' : splitHostPort(options.listen).port === 0 ? 'any-port' : 'fixed-port';
  return { redis: options.redisUrl !== undefined, proxy };
}
