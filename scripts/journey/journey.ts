/**
 * The user's journey on a real cluster, the same steps on every kind of cluster:
 *   node scripts/journey/journey.ts [--hostpath-pv DIR] [--skip-uninstall]
 * kubectl and helm on PATH, KUBECONFIG naming the cluster, and the images already on its
 * nodes (scripts/e2e-kind.sh builds and loads them for kind; the node test bed imports the
 * archives of `npm run images`). Installs the chart exactly as README.md's "Install with
 * Helm" says, then checks what a user relies on: injected pods under the `restricted` Pod
 * Security Standard, 200 then 429 with X-RateLimit-* headers through a Service, counters
 * shared through Redis, keys from the admin Service, smoothing Events, category reads with
 * ServiceAccount tokens, delete until reload, leader failover, a sidecar restart, helm
 * upgrade and uninstall. Exits non-zero at the first step that fails.
 */
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { check, ClientPod, eventually, JourneyError, kubectl, kubectlJson, run, statuses, type HttpAnswer } from './cluster.ts';
import { demoApp, demoService } from './manifests.ts';
import { readmeBlock } from './readme-blocks.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const RELEASE_NS = 'gw-system';
const APP_NS = 'demo';
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const SIDECAR_IMAGE = `gw-sidecar:${VERSION}`;
const ADMIN = `http://gw-admin.${RELEASE_NS}.svc:8081`;
const DEMO = `http://demo.${APP_NS}.svc`;

const { values: options } = parseArgs({
  options: {
    'hostpath-pv': { type: 'string' },
    'skip-uninstall': { type: 'boolean', default: false },
  },
});

interface PodList {
  items: Array<{
    metadata: { name: string; annotations?: Record<string, string> };
    spec: { initContainers?: Array<{ name: string; restartPolicy?: string; imagePullPolicy?: string }> };
    status: { podIP?: string; initContainerStatuses?: Array<{ name: string; ready: boolean; started?: boolean; restartCount: number }> };
  }>;
}

const timings: Array<[string, number]> = [];

async function step(name: string, body: () => Promise<void>): Promise<void> {
  const started = Date.now();
  process.stdout.write(`==> ${name}\n`);
  await body();
  const seconds = (Date.now() - started) / 1000;
  timings.push([name, seconds]);
  process.stdout.write(`    ok (${seconds.toFixed(1)} s)\n`);
}

async function shell(script: string): Promise<void> {
  const r = await run('bash', ['-euo', 'pipefail', '-c', script], { cwd: ROOT, timeoutMs: 600_000, allowFail: true });
  if (r.stdout.trim()) process.stdout.write(`${r.stdout.trimEnd().replace(/^/gm, '    | ')}\n`);
  if (r.code !== 0) throw new JourneyError(`README block failed (${r.code}):\n${script}\n${r.stderr}`);
}

async function secretValue(name: string, key: string): Promise<string> {
  const b64 = await kubectl(['-n', RELEASE_NS, 'get', 'secret', name, '-o', `jsonpath={.data.${key}}`]);
  return Buffer.from(b64, 'base64').toString('utf8');
}

async function demoPods(): Promise<PodList['items']> {
  return (await kubectlJson<PodList>(['-n', APP_NS, 'get', 'pods', '-l', 'app=demo', '--field-selector=status.phase=Running'])).items;
}

function header(answer: HttpAnswer, name: string): string | undefined {
  return answer.headers[name.toLowerCase()];
}

/** Waits until a new sliding window starts for limits of `per` seconds. */
async function freshWindow(perSeconds: number): Promise<void> {
  await sleep(perSeconds * 1000 + 500);
}

const DEMO_APP = demoApp(APP_NS, SIDECAR_IMAGE, 'keyless-api,auth-token-api,journey-api');
const DEMO_SERVICE = demoService(APP_NS);

interface Journey {
  client: ClientPod;
  adminSecret: string;
  pods: PodList['items'];
  journeyKey: string;
}

