import { hostname } from 'node:os';
import { z } from 'zod';
import { booleanOption, cliHelpRows, cliSchema, jsonOption, listenOption, logLevelOption, MAX_TIMER_SECONDS, namespaceOption, optionName, parseCli, periodSecondsOption, redisUrlOption, wholeNumberOption, type CliInput, type CliTable, type CliValues } from '../common/cli.ts';
import { DEFAULT_RELEASE_NAME } from './runtime/release-names.ts';
import { DEFAULT_SIDECAR_RESOURCES, sidecarResourcesSchema } from './webhook/sidecar-resources.ts';

/** The operator's options: one table drives parsing, validation, their type and `--help` (common/cli.ts). */
const table = {
  kubeconfig: { flag: 'kubeconfig', env: 'KUBECONFIG', help: 'kubeconfig file (default: in-cluster service account, then ~/.kube/config)', schema: z.string().optional() },
  redisUrl: { flag: 'redis-url', env: 'GW_REDIS_URL', help: 'Redis for Key sessions: redis[s]://, redis[s]+sentinel:// or redis[s]+cluster:// (required)', schema: redisUrlOption },
  watchNamespaces: {
    flag: 'watch-namespaces',
    env: 'GW_WATCH_NAMESPACES',
    help: 'comma list of namespaces to watch; empty = all',
    schema: z
      .string()
      .default('')
      .transform((list, ctx) => {
        const names = list.split(',').map((s) => s.trim()).filter(Boolean);
        // A list of commas alone would watch every namespace: wider than any list that names one.
        if (list !== '' && names.length === 0) ctx.addIssue({ code: 'custom', message: 'names no namespace (leave it unset to watch all)' });
        return names;
      })
      .pipe(z.array(namespaceOption)),
  },
  settings: { flag: 'settings', env: 'GW_SETTINGS', help: 'gateway settings file (YAML or JSON) put into every compiled config; GW_<OPTION> env vars win over it', schema: z.string().optional() },
  namespace: { flag: 'namespace', env: 'GW_OPERATOR_NAMESPACE', help: 'namespace of the operator: leader Lease and webhook certificate Secret (default: default)', schema: namespaceOption.default('default') },
  releaseName: {
    flag: 'release-name',
    env: 'GW_RELEASE_NAME',
    help: `prefix of the operator's own objects: MutatingWebhookConfiguration NAME-sidecar-injector, Lease NAME-operator-leader and Secret NAME-webhook-tls; each operator of a cluster needs its own (the chart gives its fullname; default ${DEFAULT_RELEASE_NAME})`,
    schema: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be lowercase letters, digits and -, starting and ending with a letter or digit, at most 63')
      .default(DEFAULT_RELEASE_NAME),
  },
  instanceId: { flag: 'instance-id', env: 'GW_INSTANCE_ID', help: 'identity in the leader Lease and Events (default: hostname-pid)', schema: z.string().min(1).default(`${hostname()}-${process.pid}`) },
  healthListen: { flag: 'health-listen', env: 'GW_HEALTH_LISTEN', help: '/healthz, /readyz and /metrics listener (default 0.0.0.0:8082)', schema: listenOption.default('0.0.0.0:8082') },
  webhookListen: { flag: 'webhook-listen', env: 'GW_WEBHOOK_LISTEN', help: 'HTTPS listener of the sidecar injection webhook (default 0.0.0.0:9443)', schema: listenOption.default('0.0.0.0:9443') },
  webhookService: { flag: 'webhook-service', env: 'GW_WEBHOOK_SERVICE', help: 'Service name in the webhook clientConfig (port 443, path /mutate)', schema: z.string().optional() },
  webhookUrl: { flag: 'webhook-url', env: 'GW_WEBHOOK_URL', help: 'explicit webhook URL instead of a Service (outside a cluster)', schema: z.url({ protocol: /^https$/, error: 'must be an https:// URL (the API server calls webhooks over TLS only)' }).optional() },
  webhookFailurePolicy: { flag: 'webhook-failure-policy', env: 'GW_WEBHOOK_FAILURE_POLICY', help: 'Fail or Ignore (default Fail)', schema: z.enum(['Fail', 'Ignore']).default('Fail') },
  webhook: { flag: 'webhook', env: 'GW_WEBHOOK', help: 'true/false: serve and register the injection webhook (default true)', schema: booleanOption.default(true) },
  webhookOwnerClusterRole: {
    flag: 'webhook-owner-cluster-role',
    env: 'GW_WEBHOOK_OWNER_CLUSTER_ROLE',
    help: 'ClusterRole that owns the webhook configuration, so deleting it (helm uninstall) removes the configuration',
    schema: z.string().min(1).optional(),
  },
  sidecarImage: { flag: 'sidecar-image', env: 'GW_SIDECAR_IMAGE', help: 'image of the injected gateway sidecar (default gw-sidecar:latest)', schema: z.string().min(1).default('gw-sidecar:latest') },
  sidecarImagePullPolicy: {
    flag: 'sidecar-image-pull-policy',
    env: 'GW_SIDECAR_IMAGE_PULL_POLICY',
    help: 'Always, IfNotPresent or Never for the injected sidecar (default: unset, Kubernetes decides by the tag)',
    schema: z.enum(['Always', 'IfNotPresent', 'Never']).optional(),
  },
  sidecarResources: {
    flag: 'sidecar-resources',
    env: 'GW_SIDECAR_RESOURCES',
    help: 'JSON requests/limits (cpu, memory) of the injected sidecar; pods override them with gw.dev/sidecar-{cpu,memory}-{request,limit} (default {"requests":{"cpu":"50m","memory":"64Mi"},"limits":{"memory":"256Mi"}})',
    schema: jsonOption(sidecarResourcesSchema, '{"limits":{"memory":"256Mi"}}').default(DEFAULT_SIDECAR_RESOURCES),
  },
  sidecarNodeOptions: {
    flag: 'sidecar-node-options',
    env: 'GW_SIDECAR_NODE_OPTIONS',
    help: 'NODE_OPTIONS of the injected sidecar, V8 heap sizes such as --max-semi-space-size=8 --max-old-space-size=160, the old space for the --sidecar-resources memory limit and scaled to a pod\'s annotated one (default: unset, Node sizes the heap)',
    schema: z.string().optional(),
  },
  sidecarWarmUpRequests: {
    flag: 'sidecar-warm-up-requests',
    env: 'GW_SIDECAR_WARM_UP_REQUESTS',
    help: 'GW_WARM_UP_REQUESTS of the injected sidecar: requests through its warm-up before it turns ready, 0 for none (default: unset, the sidecar\'s own default)',
    schema: wholeNumberOption(0, 1_000_000).optional(),
  },
  sidecarSessionCacheSize: {
    flag: 'sidecar-session-cache-size',
    env: 'GW_SIDECAR_SESSION_CACHE_SIZE',
    help: 'GW_SESSION_CACHE_SIZE of the injected sidecar: sessions it keeps, about 4.5 KB of heap each (default: unset, the sidecar\'s own 10,000)',
    schema: wholeNumberOption(1, 1_000_000).optional(),
  },
  sidecarRedisUrl: { flag: 'sidecar-redis-url', env: 'GW_SIDECAR_REDIS_URL', help: 'GW_REDIS_URL given to injected sidecars (default: --redis-url)', schema: redisUrlOption.optional() },
  sidecarServiceAccount: {
    flag: 'sidecar-service-account',
    env: 'GW_SIDECAR_SERVICE_ACCOUNT',
    help: "ServiceAccount granted the injected sidecar's access in each sidecar namespace (the chart's sidecar.serviceAccount.name); a pod injected to run as another gets a warning (default: unset, no warning)",
    schema: z.string().optional(),
  },
  sidecarEnvSecret: { flag: 'sidecar-env-secret', env: 'GW_SIDECAR_ENV_SECRET', help: "Secret whose keys become env of injected sidecars (the chart's holds GW_REDIS_URL)", schema: z.string().optional() },
  leaderElection: { flag: 'leader-election', env: 'GW_LEADER_ELECTION', help: 'true/false: elect a leader with a Lease (default true)', schema: booleanOption.default(true) },
  leaseDurationSeconds: { flag: 'lease-duration-seconds', env: 'GW_LEASE_DURATION_SECONDS', help: 'leader Lease duration (default 15)', schema: wholeNumberOption(1, MAX_TIMER_SECONDS).default(15) },
  resyncSeconds: { flag: 'resync-seconds', env: 'GW_RESYNC_SECONDS', help: 'period of the full re-reconcile that corrects drift, in seconds from 1 (default 30)', schema: periodSecondsOption.default(30) },
  orphanSessionSweepSeconds: {
    flag: 'orphan-session-sweep-seconds',
    env: 'GW_ORPHAN_SESSION_SWEEP_SECONDS',
    help: 'period of the pass over Redis that removes the sessions of Keys deleted without their finalizer, each found in two passes in a row, in seconds from 1 (default 300)',
    schema: periodSecondsOption.default(300),
  },
  concurrency: { flag: 'concurrency', env: 'GW_RECONCILE_CONCURRENCY', help: 'reconciles running at once per kind, from 1 to 1,000 (default 32)', schema: wholeNumberOption(1, 1000).default(32) },
  logLevel: { env: 'GW_LOG_LEVEL', help: 'log level: fatal, error, warn, info, debug, trace or silent (default info)', schema: logLevelOption },
} satisfies CliTable;

