import cluster, { type Worker } from 'node:cluster';
import { createServer } from 'node:http';
import { Counter, Gauge, Registry } from 'prom-client';
import { createHealthHandler, type Readiness } from '../../common/health.ts';
import { metricsText } from '../../common/metrics-text.ts';
import { drain, listen, listenNamed, urlOf } from '../../common/listen.ts';
import type { Logger } from '../../common/logger.ts';
import { boundedServer } from '../bounded-server.ts';
import { allowanceId, SmoothingAllowances, type AllowanceLabels } from '../limits/metrics.ts';
import { StreamLimiters } from '../limits/stream-limiter.ts';
import { INSTANCE_ID_ENV, listenerOptionNames, PROXY_OFF, type SidecarOptions } from '../cli.ts';
import type { CompiledApi } from '../../crds/compiled.ts';
import { WorkersMetricsSum, type WorkerMetrics } from './metrics.ts';
import { IpcPeer, METRICS_TIMEOUT_MS, OTHERS_TIMEOUT_MS, RETAINED_TIMEOUT_MS, WORKER_COUNT_ENV, WORKER_INDEX_ENV, type OthersCall, type PrimaryMethods, type WorkerMethods } from './ipc.ts';

/**
 * A worker that answers no readiness call within this counts as not ready. It is under the
 * probes' 2 s timeout (charts/gw, the injected sidecar), so the kubelet reads the reason
 * rather than a probe that timed out.
 */
const READINESS_TIMEOUT_MS = 1500;
const STARTING: Readiness = { ready: false, reasons: ['starting'], problems: [] };
/** Time a worker has to drain after SIGTERM (its own drain is 10 s) before it is killed. */
const STOP_GRACE_MS = 15_000;
/** Restart delays of a worker that keeps exiting: doubling from the first, up to the last. */
const RESTART_DELAY_MS = { first: 500, max: 30_000 } as const;
/** A worker that ran this long before it exited restarts after the first delay again. */
const STABLE_AFTER_MS = 60_000;
/**
 * Each running worker is asked this often whether its event loop turns, and has as long to
 * answer. One that misses LIVENESS_MISSES answers in a row (stuck in synchronous work, or a
 * stopped process) is killed and started again, as the kubelet restarts a single gateway
 * process whose liveness probe fails: the primary's own /healthz cannot see a worker stuck.
 */
const LIVENESS_PING_MS = 2000;
const LIVENESS_MISSES = 5;

export interface Slot {
  index: number;
  worker: Worker | undefined;
  peer: IpcPeer<PrimaryMethods, WorkerMethods> | undefined;
  /**
   * The worker has loaded its code and answers calls. Before that it is starting: a call
   * would wait on its channel until it has loaded, seconds on a busy node.
   */
  listening: boolean;
  started: boolean;
  startedAt: number;
  restartDelayMs: number;
  /**
   * A worker started again after an exit has not answered ready yet: while it loads its
   * config, the others serve, so its "not ready" is a problem of the pod, not a reason to
   * take it out of its Service (docs/architecture.md#workers).
   */
  rejoining: boolean;
  /** Liveness asks in a row this worker has not answered, and whether one is under way. */
  missedPings: number;
  pinging: boolean;
}

export interface RunningPrimary {
  healthUrl: string;
  /** SIGHUP: every worker re-reads its config. */
  reload(): void;
  close(): Promise<void>;
}

function primaryMetrics(): { registry: Registry; running: Gauge; exits: Counter<'code'>; allowance: SmoothingAllowances } {
  const registry = new Registry();
  return {
    registry,
    allowance: new SmoothingAllowances([registry], 'sum'),
    running: new Gauge({ name: 'gw_workers', help: 'Worker processes of this gateway that are running (--workers).', registers: [registry] }),
    exits: new Counter({ name: 'gw_worker_exits_total', help: 'Worker processes that ended other than by a stop, by exit code or signal (each is restarted).', labelNames: ['code'], registers: [registry] }),
  };
}

/**
 * Whether some worker's own gw_smoothing_allowance holds a series: each drops the series of
 * what its config no longer has, or that have not moved for long (sidecar/limits/metrics.ts),
 * and the primary's gauge follows them.
 */