async function main(): Promise<void> {
  const j: Journey = { client: new ClientPod(APP_NS), adminSecret: '', pods: [], journeyKey: '' };
  const hostpath = options['hostpath-pv'];
  if (hostpath) await step('a PersistentVolume for the Redis StatefulSet', () => hostpathVolume(hostpath));
  await step("install as README.md's \"Install with Helm\" says", () => install(j));
  await step('an annotated Deployment gets the gateway as a native sidecar under the restricted Pod Security Standard', () => injectedApp(j));
  await step("200, then 429 with X-RateLimit-* headers, through the app's Service", () => limitedThroughService(j));
  await step('two replicas share their counters through Redis', () => sharedCounters(j));
  await step('a key created through the gw-admin Service shows in kubectl and works at once on every pod', () => adminKey(j));
  await step('kubectl gw explains that key\'s limits through the API server, shows status and lists gw\'s Events', () => pluginReads(j));
  await step('a burst on a smoothed key shows RateLimitSmoothingUp, then RateLimitSmoothingDown, in kubectl get events', () => smoothingEvents(j));
  await step('category reads with a real ServiceAccount token, through TokenReview and SubjectAccessReview', () => categoryReads(j));
  await step('restart a sidecar container: the pod recovers and the counters survive', () => sidecarRestart(j));
  await step('delete an API through the admin Service: served until reload, gone after', () => deleteUntilReload(j));
  await step('kill the leader operator pod: the other replica takes over and reconciles a new ApiDefinition', () => leaderFailover(j));
  await step('helm upgrade keeps the generated secrets', () => upgradeKeepsSecrets(j));
  await step('with the Distributed Rate Limiter, the two replicas split an API limit between them', () => drlSplit(j));
  if (!options['skip-uninstall']) {
    await step('helm uninstall leaves nothing but the CRDs', () => uninstall(j));
    await step('install with Redis persistence switched off, then uninstall', withoutPersistence);
  }
  process.stdout.write('\njourney passed\n');
  for (const [name, seconds] of timings) process.stdout.write(`${seconds.toFixed(1).padStart(6)} s  ${name}\n`);
}

async function hostpathVolume(dir: string): Promise<void> {
  await kubectl(['apply', '-f', '-'], { input: JSON.stringify({
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name: 'journey-redis' },
    spec: { capacity: { storage: '1Gi' }, accessModes: ['ReadWriteOnce'], persistentVolumeReclaimPolicy: 'Delete', hostPath: { path: dir, type: 'DirectoryOrCreate' } },
  }) });
}

async function install(j: Journey): Promise<void> {
  await shell(readmeBlock('install'));
  const sts = await kubectlJson<{ status: { readyReplicas?: number } }>(['-n', RELEASE_NS, 'get', 'statefulset', 'gw-redis']);
  check(sts.status.readyReplicas === 1, 'the Redis StatefulSet is not ready');
  const pvc = await kubectlJson<{ items: Array<{ status: { phase: string } }> }>(['-n', RELEASE_NS, 'get', 'pvc']);
  check(pvc.items.length === 1 && pvc.items[0]?.status.phase === 'Bound', 'Redis has no Bound PersistentVolumeClaim');
  await kubectl(['get', 'mutatingwebhookconfiguration', 'gw-sidecar-injector']);
  await eventually('the examples Ready', 90_000, async () => {
    const r = await kubectl(['-n', APP_NS, 'wait', '--for=condition=Ready', 'apidefinition/keyless-api', 'apidefinition/auth-token-api', '--timeout=5s'], { allowFail: true });
    return r.includes('condition met') ? true : undefined;
  });
  j.adminSecret = await secretValue('gw-auth', 'admin-secret');
}