/** How a listener's refusal names the option that gave its address (common/listen.ts listenNamed). */
export const listenerOptionNames = { health: optionName(table.healthListen), webhook: optionName(table.webhookListen) };

/** For callers that build options without flags (tests); `parseOptions` adds the checks between options. */
export const optionsSchema = cliSchema(table);
export type OperatorOptions = CliValues<typeof table>;
export type OperatorOptionsInput = CliInput<typeof table>;

export function helpText(): string {
  return [
    'gw-operator: reconciles gw.dev resources into sidecar configuration, Key sessions and sidecar injection.',
    '',
    'Usage: gw-operator [flags]',
    '',
    `  ${'flag'.padEnd(30)} environment variable`,
    ...cliHelpRows(table),
    '  --help'.padEnd(33) + 'this text',
    '',
  ].join('\n');
}

/** Flags and environment into validated options; an invalid value names its flag and variable. */
export function parseOptions(argv: string[], env: NodeJS.ProcessEnv): OperatorOptions | 'help' {
  return parseCli(table, argv, env, (o) =>
    o.webhook && o.webhookService === undefined && o.webhookUrl === undefined
      ? { option: 'webhook' as const, message: 'the webhook needs --webhook-service (GW_WEBHOOK_SERVICE) or --webhook-url (GW_WEBHOOK_URL); or set --webhook false' }
      : undefined,
  );
}