function heldBy(workers: readonly WorkerMetrics[]): (labels: AllowanceLabels) => boolean {
  const held = new Set<string>();
  for (const { metrics } of workers) {
    for (const { labels } of metrics.find((metric) => metric.name === 'gw_smoothing_allowance')?.values ?? []) held.add(allowanceId(labels as AllowanceLabels));
  }
  return (labels) => held.has(allowanceId(labels));
}

/**
 * The metrics of each started worker, for a scrape. A worker that ends before it answers is
 * left out: its counts stay in the sum as the last scrape read them (WorkersMetricsSum.ended),
 * so the scrape still answers, every counter as it was, where it failed with a 500. A worker
 * that lives and does not answer in time fails the scrape (README.md#the-sidecar-gw-sidecar).
 */
async function startedWorkersMetrics(started: readonly Slot[]): Promise<{ index: number; metrics: WorkerMetrics }[]> {
  const answers = await Promise.allSettled(started.map((slot) => slot.peer!.call('metrics', undefined, METRICS_TIMEOUT_MS)));
  const workers: { index: number; metrics: WorkerMetrics }[] = [];
  for (const [i, answer] of answers.entries()) {
    const slot = started[i]!;
    if (answer.status === 'fulfilled') workers.push({ index: slot.index, metrics: answer.value });
    else if (slot.worker !== undefined) throw answer.reason;
  }
  return workers;
}

/**
 * Ready while every running worker is ready and one at least runs. A worker that is down,
 * or restarted and not ready yet, is a problem, not a reason: the others serve on while it
 * restarts, and an unready pod would leave its Service.
 */
export async function readinessOf(slots: readonly Slot[]): Promise<Readiness> {
  const reasons: string[] = [];
  const problems = new Map<string, Readiness['problems'][number]>();
  const answers = await Promise.all(
    slots.map(async (slot) => {
      if (slot.peer === undefined || slot.worker?.isConnected() !== true) return undefined;
      if (!slot.listening) return STARTING;
      return slot.peer.call('readiness', undefined, READINESS_TIMEOUT_MS).catch((error: unknown) => ({ ready: false, reasons: [(error as Error).message], problems: [] }));
    }),
  );
  let serving = 0;
  answers.forEach((answer, index) => {
    if (answer === undefined) {
      problems.set(`worker ${index}`, { subject: `worker ${index}`, reason: 'not running; restarting' });
      return;
    }
    const slot = slots[index]!;
    if (answer.ready) {
      serving += 1;
      slot.rejoining = false;
    } else if (slot.rejoining) {
      problems.set(`worker ${index}`, { subject: `worker ${index}`, reason: `restarted; not ready yet (${answer.reasons.join('; ')})` });
      return;
    }
    for (const reason of answer.reasons) reasons.push(`worker ${index}: ${reason}`);
    // Every worker loads the same config and reports the same problems: each is listed once.
    for (const problem of answer.problems) problems.set(`${problem.subject}\n${problem.reason}`, problem);
  });
  if (serving === 0 && reasons.length === 0) reasons.push('no worker running');
  return { ready: reasons.length === 0 && serving > 0, reasons, problems: [...problems.values()] };
}

/**
 * Asks each running worker every LIVENESS_PING_MS whether its event loop turns, and kills one
 * that has answered none of LIVENESS_MISSES asks in a row; its exit starts it again. Returns
 * the stop of the asks.
 */
