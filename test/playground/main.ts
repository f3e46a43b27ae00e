import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { startEchoUpstream, type EchoUpstream } from '../../demo/upstream.ts';
import { examplesManifest, waitForExamples, type ResourceList } from '../e2e/support/examples.ts';
import { startGwStack, type GwStack } from '../e2e/support/gw-stack.ts';
import { signalAll } from '../e2e/support/processes.ts';
import { waitFor } from '../e2e/support/wait.ts';
import { startControlPlane, startRedis, type ControlPlaneHandle, type RedisHandle } from '../harness/index.ts';
import { trySteps, type TryContext, type TryStep } from './commands.ts';
import { runShell, type ShellResult } from './shell.ts';

/**
 * `npm run playground`: the harness's kube-apiserver, etcd and Redis, the operator and
 * one sidecar as local processes, a demo upstream, and examples/ applied in namespace
 * `demo`; then the KUBECONFIG export and the kubectl and curl commands to try. Ctrl-C
 * (SIGINT) or SIGTERM stops everything. `--check` runs those commands once itself,
 * prints what each gave, stops, and exits 0 when each behaved as printed, else 1.
 */

const NAMESPACE = 'demo';

interface Running {
  /** Settings file, logs and the applied examples. */
  dir?: string;
  plane?: ControlPlaneHandle;
  redis?: RedisHandle;
  upstream?: EchoUpstream;
  stack?: GwStack;
}

const running: Running = {};
let stopping: Promise<void> | undefined;

const say = (line = ''): void => void process.stdout.write(`${line}\n`);

async function stopAll(): Promise<void> {
  await running.stack?.stop().catch((err: unknown) => say(`stopping gw: ${String(err)}`));
  await running.upstream?.close();
  await Promise.allSettled([running.redis?.dispose(), running.plane?.stop()]);
  if (running.dir) rmSync(running.dir, { recursive: true, force: true });
}

/** Stops everything once and exits; a second signal while stopping kills what is left at once. */
function shutdown(code: number): void {
  if (stopping) {
    signalAll('SIGKILL');
    process.exit(code);
  }
  // The gw processes get their SIGTERM before the harness's own signal handler takes the control plane down.
  signalAll('SIGTERM');
  stopping = stopAll().finally(() => process.exit(code));
}

async function kubectlJson(kubeconfig: string, args: string[]): Promise<ResourceList> {
  const result = await runShell(`kubectl get ${args.join(' ')} -n ${NAMESPACE} -o json`, { KUBECONFIG: kubeconfig });
  if (result.code !== 0) throw new Error(result.stderr.trim());
  return JSON.parse(result.stdout) as ResourceList;
}

async function startServers(): Promise<{ plane: ControlPlaneHandle; redis: RedisHandle }> {
  say('gw playground: starting etcd, kube-apiserver and Redis (the first run builds the pinned binaries; later runs reuse them)');
  const [plane, redis] = await Promise.allSettled([startControlPlane(), startRedis()]);
  if (plane.status === 'fulfilled') running.plane = plane.value;
  if (redis.status === 'fulfilled') running.redis = redis.value;
  if (plane.status === 'rejected') throw plane.reason;
  if (redis.status === 'rejected') throw redis.reason;
  return { plane: plane.value, redis: redis.value };
}

type Started = TryContext & { kubeconfig: string; stack: GwStack; manifest: string };