async function injectedApp(j: Journey): Promise<void> {
  const ns = await kubectlJson<{ metadata: { labels: Record<string, string> } }>(['get', 'namespace', APP_NS]);
  check(ns.metadata.labels['pod-security.kubernetes.io/enforce'] === 'restricted', `namespace ${APP_NS} does not enforce restricted`);
  const rejected = await run('kubectl', ['-n', APP_NS, 'run', 'not-restricted', `--image=${SIDECAR_IMAGE}`, '--restart=Never', '--', 'node', '-v'], { allowFail: true });
  check(rejected.code !== 0 && rejected.stderr.includes('violates PodSecurity "restricted'),
    `a pod violating the restricted standard was not refused: ${rejected.stdout}${rejected.stderr}`);
  await kubectl(['apply', '-f', '-'], { input: [DEMO_APP, DEMO_SERVICE].map((o) => JSON.stringify(o)).join('\n') });
  await kubectl(['-n', APP_NS, 'rollout', 'status', 'deployment/demo', '--timeout=180s'], { timeoutMs: 190_000 });
  j.pods = await demoPods();
  check(j.pods.length === 2, `expected 2 running demo pods, found ${j.pods.length}`);
  // The injected sidecar follows the chart's pull policy, as the operator's own container does.
  const operator = await kubectlJson<{ spec: { template: { spec: { containers: Array<{ imagePullPolicy: string }> } } } }>(
    ['-n', RELEASE_NS, 'get', 'deployment', 'gw-operator']);
  const pullPolicy = operator.spec.template.spec.containers[0]?.imagePullPolicy;
  for (const pod of j.pods) {
    const sidecar = pod.spec.initContainers?.find((c) => c.name === 'gw-sidecar');
    check(sidecar?.restartPolicy === 'Always', `${pod.metadata.name} has no native gw-sidecar`);
    check(sidecar.imagePullPolicy === pullPolicy, `${pod.metadata.name}: gw-sidecar pulls ${sidecar.imagePullPolicy}, the chart says ${pullPolicy}`);
    const status = pod.status.initContainerStatuses?.find((c) => c.name === 'gw-sidecar');
    check(status?.ready === true && status.started === true, `${pod.metadata.name}: gw-sidecar is not started and ready`);
  }
  await j.client.start(SIDECAR_IMAGE);
}

async function limitedThroughService(j: Journey): Promise<void> {
  // A first request warms each new gateway (its Redis script and connections), as the first
  // traffic after a rollout does; then a fresh window.
  for (const pod of j.pods) await j.client.one({ url: `http://${pod.status.podIP}:8080/keyless/warm-up` });
  await freshWindow(10);
  const answers = await j.client.send({ url: `${DEMO}/keyless/get`, count: 6 });
  check(statuses(answers) === '200 200 200 200 200 429', `keyless-api (5 per 10 s) answered ${statuses(answers)}`);
  const refused = answers[5] as HttpAnswer;
  check(header(refused, 'X-RateLimit-Limit') === '5', `429 carries X-RateLimit-Limit ${header(refused, 'X-RateLimit-Limit')}`);
  check(header(refused, 'X-RateLimit-Remaining') === '0', `429 carries X-RateLimit-Remaining ${header(refused, 'X-RateLimit-Remaining')}`);
  check(/^\d+$/.test(header(refused, 'X-RateLimit-Reset') ?? ''), '429 without X-RateLimit-Reset');
  check(JSON.parse((answers[0] as HttpAnswer).body).path === '/get', `the upstream saw ${(answers[0] as HttpAnswer).body}`);
}

async function sharedCounters(j: Journey): Promise<void> {
  await freshWindow(10);
  const [a, b] = j.pods.map((p) => `http://${p.status.podIP}:8080/keyless/get`) as [string, string];
  const first = await j.client.send({ url: a, count: 3 });
  const second = await j.client.send({ url: b, count: 3 });
  check(`${statuses(first)} ${statuses(second)}` === '200 200 200 200 200 429',
    `3 requests to each pod answered ${statuses(first)} / ${statuses(second)}: the pods do not share the API's counter`);
}

async function createKey(j: Journey, key: Record<string, unknown>): Promise<string> {
  const created = await j.client.one({
    url: `${ADMIN}/admin/org/keys`, method: 'POST', headers: { 'Admin-Auth': j.adminSecret, 'Content-Type': 'application/json' },
    body: JSON.stringify(key),
  });
  check(created.status === 200, `create key answered ${created.status}: ${created.body}`);
  return (JSON.parse(created.body) as { key_id: string }).key_id;
}