function watchLiveness(live: () => Slot[], logger: Logger, stopping: () => boolean): () => void {
  const ask = (slot: Slot): void => {
    const { peer, worker } = slot;
    if (peer === undefined || worker === undefined || !slot.listening || slot.pinging) return;
    slot.pinging = true;
    // An answer or a failure of a worker since replaced is not the new worker's.
    const current = (): boolean => slot.peer === peer;
    peer
      .call('alive', undefined, LIVENESS_PING_MS)
      .then(
        () => {
          if (current()) slot.missedPings = 0;
        },
        () => {
          if (!current() || stopping()) return;
          slot.missedPings += 1;
          if (slot.missedPings < LIVENESS_MISSES) return;
          logger.error({ worker: slot.index, pid: worker.process.pid }, `worker ${slot.index} answered none of ${LIVENESS_MISSES} liveness asks; killing it`);
          // Until its exit replaces it, the asks it cannot answer start a new count, not another kill.
          slot.missedPings = 0;
          worker.process.kill('SIGKILL');
        },
      )
      .finally(() => {
        if (current()) slot.pinging = false;
      });
  };
  const timer = setInterval(() => {
    for (const slot of live()) ask(slot);
  }, LIVENESS_PING_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * The workers bind the proxy port with SO_REUSEPORT, which also lets them share it with the
 * workers of another gateway on the machine (one left running, say) that would then take part
 * of the traffic unseen. A bind without it fails on a port anyone holds: tried once before forking.
 */
async function refuseTakenPort(address: string): Promise<void> {
  if (address === PROXY_OFF) return;
  const probe = createServer();
  try {
    await listenNamed(listenerOptionNames.proxy, listen(probe, address, { exclusive: true }));
  } catch (error) {
    // Node's own error (with its syscall and code), so the refusal is told as a single gateway's is.
    if (error instanceof Error) error.message += " (another gateway's workers may hold it)";
    throw error;
  }
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

/**
 * The primary of a gateway run as `count` processes (docs/architecture.md#workers). It
 * forks the workers, which share the proxy and admin listeners through node:cluster;
 * restarts one that ends, with a growing delay while it keeps ending; serves /healthz,
 * /readyz (every worker's readiness) and /metrics (the workers' metrics summed, with
 * prom-client's AggregatorRegistry); runs on every other worker what one worker asks; gives
 * the slots of the stream rate-limit resources for all of them; and stops them all on
 * SIGTERM. A worker that ends before all have started fails the start.
 */
export async function startPrimary(options: SidecarOptions, count: number, logger: Logger, stoppable?: (close: () => Promise<void>) => void): Promise<RunningPrimary> {
  const metrics = primaryMetrics();
  const sum = new WorkersMetricsSum();
  const slots: Slot[] = Array.from({ length: count }, (_, index) => ({ index, worker: undefined, peer: undefined, listening: false, started: false, startedAt: 0, restartDelayMs: RESTART_DELAY_MS.first, rejoining: false, missedPings: 0, pinging: false }));
  let stopping = false;
  const started = Promise.withResolvers<void>();
  let starting = true;
  const restartTimers = new Set<NodeJS.Timeout>();
  // The gateway's stream rate-limit resources, one limiter each for all the workers: they
  // outlive a worker's restart, as they would one process's reload.
  const streams = new StreamLimiters();

  const live = (): Slot[] => slots.filter((s) => s.worker?.isConnected() === true);

  /**
   * The APIs every serving worker but `from` retains, once each (they retain the same ones).
   * Only workers that have started are asked: one still starting retains nothing yet, and may
   * not listen on its channel yet either.
   */
  const retainedByOthers = async (from: number): Promise<CompiledApi[]> => {
    const others = live().filter((s) => s.index !== from && s.started);
    const answers = await Promise.all(others.map((s) => s.peer!.call('retainedApis', undefined, RETAINED_TIMEOUT_MS).catch(() => [])));
    return [...new Map(answers.flat().map((api) => [api.api_id, api])).values()];
  };

  /** Runs `call` on every running worker but `from`, and fails with the first failure. */
  const onOthers = async (from: number, call: OthersCall): Promise<undefined> => {
    const others = live().filter((s) => s.index !== from);
    await Promise.all(others.map((s) => s.peer!.call(call.method, call.params as never, OTHERS_TIMEOUT_MS)));
    return undefined;
  };

  const fork = (slot: Slot): void => {
    const worker = cluster.fork({ [WORKER_INDEX_ENV]: String(slot.index), [WORKER_COUNT_ENV]: String(count), [INSTANCE_ID_ENV]: options.instanceId });
    const peer = new IpcPeer<PrimaryMethods, WorkerMethods>(
      (message) => worker.send(message),
      {
        others: (call) => onOthers(slot.index, call),
        retainedApis: () => retainedByOthers(slot.index),
        streamSlots: (requests) => requests.map((request) => streams.reserve(request, (move) => peer.notify('streamMoved', move), slot.index)),
      },
      {
        allowance: ({ labels, value }) => metrics.allowance.set(labels, value),
        streamRelease: (release) => streams.release(release),
        streamResources: (resources) => streams.configure(resources),
        listening: () => {
          slot.listening = true;
        },
        started: () => {
          slot.started = true;
          slot.startedAt = Date.now();
          metrics.running.set(live().length);
          if (slots.every((s) => s.started)) started.resolve();
        },
      },
    );
    Object.assign(slot, { worker, peer, listening: false, started: false, missedPings: 0, pinging: false });
    worker.on('message', (message: unknown) => peer.receive(message));
    worker.on('exit', (code, signal) => {
      peer.close(`worker ${slot.index} ended`);
      slot.worker = undefined;
      // Its waiting callers went with it: their slots go to the callers behind them.
      streams.releaseWaitingOf(slot.index);
      sum.ended(slot.index);
      metrics.running.set(live().length);
      if (stopping) return;
      const how = signal ?? `exit code ${code}`;
      metrics.exits.inc({ code: String(signal ?? code) });
      if (starting) {
        // A start that fails fails the process, as it does with one process.
        started.reject(new Error(`worker ${slot.index} ended before the gateway started (${how})`));
        return;
      }
      slot.rejoining = true;
      if (Date.now() - slot.startedAt > STABLE_AFTER_MS) slot.restartDelayMs = RESTART_DELAY_MS.first;
      logger.error({ worker: slot.index, code, signal }, `worker ${slot.index} ended (${how}); restarting in ${slot.restartDelayMs} ms`);
      const timer = setTimeout(() => {
        restartTimers.delete(timer);
        if (!stopping) fork(slot);
      }, slot.restartDelayMs);
      restartTimers.add(timer);
      slot.restartDelayMs = Math.min(slot.restartDelayMs * 2, RESTART_DELAY_MS.max);
    });
  };

  const stopLiveness = watchLiveness(live, logger, () => stopping);
  const healthServer = boundedServer(
    createHealthHandler(
      {
        contentType: metrics.registry.contentType,
        text: async () => {
          const asked = Date.now();
          const workers = await startedWorkersMetrics(live().filter((s) => s.started));
          metrics.allowance.retain(heldBy(workers.map((w) => w.metrics)), asked);
          return `${await sum.text(workers)}\n${await metricsText(metrics.registry)}`;
        },
      },
      // Stopping, the workers drain: none should be sent anything new.
      { readiness: () => (stopping ? { ready: false, reasons: ['stopping'], problems: [] } : readinessOf(slots)) },
    ),
    {},
  );

  const close = async (): Promise<void> => {
    stopping = true;
    stopLiveness();
    for (const timer of restartTimers) clearTimeout(timer);
    const exits = slots.map((slot) => {
      const worker = slot.worker;
      if (worker === undefined || worker.isDead()) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const kill = setTimeout(() => worker.process.kill('SIGKILL'), STOP_GRACE_MS);
        worker.once('exit', () => {
          clearTimeout(kill);
          resolve();
        });
        worker.process.kill('SIGTERM');
      });
    });
    await Promise.all(exits);
    await drain(healthServer, 1000);
    logger.info('gw-sidecar stopped');
  };

  try {
    const [healthInfo] = await Promise.all([listenNamed(listenerOptionNames.health, listen(healthServer, options.healthListen)), refuseTakenPort(options.listen)]);
    for (const slot of slots) fork(slot);
    // The workers warm up before they start (up to 10 s each): a stop meanwhile stops them.
    stoppable?.(close);
    await started.promise;
    starting = false;
    logger.info({ workers: count, health: urlOf(healthInfo) }, 'gw-sidecar workers started');
    const reload = (): void => live().forEach((slot) => slot.worker!.process.kill('SIGHUP'));
    return { healthUrl: urlOf(healthInfo), reload, close };
  } catch (error) {
    await close();
    throw error;
  }
}
