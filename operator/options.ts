import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { parseRedisUrl, RedisUrlError } from '../common/redis-url.ts';
import { DEFAULT_SIDECAR_RESOURCES, sidecarResourcesSchema } from './webhook/sidecar-resources.ts';

/**
 * The operator's options: each has a flag and an environment variable (the flag wins),
 * one table drives parsing, validation and `--help`.
 */
const table = [
  { flag: 'kubeconfig', env: 'KUBECONFIG', help: 'kubeconfig file (default: in-cluster service account, then ~/.kube/config)' },
  { flag: 'redis-url', env: 'GW_REDIS_URL', help: 'Redis for Key sessions: redis[s]://, redis[s]+sentinel:// or redis[s]+cluster:// (required)' },
  { flag: 'watch-namespaces', env: 'GW_WATCH_NAMESPACES', help: 'comma list of namespaces to watch; empty = all' },
  { flag: 'settings', env: 'GW_SETTINGS', help: 'gateway settings file (YAML) put into every compiled config; GW_<OPTION> env vars win over it' },
  { flag: 'namespace', env: 'GW_OPERATOR_NAMESPACE', help: 'namespace of the operator: leader Lease and webhook certificate Secret (default: default)' },
  { flag: 'instance-id', env: 'GW_INSTANCE_ID', help: 'identity in the leader Lease and Events (default: hostname-pid)' },
  { flag: 'health-listen', env: 'GW_HEALTH_LISTEN', help: '/healthz, /readyz and /metrics listener (default 0.0.0.0:8082)' },
  { flag: 'webhook-listen', env: 'GW_WEBHOOK_LISTEN', help: 'HTTPS listener of the sidecar injection webhook (default 0.0.0.0:9443)' },
  { flag: 'webhook-service', env: 'GW_WEBHOOK_SERVICE', help: 'Service name in the webhook clientConfig (port 443, path /mutate)' },
  { flag: 'webhook-url', env: 'GW_WEBHOOK_URL', help: 'explicit webhook URL instead of a Service (outside a cluster)' },
  { flag: 'webhook-failure-policy', env: 'GW_WEBHOOK_FAILURE_POLICY', help: 'Fail or Ignore (default Fail)' },
  { flag: 'webhook', env: 'GW_WEBHOOK', help: 'true/false: serve and register the injection webhook (default true)' },
  { flag: 'webhook-owner-cluster-role', env: 'GW_WEBHOOK_OWNER_CLUSTER_ROLE', help: 'ClusterRole that owns the webhook configuration, so deleting it (helm uninstall) removes the configuration' },
  { flag: 'sidecar-image', env: 'GW_SIDECAR_IMAGE', help: 'image of the injected gateway sidecar (default gw-sidecar:latest)' },
  { flag: 'sidecar-image-pull-policy', env: 'GW_SIDECAR_IMAGE_PULL_POLICY', help: 'Always, IfNotPresent or Never for the injected sidecar (default: unset, Kubernetes decides by the tag)' },
  { flag: 'sidecar-resources', env: 'GW_SIDECAR_RESOURCES', help: 'JSON requests/limits (cpu, memory) of the injected sidecar; pods override them with gw.dev/sidecar-{cpu,memory}-{request,limit} (default {"requests":{"cpu":"50m","memory":"64Mi"},"limits":{"memory":"256Mi"}})' },
  { flag: 'sidecar-redis-url', env: 'GW_SIDECAR_REDIS_URL', help: 'GW_REDIS_URL given to injected sidecars (default: --redis-url)' },
  { flag: 'sidecar-env-secret', env: 'GW_SIDECAR_ENV_SECRET', help: 'Secret whose keys become env of injected sidecars (admin secrets, Redis password)' },
  { flag: 'leader-election', env: 'GW_LEADER_ELECTION', help: 'true/false: elect a leader with a Lease (default true)' },
  { flag: 'lease-duration-seconds', env: 'GW_LEASE_DURATION_SECONDS', help: 'leader Lease duration (default 15)' },
  { flag: 'resync-seconds', env: 'GW_RESYNC_SECONDS', help: 'period of the full re-reconcile that corrects drift (default 30)' },
  { flag: 'concurrency', env: 'GW_RECONCILE_CONCURRENCY', help: 'reconciles running at once per kind (default 8)' },
] as const;

type Flag = (typeof table)[number]['flag'];