async function adminKey(j: Journey): Promise<void> {
  j.journeyKey = await createKey(j, { alias: 'journey', apply_policies: ['smoothed'] });
  const aliases = await kubectl(['-n', APP_NS, 'get', 'gwkey', '-o', 'jsonpath={.items[*].spec.alias}']);
  check(aliases.split(' ').includes('journey'), `kubectl get gwkey shows ${aliases}`);
  check(!(await kubectl(['-n', APP_NS, 'get', 'gwkey', '-o', 'json'])).includes(j.journeyKey), 'the raw key is stored in a Key resource');
  for (const pod of j.pods) {
    const answer = await j.client.one({ url: `http://${pod.status.podIP}:8080/auth/anything/at-once`, headers: { Authorization: j.journeyKey } });
    check(answer.status === 200, `${pod.metadata.name} answered ${answer.status} for the new key: ${answer.body}`);
  }
}

/** README.md#kubectl-gw: the plugin reaches the gw-admin Service through the API server, with the Secret's admin secret. */
async function pluginReads(j: Journey): Promise<void> {
  const name = (await kubectl(['-n', APP_NS, 'get', 'gwkey', '-o', "jsonpath={.items[?(@.spec.alias=='journey')].metadata.name}"])).trim();
  check(name !== '', 'no Key with the alias journey');
  const env = { ...process.env, PATH: `${join(ROOT, 'plugin')}:${process.env.PATH ?? ''}`, GW_ADMIN_SECRET: '' };
  const gw = async (args: string[]): Promise<string> => (await run('kubectl', ['gw', ...args], { env })).stdout;
  const limits = ['limits', name, '-n', APP_NS, '--api', 'auth-token-api', '--path', '/auth/anything/at-once'];
  const answer = JSON.parse(await gw([...limits, '-o', 'json'])) as { key_hash: string; access: string; outcome: string; limits: { level: string }[] };
  check(answer.access === 'granted' && answer.outcome === 'allowed' && answer.limits.length > 0, `kubectl gw limits answered ${JSON.stringify(answer)}`);
  check(!JSON.stringify(answer).includes(j.journeyKey), 'kubectl gw limits shows the raw key');
  const table = await gw(limits);
  check(table.startsWith(`Key ${APP_NS}/${name} on API auth-token-api, GET /auth/anything/at-once: a request now is allowed`) && /^LEVEL\s+SOURCE/m.test(table), `kubectl gw limits printed ${table}`);
  const status = await gw(['status', '-A']);
  check(/^Gateways (seen live|are not seen)/m.test(status), `kubectl gw status did not read the live gateways:\n${status}`);
  const events = await gw(['events', '-n', APP_NS]);
  check(/Normal\s+ConfigWritten\s+ApiDefinition\//.test(events), `kubectl gw events printed ${events}`);
}

async function smoothingEvents(j: Journey): Promise<void> {
  const events = async (reason: string): Promise<string | undefined> => {
    const out = await kubectl(['-n', APP_NS, 'get', 'events', '--field-selector', `reason=${reason}`, '-o', 'name']);
    return out.trim() ? out : undefined;
  };
  await eventually('RateLimitSmoothingUp', 90_000, async () => {
    await j.client.send({ url: `${DEMO}/auth/anything/burst`, headers: { Authorization: j.journeyKey }, count: 30, parallel: true });
    return events('RateLimitSmoothingUp');
  });
  await eventually('RateLimitSmoothingDown', 120_000, async () => {
    await j.client.send({ url: `${DEMO}/auth/anything/calm`, headers: { Authorization: j.journeyKey } });
    return events('RateLimitSmoothingDown');
  });
}

async function categoryReads(j: Journey): Promise<void> {
  await kubectl(['apply', '-f', '-'], { input: [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'reader', namespace: APP_NS } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'nobody', namespace: APP_NS } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: 'api-reader', namespace: APP_NS },
      rules: [{ apiGroups: ['gw.dev'], resources: ['apidefinitions', 'categories'], verbs: ['get', 'list'] }],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: 'api-reader', namespace: APP_NS },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'api-reader' },
      subjects: [{ kind: 'ServiceAccount', name: 'reader', namespace: APP_NS }],
    },
  ].map((o) => JSON.stringify(o)).join('\n') });
  const token = (await kubectl(['-n', APP_NS, 'create', 'token', 'reader'])).trim();
  const allowed = await j.client.one({ url: `${ADMIN}/api/apis/categories`, headers: { Authorization: `Bearer ${token}` } });
  check(allowed.status === 200, `category list answered ${allowed.status}: ${allowed.body}`);
  const names = (JSON.parse(allowed.body) as { categories: Array<{ name: string }> }).categories.map((c) => c.name);
  check(names.length > 0, `category list is empty: ${allowed.body}`);
  const nobody = (await kubectl(['-n', APP_NS, 'create', 'token', 'nobody'])).trim();
  const denied = await j.client.one({ url: `${ADMIN}/api/apis/categories`, headers: { Authorization: `Bearer ${nobody}` } });
  check(denied.status === 403, `a token without the permission got ${denied.status}: ${denied.body}`);
  const forged = await j.client.one({ url: `${ADMIN}/api/apis/categories`, headers: { Authorization: 'Bearer not-a-token' } });
  check(forged.status === 401 || forged.status === 403, `a forged token got ${forged.status}`);
}

