import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { AppsV1Api, CoreV1Api, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyLimitsAnswerSchema } from '../../../crds/admin-answers.ts';
import { KEY_DATA, keySecretName } from '../../../operator/keys/key-secrets.ts';
import type { Operator } from '../../../operator/operator.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { findKubectl } from '../../harness/bins.ts';
import { freePort } from '../../harness/ports.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { runTool, type ToolResult } from '../../harness/run-tool.ts';
import { client, ready, startOperator, waitFor } from '../operator/support.ts';
import { call, sidecarOptions, startTestSidecar, type CallResult } from '../sidecar/helpers.ts';

const ROOT = join(import.meta.dirname, '..', '..', '..');
const ADMIN_SECRET = 'test-admin-secret';

/**
 * `kubectl gw`, installed as README.md#kubectl-gw says (`npm i -g` of the checkout) and run
 * through kubectl itself, against the real API server, an operator and a gateway on Redis.
 */
describe('kubectl gw', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let prefix: string;
  let ns: string;
  let upstream: EchoUpstream;
  let operator: Operator;
  let sidecar: RunningSidecar;
  /** A gateway on the default algorithm, the DRL: it beats, so it is seen live. */
  let drlSidecar: RunningSidecar;
  let drlInstance: string;
  let refused: CallResult;
  const planSmoothing = { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 60 };

  /** kubectl, and the plugin installed, on PATH. */
  const pluginEnv = (env: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({ ...process.env, PATH: `${join(prefix, 'bin')}:${dirname(findKubectl())}:${process.env.PATH ?? ''}`, KUBECONFIG: testEnv().kubeconfig, GW_ADMIN_SECRET: '', ...env });
  const kubectlGw = (args: string[], env: NodeJS.ProcessEnv = {}): Promise<ToolResult> => runTool(findKubectl(), ['gw', ...args], { timeoutMs: 30_000, allowFail: true, env: pluginEnv(env) });

  beforeAll(async () => {
    prefix = await mkdtemp(join(tmpdir(), 'gw-plugin-'));
    await runTool('npm', ['install', '--global', '--prefix', prefix, ROOT, '--no-audit', '--no-fund'], { timeoutMs: 120_000 });
    ns = await createNamespace('plugin');
    upstream = await startEchoUpstream();
    operator = await startOperator(kc, { redisUrl: testEnv().redisUrl, watchNamespaces: ns });
    sidecar = await startTestSidecar(sidecarOptions(ns), { env: { GW_ENABLE_REDIS_ROLLING_LIMITER: 'true', GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' } });
    const drlOptions = sidecarOptions(ns);
    drlInstance = drlOptions.instanceId;
    drlSidecar = await startTestSidecar(drlOptions);
    await c.create('ApiDefinition', ns, {
      metadata: { name: 'orders' },
      spec: { api_id: 'orders', use_keyless: false, proxy: { listen_path: '/orders/', target_url: upstream.url, strip_listen_path: true } },
    });
    // Smoothing at its rate moves nothing here; the limits reads show where it applies. An hour's
    // window keeps the key refused for the whole file, however slowly a loaded machine runs it.
    await c.create('Policy', ns, { metadata: { name: 'plan' }, spec: { rate: 2, per: 3600, smoothing: planSmoothing, access_rights: { orders: { api_id: 'orders' } } } });
    await c.create('Key', ns, { metadata: { name: 'mobile' }, spec: { apply_policies: ['plan'] } });
    await c.create('Key', ns, { metadata: { name: 'orphan' }, spec: { apply_policies: ['no-such-plan'] } });
    await waitFor('the Key Ready', async () => ready(await c.get('Key', ns, 'mobile'))?.status === 'True');
    await waitFor('the API served', async () => sidecar.runtime.apis().some((api) => api.api_id === 'orders'));
    const secret = await kc.makeApiClient(CoreV1Api).readNamespacedSecret({ namespace: ns, name: keySecretName('mobile') });
    const raw = Buffer.from(secret.data![KEY_DATA]!, 'base64').toString('utf8');
    for (let i = 0; i < 3; i++) refused = await call(`${sidecar.proxyUrl}/orders/`, { headers: { authorization: raw } });
    expect(refused.status).toBe(429);
  }, 180_000);

  afterAll(async () => {
    await sidecar?.close();
    await drlSidecar?.close();
    await operator?.stop();
    await upstream?.close();
    if (prefix) await rm(prefix, { recursive: true, force: true });
  });

  it('limits: names the level that refused, with the 429\'s own figures', async () => {
    const args = ['limits', 'mobile', '-n', ns, '--api', 'orders', '--path', '/orders/', '--admin-url', sidecar.adminUrl];
    const json = await kubectlGw([...args, '-o', 'json'], { GW_ADMIN_SECRET: ADMIN_SECRET });
    expect(json.stderr).toBe('');
    const answer = keyLimitsAnswerSchema.parse(JSON.parse(json.stdout));
    expect([answer.outcome, answer.refused_by]).toEqual(['key_rate_limited', 'key_global']);
    const [level] = answer.limits;
    expect({ limit: String(level!.limit), remaining: String(level!.remaining) }).toEqual({
      limit: refused.headers['x-ratelimit-limit'],
      remaining: refused.headers['x-ratelimit-remaining'],
    });
    // The read is of a request now, which the log's refused third entry would hold back, where
    // the 429's reset went by its second: the same second, or the next if the two straddled one.
    expect(Number(level!.reset) - Number(refused.headers['x-ratelimit-reset'])).toBeOneOf([0, 1]);

    const shown = await kubectlGw(args, { GW_ADMIN_SECRET: ADMIN_SECRET });
    expect(shown.code).toBe(0);
    const lines = shown.stdout.split('\n');
    expect(lines[0]).toBe(`Key ${ns}/mobile on API orders, GET /orders/: a request now is refused by key_global: 429 key_rate_limited`);
    expect(lines[2]).toMatch(/^LEVEL\s+SOURCE\s+RULE\s+ALGORITHM\s+COUNT\s+LIMIT\s+REMAINING\s+RESET$/);
    expect(lines[3]).toMatch(/^key_global\s+Policy\/plan\s+-\s+sliding_log\s+3\s+2\s+0\s+(\d+[smh])+$/);
  });

  it('limits -o wide: smoothing in force under the sliding log, and named as not applied under the DRL', async () => {
    await waitFor('the DRL gateway serving orders', async () => drlSidecar.runtime.apis().some((api) => api.api_id === 'orders'));
    const args = (adminUrl: string, output: string) => ['limits', 'mobile', '-n', ns, '--api', 'orders', '--admin-url', adminUrl, '-o', output];
    for (const [adminUrl, algorithm, cell, smoothing, unused] of [
      [sidecar.adminUrl, 'sliding_log', 'threshold 2, step 1', planSmoothing, null],
      [drlSidecar.adminUrl, 'drl', 'not applied: drl does not smooth (sliding log only)', null, planSmoothing],
    ] as const) {
      const answer = keyLimitsAnswerSchema.parse(JSON.parse((await kubectlGw(args(adminUrl, 'json'), { GW_ADMIN_SECRET: ADMIN_SECRET })).stdout));
      expect(answer.limits.map((l) => [l.level, l.algorithm, l.smoothing, l.unused_smoothing])).toEqual([['key_global', algorithm, smoothing, unused]]);
      const wide = await kubectlGw(args(adminUrl, 'wide'), { GW_ADMIN_SECRET: ADMIN_SECRET });
      expect(wide.stderr).toBe('');
      const lines = wide.stdout.split('\n');
      expect(lines[2]).toMatch(/\sRATE\s+DRL SHARE\s+SMOOTHING$/);
      expect(lines[3]).toMatch(new RegExp(`^key_global\\s+Policy/plan\\s.*\\s2/3600s\\s.*\\s${cell.replace(/[()]/g, '\\$&')}$`));
    }
  });

  /** The chart's admin gateway in `namespace`, as far as the API server knows it (nothing runs it here), reading `secret`. */
  async function createAdminGateway(namespace: string, secret: string): Promise<void> {
    const labels = { 'app.kubernetes.io/part-of': 'gw', 'app.kubernetes.io/component': 'admin', app: 'plugin-test' };
    await kc.makeApiClient(CoreV1Api).createNamespacedSecret({ namespace, body: { metadata: { name: 'gw-auth' }, stringData: { 'admin-secret': secret } } });
    await kc.makeApiClient(AppsV1Api).createNamespacedDeployment({
      namespace,
      body: {
        metadata: { name: 'gw-admin', labels },
        spec: {
          replicas: 0,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: { containers: [{ name: 'gateway', image: 'gw-sidecar', env: [{ name: 'GW_ADMIN_SECRET', valueFrom: { secretKeyRef: { name: 'gw-auth', key: 'admin-secret' } } }] }] },
          },
        },
      },
    });
  }

  /** An HTTP server answering every request `status` and `body`, as a proxy before the admin gateway may; it keeps the paths asked. */
  async function startFakeAdmin(status: number, contentType: string, body: string): Promise<{ url: string; paths: string[]; close: () => void }> {
    const paths: string[] = [];
    const server = createServer((req, res) => {
      paths.push(req.url ?? '');
      res.writeHead(status, { 'content-type': contentType }).end(body);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, paths, close: () => server.close() };
  }

  it('limits: finds the admin secret in the Secret the admin gateway\'s Deployment reads', async () => {
    await createAdminGateway(ns, ADMIN_SECRET);
    const res = await kubectlGw(['limits', 'mobile', '-n', ns, '--api', 'orders', '--admin-url', sidecar.adminUrl, '--admin-namespace', ns, '-o', 'yaml']);
    expect(res.stderr).toBe('');
    expect(res.stdout).toContain('refused_by: key_global');
  });

  it('limits: a user\'s mistake is one line on stderr and exit 1', async () => {
    const cases: [string[], string][] = [
      [['limits', 'nope', '-n', ns, '--api', 'orders', '--admin-url', sidecar.adminUrl], `error: Key ${ns}/nope not found\n`],
      [['limits', 'mobile', '-n', ns], 'error: limits needs --api API_ID\n'],
      // An empty name would read the list of Keys, one with a / the status subresource.
      [['limits', '', '-n', ns, '--api', 'orders'], 'error: resource name may not be empty\n'],
      [['limits', 'mobile/status', '-n', ns, '--api', 'orders'], 'error: "mobile/status" is not a Key\'s name: lowercase letters, digits, - and ., at most 253\n'],
      // An admin listener's answer in its operations' own shape ({"Message": …}) is read for its message.
      [['limits', 'mobile', '-n', ns, '--api', 'orders', '--admin-url', `${sidecar.adminUrl}/prefix/`], 'error: the admin gateway answered 404: Not found\n'],
      [['limits', 'mobile', '-A', '--api', 'orders'], 'error: a Key cannot be looked up by name across all namespaces: give its namespace with -n\n'],
      [['limits', 'mobile', '-n', ns, '--api', 'orders', '-o', 'xml'], 'error: unable to match a printer suitable for the output format "xml", allowed formats are: json,wide,yaml\n'],
      [['limits', 'mobile', '-n', ns, '--api', 'nope', '--admin-url', sidecar.adminUrl], 'error: the admin gateway answered 404: API not found: no API nope is loaded on this gateway\n'],
      [['limits', 'mobile', '-n', ns, '--api', 'orders', '--context', 'nowhere'], 'error: context "nowhere" does not exist\n'],
      [['limts', 'mobile', '-n', ns], 'error: unknown command "limts" for "kubectl gw": see kubectl gw --help\n'],
      [['limits', 'mobile', '-n', ns, '--api', 'orders', '--admin-url', 'notaurl'], 'error: --admin-url must be an http:// or https:// URL, such as http://127.0.0.1:8081, got "notaurl"\n'],
      [['status', '-n', ns, '--admin-url', 'ftp://127.0.0.1:8081'], 'error: --admin-url must be an http:// or https:// URL, such as http://127.0.0.1:8081, got "ftp://127.0.0.1:8081"\n'],
      // kubectl's (pflag's) wording for a flag it does not read, and arguments it would not.
      [['status', '-n', ns, '--foo'], 'error: unknown flag: --foo\n'],
      [['status', '-Ax'], 'error: unknown shorthand flag: \'x\' in -Ax\n'],
      [['status', '-A=maybe'], 'error: invalid argument "maybe" for "--all-namespaces" flag: it takes true or false\n'],
      [['status', '-n'], 'error: flag needs an argument: \'n\' in -n\n'],
      [['events', '--namespace'], 'error: flag needs an argument: --namespace\n'],
      [['status', 'extra', '-n', ns], 'error: unexpected arguments: extra (kubectl gw status takes none)\n'],
      [['events', 'mobile', '-n', ns], 'error: unexpected arguments: mobile (kubectl gw events takes none)\n'],
      [['--', 'status', '-n', ns], `error: unexpected arguments: -n ${ns} (kubectl gw status takes none)\n`],
    ];
    for (const [args, stderr] of cases) {
      const res = await kubectlGw(args, { GW_ADMIN_SECRET: ADMIN_SECRET });
      expect([args.join(' '), res.code, res.stdout, res.stderr]).toEqual([args.join(' '), 1, '', stderr]);
    }
    // No secret given and no admin gateway to read it from: the line says what is missing, though --admin-url was given.
    const noSecret = await kubectlGw(['limits', 'mobile', '-n', ns, '--api', 'orders', '--admin-url', sidecar.adminUrl, '--admin-namespace', 'default']);
    expect([noSecret.code, noSecret.stderr]).toEqual([1, 'error: no gw admin gateway found (a Deployment labelled app.kubernetes.io/component=admin) to read the admin secret from; give it with GW_ADMIN_SECRET\n']);
    // An API server that cannot be reached: one line saying why, no stack trace.
    const dir = await mkdtemp(join(tmpdir(), 'gw-plugin-kc-'));
    const unreachable = join(dir, 'kubeconfig');
    const closedPort = await freePort();
    await writeFile(unreachable, stringify({ apiVersion: 'v1', kind: 'Config', clusters: [{ name: 'c', cluster: { server: `https://127.0.0.1:${closedPort}` } }], users: [{ name: 'u', user: { token: 't' } }], contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }], 'current-context': 'x' }));
    const res = await kubectlGw(['status', '-n', ns], { KUBECONFIG: unreachable });
    expect([res.code, res.stdout]).toEqual([1, '']);
    expect(res.stderr).toBe(`error: fetch failed: connect ECONNREFUSED 127.0.0.1:${closedPort}\n`);
    // No kubeconfig anywhere: said as such, not as client-node's fallback to http://localhost:8080.
    const none = await kubectlGw(['events', '-n', ns], { KUBECONFIG: '', HOME: dir });
    expect([none.code, none.stdout, none.stderr]).toEqual([1, '', 'error: no kubeconfig: set KUBECONFIG or --kubeconfig, or put one at ~/.kube/config\n']);
    await rm(dir, { recursive: true, force: true });
  });

  /** A kubeconfig of the test bed's API server that signs in as ServiceAccount `name` of ns, holding `rules` there. */
  async function serviceAccountKubeconfig(name: string, rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[]): Promise<string> {
    const core = kc.makeApiClient(CoreV1Api);
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    await core.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name } } });
    if (rules.length > 0) {
      await rbac.createNamespacedRole({ namespace: ns, body: { metadata: { name }, rules } });
      await rbac.createNamespacedRoleBinding({ namespace: ns, body: { metadata: { name }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name }, subjects: [{ kind: 'ServiceAccount', name, namespace: ns }] } });
    }
    const { status } = await core.createNamespacedServiceAccountToken({ namespace: ns, name, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
    const config = JSON.parse(kc.exportConfig()) as { users: unknown[]; contexts: { context: { user: string } }[] };
    config.users = [{ name, user: { token: status!.token } }];
    for (const context of config.contexts) context.context.user = name;
    const file = join(prefix, `${name}.kubeconfig`);
    await writeFile(file, JSON.stringify(config));
    return file;
  }

  it('an API server\'s refusal is one line naming it, as kubectl\'s `Error from server (Forbidden)`', async () => {
    const nobody = await serviceAccountKubeconfig('nobody', []);
    const user = `User "system:serviceaccount:${ns}:nobody"`;
    const refusals: [string[], RegExp][] = [
      [['limits', 'mobile', '-n', ns, '--api', 'orders'], new RegExp(`^error: from the API server \\(Forbidden\\): keys\\.gw\\.dev "mobile" is forbidden: ${user} cannot get resource "keys" in API group "gw\\.dev" in the namespace "${ns}"\n$`)],
      [['status', '-n', ns], new RegExp(`^error: from the API server \\(Forbidden\\): [a-z]+\\.gw\\.dev is forbidden: ${user} cannot list resource "[a-z]+" in API group "gw\\.dev" in the namespace "${ns}"\n$`)],
      [['events', '-n', ns], new RegExp(`^error: from the API server \\(Forbidden\\): events\\.events\\.k8s\\.io is forbidden: ${user} cannot list resource "events" in API group "events\\.k8s\\.io" in the namespace "${ns}"\n$`)],
    ];
    for (const [args, stderr] of refusals) {
      const res = await kubectlGw(args, { KUBECONFIG: nobody, GW_ADMIN_SECRET: ADMIN_SECRET });
      expect([args.join(' '), res.code, res.stdout]).toEqual([args.join(' '), 1, '']);
      expect(res.stderr).toMatch(stderr);
    }
    const badToken = join(prefix, 'bad-token.kubeconfig');
    const config = JSON.parse(kc.exportConfig()) as { users: { user: unknown }[] };
    for (const u of config.users) u.user = { token: 'not-a-token' };
    await writeFile(badToken, JSON.stringify(config));
    const unauthorized = await kubectlGw(['events', '-n', ns], { KUBECONFIG: badToken });
    expect([unauthorized.code, unauthorized.stdout, unauthorized.stderr]).toEqual([1, '', 'error: from the API server (Unauthorized): you must be logged in to the server\n']);
  });

  it('status: the API server\'s proxy refusing the admin gateway is named as the API server\'s refusal', async () => {
    const labels = { 'app.kubernetes.io/part-of': 'gw', 'app.kubernetes.io/component': 'admin' };
    await kc.makeApiClient(CoreV1Api).createNamespacedService({ namespace: ns, body: { metadata: { name: 'gw-admin', labels }, spec: { selector: labels, ports: [{ name: 'http', port: 8081 }] } } });
    // README.md#kubectl-gw's rights but services/proxy.
    const reader = await serviceAccountKubeconfig('reader', [
      { apiGroups: ['gw.dev'], resources: ['apidefinitions', 'policies', 'keys', 'categories', 'portalproducts'], verbs: ['get', 'list'] },
      { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['list'] },
      { apiGroups: ['apps'], resources: ['deployments'], verbs: ['list'] },
      { apiGroups: [''], resources: ['services'], verbs: ['list'] },
      { apiGroups: [''], resources: ['secrets'], verbs: ['get'] },
    ]);
    const res = await kubectlGw(['status', '-n', ns, '--admin-namespace', ns], { KUBECONFIG: reader, GW_ADMIN_SECRET: ADMIN_SECRET });
    expect([res.code, res.stderr]).toEqual([0, '']);
    expect(res.stdout).toMatch(/^KIND\s+NAME/);
    expect(res.stdout).toContain(`\nGateways not read: from the API server (Forbidden): services "http:gw-admin:8081" is forbidden: User "system:serviceaccount:${ns}:reader" cannot get resource "services/proxy" in API group "" in the namespace "${ns}"\n`);
  });

  it('status: every gw resource not Ready, with its reason, and the gateways seen live', async () => {
    await waitFor('the orphan Key reported', async () => ready(await c.get('Key', ns, 'orphan'))?.reason === 'MissingPolicy');
    // A second product of the same id: not Ready, as a Key can be, and shown so.
    await c.create('PortalProduct', ns, { metadata: { name: 'shop' }, spec: { id: 'shop' } });
    await waitFor('the first product Ready', async () => ready(await c.get('PortalProduct', ns, 'shop'))?.status === 'True');
    await c.create('PortalProduct', ns, { metadata: { name: 'shop-copy' }, spec: { id: 'shop' } });
    await waitFor('the copy reported', async () => ready(await c.get('PortalProduct', ns, 'shop-copy'))?.reason === 'DuplicateProductId');
    await waitFor('the DRL gateway serving orders', async () => drlSidecar.runtime.apis().some((api) => api.api_id === 'orders'));
    const args = ['status', '-n', ns, '--admin-url', drlSidecar.adminUrl];
    const res = await kubectlGw([...args, '-o', 'wide', '--kubeconfig', testEnv().kubeconfig], { KUBECONFIG: '/nonexistent', GW_ADMIN_SECRET: ADMIN_SECRET });
    expect(res.stderr).toBe('');
    const [resources, gateways] = res.stdout.trimEnd().split('\n\n');
    const [header, ...rows] = resources!.split('\n');
    expect(header).toMatch(/^KIND\s+NAME\s+READY\s+REASON\s+AGE\s+MESSAGE$/);
    expect(rows).toHaveLength(2);
    expect(rows).toContainEqual(expect.stringMatching(/^Key\s+orphan\s+False\s+MissingPolicy\s+\d+[smhd]\s+apply_policies names no-such-plan, not a Policy in namespace /));
    expect(rows).toContainEqual(expect.stringMatching(new RegExp(`^PortalProduct\\s+shop-copy\\s+False\\s+DuplicateProductId\\s+\\d+[smhd]\\s+product_id "shop" reaches PortalProduct ${ns}/shop,`)));
    expect(gateways!.split('\n')).toEqual(['Gateways seen live (their DRL heartbeats):', expect.stringMatching(/^API\s+LIVE\s+GATEWAYS$/), expect.stringMatching(new RegExp(`^orders\\s+1\\s+${drlInstance}$`))]);

    const json = JSON.parse((await kubectlGw([...args, '-o', 'json'], { GW_ADMIN_SECRET: ADMIN_SECRET })).stdout) as { not_ready: { kind: string; name: string; reason: string }[]; gateways: unknown };
    expect(json.not_ready.map(({ kind, name, reason }) => ({ kind, name, reason }))).toEqual(expect.arrayContaining([{ kind: 'Key', name: 'orphan', reason: 'MissingPolicy' }, { kind: 'PortalProduct', name: 'shop-copy', reason: 'DuplicateProductId' }]));
    expect(json.not_ready).toHaveLength(2);
    expect(json.gateways).toEqual({ heartbeats: true, apis: [{ api_id: 'orders', gateways: [drlInstance] }] });

    // The sliding-log gateway beats for nobody, and says so; a wrong secret still shows the resources.
    const sliding = await kubectlGw(['status', '-n', ns, '--admin-url', sidecar.adminUrl], { GW_ADMIN_SECRET: ADMIN_SECRET });
    expect(sliding.stdout).toContain('\nGateways are not seen: they beat only while the Distributed Rate Limiter is in use');
    const refusedRead = await kubectlGw(['status', '-n', ns, '--admin-url', sidecar.adminUrl], { GW_ADMIN_SECRET: 'wrong' });
    expect(refusedRead.stdout).toMatch(/^KIND\s+NAME/);
    expect(refusedRead.stdout).toContain('\nGateways not read: the admin gateway answered 403: Attempted administrative access with invalid or missing key!\n');
    const empty = await createNamespace('plugin-empty');
    expect((await kubectlGw(['status', '-n', empty, '--admin-url', drlSidecar.adminUrl], { GW_ADMIN_SECRET: ADMIN_SECRET })).stdout).toMatch(new RegExp(`^No gw resources found in namespace ${empty}.\\n\\nGateways seen live`));
  });

  it('events: gw\'s Events, newest first', async () => {
    await waitFor('the MissingPolicy Event', async () => (await kubectlGw(['events', '-n', ns])).stdout.includes('MissingPolicy'));
    const res = await kubectlGw(['events', '-n', ns, '-o', 'wide']);
    const [header, ...rows] = res.stdout.trimEnd().split('\n');
    expect(header).toMatch(/^LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+COUNT\s+REPORTER\s+MESSAGE$/);
    expect(rows.some((row) => /Warning\s+MissingPolicy\s+Key\/orphan\s+\d+\s+gw\.dev\/operator\s+apply_policies names no-such-plan/.test(row))).toBe(true);
    // As kubectl prints a list: a v1 List of items that say their kind, less managedFields.
    const list = JSON.parse((await kubectlGw(['events', '-n', ns, '-o', 'json'])).stdout) as {
      apiVersion: string;
      kind: string;
      items: { apiVersion: string; kind: string; metadata: Record<string, unknown>; reportingController: string; eventTime?: string; series?: { lastObservedTime: string } }[];
    };
    expect([list.apiVersion, list.kind]).toEqual(['v1', 'List']);
    const listed = list.items;
    expect(listed.length).toBeGreaterThan(0);
    expect(listed.every((e) => e.apiVersion === 'events.k8s.io/v1' && e.kind === 'Event' && !('managedFields' in e.metadata))).toBe(true);
    expect((await kubectlGw(['events', '-n', ns, '-o', 'yaml'])).stdout).toMatch(/^apiVersion: v1\nkind: List\nitems:\n {2}- apiVersion: events\.k8s\.io\/v1\n {4}kind: Event\n/);
    expect(listed.every((e) => e.reportingController.startsWith('gw.dev/'))).toBe(true);
    const times = listed.map((e) => new Date(e.series?.lastObservedTime ?? e.eventTime ?? 0).getTime());
    expect(times).toEqual([...times].sort((a, b) => b - a));
  });

  it('reads kubectl\'s flag forms: -n=NS, -nNS, --namespace=NS, -o=FORMAT, -oFORMAT, -A=BOOL, --all-namespaces=BOOL', async () => {
    for (const form of [[`-n=${ns}`, '-o=json'], [`--namespace=${ns}`, '-ojson'], [`-n${ns}`, '--output=json', '-A=false'], ['-A', `-n=${ns}`, '--all-namespaces=false', '-o', 'json']]) {
      const res = await kubectlGw(['limits', 'mobile', '--api', 'orders', `--admin-url=${sidecar.adminUrl}`, ...form], { GW_ADMIN_SECRET: ADMIN_SECRET });
      expect([form.join(' '), res.stderr, res.code]).toEqual([form.join(' '), '', 0]);
      expect(keyLimitsAnswerSchema.parse(JSON.parse(res.stdout)).refused_by).toBe('key_global');
    }
    expect((await kubectlGw(['events', '-A=true'])).stdout).toMatch(/^NAMESPACE\s+LAST SEEN\s/);
    expect((await kubectlGw(['events', '-A', '--all-namespaces=false', '-n', ns])).stdout).toMatch(/^LAST SEEN\s/);
  });

  it('reads every KUBECONFIG file that exists as kubectl merges them, and -n "" as the context\'s namespace', async () => {
    const config = JSON.parse(kc.exportConfig()) as { contexts: { name: string; context: { cluster: string; user: string; namespace?: string } }[] };
    const inNs = { name: 'in-ns', context: { ...config.contexts[0]!.context, namespace: ns } };
    // The first file to set a current context wins; the clusters and users come from a later file.
    const contextOnly = join(prefix, 'context-only.kubeconfig');
    await writeFile(contextOnly, stringify({ apiVersion: 'v1', kind: 'Config', contexts: [inNs], 'current-context': 'in-ns' }));
    const complete = join(prefix, 'in-ns.kubeconfig');
    await writeFile(complete, JSON.stringify({ ...config, contexts: [inNs], 'current-context': 'in-ns' }));
    // Not Ready (no operator watches its namespace), and not to be shown: it is of another namespace.
    await c.create('Key', await createNamespace('plugin-other'), { metadata: { name: 'elsewhere' }, spec: { apply_policies: ['plan'] } });
    const status = ['status', '--admin-url', drlSidecar.adminUrl];
    for (const [args, env] of [
      [status, { KUBECONFIG: [join(prefix, 'missing.kubeconfig'), contextOnly, testEnv().kubeconfig].join(':') }],
      [[...status, '-n', '', '--kubeconfig', complete], {}],
    ] as const) {
      const res = await kubectlGw([...args], { ...env, GW_ADMIN_SECRET: ADMIN_SECRET });
      expect([args.join(' '), res.stderr, res.code]).toEqual([args.join(' '), '', 0]);
      const [header, ...rows] = res.stdout.split('\n\n')[0]!.split('\n');
      expect(header).toMatch(/^KIND\s+NAME\s+READY\s+REASON\s+AGE$/);
      expect(rows.map((row) => row.split(/\s+/).slice(0, 2).join('/')).sort()).toEqual(['Key/orphan', 'PortalProduct/shop-copy']);
    }
  });

  it('stops quietly when its reader closes the pipe early', async () => {
    const res = await runTool('bash', ['-c', 'set -o pipefail; kubectl gw events -A -o yaml | true'], { timeoutMs: 30_000, allowFail: true, env: pluginEnv() });
    expect([res.code, res.stdout, res.stderr]).toEqual([0, '', '']);
  });

  it('keeps a message of several lines to one line: a table row, an error, a gateway\'s HTML error page; asks under --admin-url\'s path', async () => {
    // A core/v1 Event, as older reporters write them, about a gw resource.
    const now = new Date();
    await kc.makeApiClient(CoreV1Api).createNamespacedEvent({
      namespace: ns,
      body: { metadata: { name: 'multiline' }, involvedObject: { apiVersion: 'gw.dev/v1alpha1', kind: 'Key', name: 'mobile', namespace: ns }, reason: 'Multiline', type: 'Normal', message: 'first line\nsecond line', count: 5, source: { component: 'gw.dev/legacy' }, firstTimestamp: now, lastTimestamp: now },
    });
    const listed = await kubectlGw(['events', '-n', ns]);
    expect(listed.stdout.split('\n')).toContainEqual(expect.stringMatching(/^\d+s\s+Normal\s+Multiline\s+Key\/mobile\s+first line\.\.\.$/));
    expect(listed.stdout).not.toContain('second line');
    // Its count and reporter, which the events.k8s.io API shows as deprecatedCount and deprecatedSource.
    expect((await kubectlGw(['events', '-n', ns, '-o', 'wide'])).stdout.split('\n')).toContainEqual(expect.stringMatching(/^\d+s\s+Normal\s+Multiline\s+Key\/mobile\s+5\s+gw\.dev\/legacy\s+first line\.\.\.$/));

    const page = '<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad Gateway</h1></center>\n</body>\n</html>\n';
    const proxy = await startFakeAdmin(502, 'text/html', page);
    // As an Ingress would serve the admin gateway, under a path of its own.
    const adminUrl = `${proxy.url}/gw-admin/`;
    try {
      const limits = await kubectlGw(['limits', 'mobile', '-n', ns, '--api', 'orders', '--admin-url', adminUrl], { GW_ADMIN_SECRET: ADMIN_SECRET });
      expect([limits.code, limits.stdout, limits.stderr]).toEqual([1, '', 'error: the admin gateway answered 502: 502 Bad Gateway\n']);
      const status = await kubectlGw(['status', '-n', ns, '--admin-url', adminUrl], { GW_ADMIN_SECRET: ADMIN_SECRET });
      expect(status.stdout).toMatch(/\n\nGateways not read: the admin gateway answered 502: 502 Bad Gateway\n$/);
    } finally {
      proxy.close();
    }
    expect(proxy.paths).toEqual([expect.stringMatching(/^\/gw-admin\/gw\/keys\/[^/]+\/limits\?api_id=orders$/), '/gw-admin/gw/gateways']);
  });

  it('names what is wrong in one line: several admin gateways, a secret with a newline, a Key with no hash, an answer of another shape', async () => {
    // Two admin gateways, one of whose Secret ends with a newline, as one written from a file does.
    const other = await createNamespace('plugin-admin');
    await createAdminGateway(other, `${ADMIN_SECRET}\n`);
    await createAdminGateway(await createNamespace('plugin-admin'), ADMIN_SECRET);
    await c.create('Key', other, { metadata: { name: 'unhashed' }, spec: { apply_policies: ['plan'] } });
    const limits = ['limits', 'mobile', '-n', ns, '--api', 'orders', '--admin-url', sidecar.adminUrl];
    const several = await kubectlGw(limits);
    expect([several.code, several.stdout]).toEqual([1, '']);
    expect(several.stderr).toMatch(/^error: \d+ gw admin gateways \(Deployments\) found; choose one with --admin-namespace\n$/);
    const newline = await kubectlGw([...limits, '--admin-namespace', other]);
    expect([newline.code, newline.stdout, newline.stderr]).toEqual([1, '', 'error: the admin secret (GW_ADMIN_SECRET, else the admin gateway\'s Secret) holds a newline, often a trailing one from a file: no request can carry it; set it without\n']);
    // No operator watches that namespace: the Key has no hash, and the hint names its namespace.
    const unhashed = await kubectlGw(['limits', 'unhashed', '-n', other, '--api', 'orders'], { GW_ADMIN_SECRET: ADMIN_SECRET });
    expect([unhashed.code, unhashed.stdout, unhashed.stderr]).toEqual([1, '', `error: Key ${other}/unhashed has no hash yet: the operator has not reconciled it (kubectl get gwkey unhashed -n ${other})\n`]);
    // A gateway of another version, as far as its answer tells.
    const fake = await startFakeAdmin(200, 'application/json', '{"heartbeats": "yes"}');
    try {
      const shape = await kubectlGw(['limits', 'mobile', '-n', ns, '--api', 'orders', '--admin-url', fake.url], { GW_ADMIN_SECRET: ADMIN_SECRET });
      expect([shape.code, shape.stdout]).toEqual([1, '']);
      expect(shape.stderr).toMatch(/^error: the admin gateway's answer to \/gw\/keys\/[0-9a-f]{64}\/limits is not one this plugin reads \(a gateway of another gw version\?\): key_hash: [^\n]+\n$/);
      const status = await kubectlGw(['status', '-n', ns, '--admin-url', fake.url], { GW_ADMIN_SECRET: ADMIN_SECRET });
      expect(status.stdout).toMatch(/\n\nGateways not read: the admin gateway's answer to \/gw\/gateways is not one this plugin reads \(a gateway of another gw version\?\): heartbeats: [^\n]+\n$/);
    } finally {
      fake.close();
    }
  });
});