const bool = z.enum(['true', 'false']).transform((v) => v === 'true');
const listen = z.string().regex(/^[^:\s]*:\d{1,5}$/, 'must be HOST:PORT');
const positiveInt = z.coerce.number().int().min(1);
/** The message of a bad URL never repeats the URL: it may hold a password. */
const redisUrl = z.string().superRefine((url, ctx) => {
  try {
    parseRedisUrl(url);
  } catch (error) {
    if (!(error instanceof RedisUrlError)) throw error;
    ctx.addIssue({ code: 'custom', message: error.message });
  }
});

export const optionsSchema = z.object({
  kubeconfig: z.string().optional(),
  redisUrl,
  watchNamespaces: z.string().default('').transform((v) => v.split(',').map((s) => s.trim()).filter(Boolean)),
  settings: z.string().optional(),
  namespace: z.string().min(1).default('default'),
  instanceId: z.string().min(1).default(`${hostname()}-${process.pid}`),
  healthListen: listen.default('0.0.0.0:8082'),
  webhookListen: listen.default('0.0.0.0:9443'),
  webhookService: z.string().optional(),
  webhookUrl: z.url({ protocol: /^https$/ }).optional(),
  webhookFailurePolicy: z.enum(['Fail', 'Ignore']).default('Fail'),
  webhook: bool.default(true),
  webhookOwnerClusterRole: z.string().min(1).optional(),
  sidecarImage: z.string().min(1).default('gw-sidecar:latest'),
  sidecarImagePullPolicy: z.enum(['Always', 'IfNotPresent', 'Never']).optional(),
  sidecarResources: z.string().transform((json, ctx) => {
    try {
      return JSON.parse(json) as unknown;
    } catch {
      ctx.addIssue({ code: 'custom', message: 'must be JSON such as {"limits":{"memory":"256Mi"}}' });
      return z.NEVER;
    }
  }).pipe(sidecarResourcesSchema).default(DEFAULT_SIDECAR_RESOURCES),
  sidecarRedisUrl: redisUrl.optional(),
  sidecarEnvSecret: z.string().optional(),
  leaderElection: bool.default(true),
  leaseDurationSeconds: positiveInt.default(15),
  resyncSeconds: z.coerce.number().positive().default(30),
  concurrency: positiveInt.default(8),
}).refine((o) => !o.webhook || o.webhookService !== undefined || o.webhookUrl !== undefined, {
  message: 'the webhook needs --webhook-service (GW_WEBHOOK_SERVICE) or --webhook-url (GW_WEBHOOK_URL); or set --webhook false',
  path: ['webhook'],
});
export type OperatorOptions = z.output<typeof optionsSchema>;
export type OperatorOptionsInput = z.input<typeof optionsSchema>;

export class OptionsError extends Error {
  readonly code = 'invalid_options';
}

const camel = (flag: Flag): string => flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

export function helpText(): string {
  const rows = table.map((o) => `  --${o.flag.padEnd(24)} ${o.env.padEnd(28)} ${o.help}`);
  return ['gw-operator: reconciles gw.dev resources into sidecar configuration, Key sessions and sidecar injection.', '', 'Usage: gw-operator [flags]', '', '  flag                       environment variable', ...rows, '  --help                     this text', ''].join('\n');
}

/** Flags and environment into validated options; an invalid value names its flag and variable. */
export function parseOptions(argv: string[], env: NodeJS.ProcessEnv): OperatorOptions | 'help' {
  let values: Record<string, unknown>;
  try {
    const parsed = parseArgs({
      args: argv,
      options: Object.fromEntries([...table.map((o) => [o.flag, { type: 'string' as const }]), ['help', { type: 'boolean' as const }]]),
      strict: true,
      allowPositionals: false,
    });
    values = parsed.values;
  } catch (error) {
    throw new OptionsError((error as Error).message);
  }
  if (values.help) return 'help';
  const raw: Record<string, unknown> = {};
  for (const o of table) {
    const value = (values[o.flag] as string | undefined) ?? env[o.env];
    if (value !== undefined && value !== '') raw[camel(o.flag)] = value;
  }
  const result = optionsSchema.safeParse(raw);
  if (result.success) return result.data;
  throw new OptionsError(
    result.error.issues
      .map((issue) => {
        const o = table.find((t) => camel(t.flag) === issue.path[0]);
        return o ? `--${o.flag} (${o.env}): ${issue.message}` : issue.message;
      })
      .join('; '),
  );
}