async function sidecarRestartCount(pod: string): Promise<{ restarts: number; ready: boolean }> {
  const p = await kubectlJson<PodList['items'][number]>(['-n', APP_NS, 'get', 'pod', pod]);
  const s = p.status.initContainerStatuses?.find((c) => c.name === 'gw-sidecar');
  return { restarts: s?.restartCount ?? 0, ready: s?.ready === true };
}

async function sidecarRestart(j: Journey): Promise<void> {
  const key = await createKey(j, { alias: 'restart', rate: 3, per: 60, access_rights: { 'auth-token-api': { api_id: 'auth-token-api' } } });
  const pod = j.pods[0] as PodList['items'][number];
  const url = `http://${pod.status.podIP}:8080/auth/anything/restart`;
  const before = await j.client.send({ url, headers: { Authorization: key }, count: 2 });
  check(statuses(before) === '200 200', `before the restart: ${statuses(before)}`);
  const { restarts } = await sidecarRestartCount(pod.metadata.name);
  await kubectl(['-n', APP_NS, 'exec', pod.metadata.name, '-c', 'gw-sidecar', '--', 'node', '-e', "process.kill(1, 'SIGTERM')"], { allowFail: true });
  await eventually('the sidecar restarted and ready', 90_000, async () => {
    const now = await sidecarRestartCount(pod.metadata.name);
    return now.restarts > restarts && now.ready ? true : undefined;
  });
  const after = await j.client.send({ url, headers: { Authorization: key }, count: 2 });
  check(statuses(after) === '200 429', `after the restart: ${statuses(after)} (the key's 3 per 60 s was not kept)`);
}

async function deleteUntilReload(j: Journey): Promise<void> {
  const deleted = await j.client.one({ url: `${ADMIN}/gw/apis/keyless-api`, method: 'DELETE', headers: { 'X-GW-Authorization': j.adminSecret } });
  check(deleted.status === 200, `delete answered ${deleted.status}: ${deleted.body}`);
  const gone = await kubectl(['-n', APP_NS, 'get', 'apidefinition', 'keyless-api'], { allowFail: true });
  check(gone === '', 'the ApiDefinition still exists after the delete');
  await sleep(3_000);
  for (const pod of j.pods) {
    const answer = await j.client.one({ url: `http://${pod.status.podIP}:8080/keyless/get` });
    check(answer.status !== 404, `${pod.metadata.name} stopped serving keyless-api before the reload`);
  }
  const reload = await j.client.one({ url: `${ADMIN}/gw/reload`, headers: { 'X-GW-Authorization': j.adminSecret } });
  check(reload.status === 200, `reload answered ${reload.status}: ${reload.body}`);
  for (const pod of j.pods) {
    await eventually(`${pod.metadata.name} unloads keyless-api`, 60_000, async () =>
      (await j.client.one({ url: `http://${pod.status.podIP}:8080/keyless/get` })).status === 404 ? true : undefined);
  }
}