async function start(): Promise<Started> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-playground-'));
  running.dir = dir;
  const { plane, redis } = await startServers();
  const env = { KUBECONFIG: plane.kubeconfig };
  const created = await runShell(`kubectl create namespace ${NAMESPACE}`, env);
  if (created.code !== 0) throw new Error(`kubectl create namespace: ${created.stderr.trim()}`);
  running.upstream = await startEchoUpstream();
  say(`gw playground: starting gw-operator and gw-sidecar (demo upstream ${running.upstream.url})`);
  const stack = await startGwStack({
    kubeconfig: plane.kubeconfig,
    redisUrl: redis.url,
    namespace: NAMESPACE,
    settings: { enable_redis_rolling_limiter: true, rate_limit_response_headers: 'rate_limits' },
    apis: '*',
    dir,
  });
  running.stack = stack;
  for (const proc of [stack.operator, stack.sidecar]) {
    void proc.exited.then((code) => {
      if (stopping) return;
      say(`${proc.name} exited (${String(code)}); its log: ${proc.logPath}`);
      shutdown(1);
    });
  }
  // The examples, with their upstream pointed at the demo upstream, kept where the user can read them.
  const manifest = join(dir, 'examples.yaml');
  writeFileSync(manifest, examplesManifest(running.upstream.url));
  const applied = await runShell(`kubectl apply -n ${NAMESPACE} -f ${manifest}`, env);
  if (applied.code !== 0) throw new Error(`kubectl apply: ${applied.stderr.trim()}`);
  await waitForExamples((args) => kubectlJson(plane.kubeconfig, args));
  await waitFor('the sidecar to serve the examples', async () => (await fetch(`${stack.proxyUrl}/billing/get`)).status === 200);
  return { kubeconfig: plane.kubeconfig, stack, manifest, namespace: NAMESPACE, proxyUrl: stack.proxyUrl, adminUrl: stack.adminUrl, adminSecret: stack.adminSecret };
}

function printGuide(ctx: Started): void {
  const { stack } = ctx;
  say();
  say(`gw playground is up: examples/ applied in namespace "${NAMESPACE}", served by one sidecar in front of a demo upstream.`);
  say();
  say(`  export KUBECONFIG=${ctx.kubeconfig}`);
  for (const step of trySteps(ctx)) {
    say();
    say(`# ${step.title}`);
    for (const line of step.lines) say(line);
  }
  say();
  say(`Applied: ${ctx.manifest} (examples/ with their upstream set to the demo upstream)`);
  say(`Sidecar: proxy ${stack.proxyUrl}, admin ${stack.adminUrl}, health and metrics ${stack.healthUrl}; operator health and metrics ${stack.operatorHealthUrl}`);
  say(`Admin secret (Admin-Auth, X-GW-Authorization): ${stack.adminSecret}; portal secret (Authorization): ${stack.portalSecret}`);
  say(`Logs: ${stack.operator.logPath} ${stack.sidecar.logPath}`);
  const pids = [stack.operator.pid, stack.sidecar.pid, ...(running.plane?.pids() ?? []), ...(running.redis?.pids() ?? [])];
  say(`Processes: ${pids.join(' ')}`);
}

async function runStep(step: TryStep, kubeconfig: string): Promise<{ result: ShellResult; problem: string | null }> {
  const deadline = Date.now() + (step.settleMs ?? 0);
  for (;;) {
    const result = await runShell(step.lines.join('\n'), { KUBECONFIG: kubeconfig });
    const problem = step.verify(result);
    if (problem === null || Date.now() >= deadline) return { result, problem };
    await sleep(1_000);
  }
}

/** Runs every printed step once (re-running the ones that show asynchronous results until they settle); true when each behaved as printed. */
async function check(ctx: Started): Promise<boolean> {
  say();
  say('--check: running the commands above');
  let ok = true;
  for (const step of trySteps(ctx)) {
    const { result, problem } = await runStep(step, ctx.kubeconfig);
    ok &&= problem === null;
    say(`${problem === null ? 'ok  ' : 'FAIL'} ${step.title}${problem === null ? '' : `: ${problem}`}`);
    for (const line of result.stdout.trimEnd().split('\n').slice(0, 12)) say(`       ${line}`);
  }
  say(ok ? 'check passed' : 'check FAILED');
  return ok;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { check: { type: 'boolean' }, help: { type: 'boolean' } }, strict: true });
  if (values.help) {
    say('Usage: npm run playground [-- --check]\n  --check  run the printed commands once, then stop (exit 0 when all behaved as printed)');
    return;
  }
  process.on('SIGINT', () => shutdown(0));
  process.on('SIGTERM', () => shutdown(0));
  let ctx;
  try {
    ctx = await start();
  } catch (err) {
    if (stopping) return;
    process.stderr.write(`gw playground: could not start: ${err instanceof Error ? err.message : String(err)}\n`);
    if (running.stack) process.stderr.write(`${running.stack.logTails()}\n`);
    shutdown(1);
    return;
  }
  if (stopping) return;
  printGuide(ctx);
  if (values.check) {
    const ok = await check(ctx);
    say('gw playground: stopping');
    shutdown(ok ? 0 : 1);
    return;
  }
  say('Press Ctrl-C to stop everything.');
}

await main();