async function leaseHolder(): Promise<string | undefined> {
  const leases = await kubectlJson<{ items: Array<{ spec: { holderIdentity?: string } }> }>(['-n', RELEASE_NS, 'get', 'lease']);
  return leases.items.map((l) => l.spec.holderIdentity).find((h) => h);
}

async function leaderFailover(j: Journey): Promise<void> {
  const leader = await eventually('a leader', 30_000, leaseHolder);
  const operators = await kubectlJson<{ items: Array<{ metadata: { name: string } }> }>(['-n', RELEASE_NS, 'get', 'pods', '-l', 'app.kubernetes.io/component=operator']);
  check(operators.items.length === 2, `expected 2 operator replicas, found ${operators.items.length}`);
  const leaderPod = operators.items.find((p) => leader.startsWith(p.metadata.name));
  check(leaderPod !== undefined, `the Lease holder ${leader} is none of the operator pods`);
  await kubectl(['-n', RELEASE_NS, 'delete', 'pod', leaderPod.metadata.name, '--grace-period=0', '--force'], { allowFail: true });
  await kubectl(['apply', '-f', '-'], { input: JSON.stringify({
    apiVersion: 'gw.dev/v1alpha1', kind: 'ApiDefinition', metadata: { name: 'journey-api', namespace: APP_NS },
    spec: {
      api_id: 'journey-api', name: 'Journey', use_keyless: true,
      proxy: { listen_path: '/journey/', target_url: 'http://127.0.0.1:9000', strip_listen_path: true },
      global_rate_limit: { rate: DRL_RATE, per: 60 },
    },
  }) });
  await eventually('journey-api Ready after the failover', 90_000, async () => {
    const r = await kubectl(['-n', APP_NS, 'wait', '--for=condition=Ready', 'apidefinition/journey-api', '--timeout=5s'], { allowFail: true });
    return r.includes('condition met') ? true : undefined;
  });
  const newLeader = await eventually('a new leader', 30_000, leaseHolder);
  check(!newLeader.startsWith(leaderPod.metadata.name), `the deleted pod ${leaderPod.metadata.name} still holds the Lease`);
  for (const pod of j.pods) {
    await eventually(`${pod.metadata.name} serves journey-api`, 60_000, async () =>
      (await j.client.one({ url: `http://${pod.status.podIP}:8080/journey/hello` })).status === 200 ? true : undefined);
  }
}

const DRL_RATE = 10;

/**
 * With the Distributed Rate Limiter each gateway enforces its share, rate / live gateways,
 * on its own: 10 per 60 s over two replicas is 5 at each pod, whichever pod is asked first.
 */
async function drlSplit(j: Journey): Promise<void> {
  await run('helm', ['upgrade', 'gw', join(ROOT, 'charts', 'gw'), '-n', RELEASE_NS, '--reset-then-reuse-values', '--wait', '--timeout', '5m',
    '--set', 'gateway.settings.enable_redis_rolling_limiter=false'], { timeoutMs: 320_000 });
  await eventually('the compiled config carries the DRL setting', 120_000, async () => {
    const cm = await kubectl(['-n', APP_NS, 'get', 'configmap', '-l', 'gw.dev/api-id', '-o', 'json'], { allowFail: true });
    return cm.includes('journey-api') && !/enable_redis_rolling_limiter\\?"\s*:\s*true/.test(cm) ? true : undefined;
  });
  // The sidecars watch their ConfigMaps: give them a moment, then a fresh minute.
  await sleep(5_000);
  for (const pod of j.pods) {
    const answers = await j.client.send({ url: `http://${pod.status.podIP}:8080/journey/drl`, count: 7 });
    check(statuses(answers) === '200 200 200 200 200 429 429',
      `${pod.metadata.name} answered ${statuses(answers)} for 7 requests; its DRL share of ${DRL_RATE} per 60 s over 2 gateways is 5`);
  }
}

async function chartSecrets(): Promise<string> {
  const list = await kubectlJson<{ items: Array<{ metadata: { name: string }; type: string; data?: Record<string, string> }> }>(
    ['-n', RELEASE_NS, 'get', 'secret', '-l', 'app.kubernetes.io/managed-by=Helm']);
  return JSON.stringify(list.items.filter((s) => s.type !== 'helm.sh/release.v1').map((s) => [s.metadata.name, s.data]));
}

async function upgradeKeepsSecrets(j: Journey): Promise<void> {
  const before = await chartSecrets();
  check(before.includes('admin-secret'), 'no chart-managed Secret holds the admin secret');
  await shell(readmeBlock('upgrade'));
  check((await chartSecrets()) === before, 'helm upgrade changed a generated secret');
  const answer = await j.client.one({ url: `${ADMIN}/gw/reload`, headers: { 'X-GW-Authorization': j.adminSecret } });
  check(answer.status === 200, `the admin secret no longer works after the upgrade: ${answer.status}`);
}

async function uninstall(j: Journey): Promise<void> {
  await kubectl(['-n', APP_NS, 'delete', 'deployment/demo', 'service/demo', `pod/${j.client.name}`, '--wait=true', '--timeout=60s'], { allowFail: true, timeoutMs: 70_000 });
  await shell(readmeBlock('uninstall'));
  // Pods and what the garbage collector removes go a few seconds after helm returns.
  let left: string[] = [];
  await eventually(`nothing left in ${RELEASE_NS}`, 90_000, async () => {
    const out = await kubectl(['get', 'all,secret,configmap,serviceaccount,role,rolebinding,pvc,lease', '-n', RELEASE_NS, '-o', 'name']);
    left = out.split('\n').filter((n) => n && !/kube-root-ca\.crt|serviceaccount\/default$/.test(n));
    return left.length === 0 ? true : undefined;
  }).catch(() => {
    throw new JourneyError(`left in ${RELEASE_NS} after uninstall: ${left.join(', ')}`);
  });
  const cluster = await kubectl(['get', 'clusterrole,clusterrolebinding,mutatingwebhookconfiguration', '-o', 'name']);
  const ours = cluster.split('\n').filter((n) => /gw/.test(n) && !n.includes('system:'));
  check(ours.length === 0, `cluster objects left: ${ours.join(', ')}`);
  const crds = await kubectl(['get', 'crd', '-o', 'name']);
  check(crds.includes('apidefinitions.gw.dev'), 'helm uninstall removed the CRDs');
}

async function withoutPersistence(): Promise<void> {
  await run('helm', ['install', 'gw', join(ROOT, 'charts', 'gw'), '-n', RELEASE_NS, '--wait', '--timeout', '5m',
    '--set', 'redis.persistence.enabled=false', '--set', 'admin.enabled=false'], { timeoutMs: 320_000 });
  const sts = await kubectlJson<{ spec: { volumeClaimTemplates?: unknown[] }; status: { readyReplicas?: number } }>(['-n', RELEASE_NS, 'get', 'statefulset', 'gw-redis']);
  check(sts.status.readyReplicas === 1 && !sts.spec.volumeClaimTemplates, 'Redis without persistence is not ready, or still claims a volume');
  await run('helm', ['uninstall', 'gw', '-n', RELEASE_NS, '--wait'], { timeoutMs: 320_000 });
}

try {
  await main();
} catch (err) {
  process.stderr.write(`\nJOURNEY FAILED: ${(err as Error).message}\n`);
  for (const args of [
    ['get', 'pods', '-A', '-o', 'wide'],
    ['-n', APP_NS, 'logs', '-l', 'app=demo', '-c', 'gw-sidecar', '--tail=40', '--prefix'],
    ['-n', RELEASE_NS, 'logs', '-l', 'app.kubernetes.io/component=operator', '--tail=40', '--prefix'],
  ]) {
    await kubectl(args, { allowFail: true }).then((o) => process.stderr.write(`\n$ kubectl ${args.join(' ')}\n${o}`));
  }
  // Last again, so whoever reads only the end of the output sees why.
  process.stderr.write(`\nJOURNEY FAILED: ${(err as Error).message}\n`);
  process.exitCode = 1;
}
