import { setTimeout as sleep } from 'node:timers/promises';
import type { Registry } from 'prom-client';
import type { Logger } from '../../common/logger.ts';
import type { MaybePromise } from '../../common/maybe-promise.ts';
import type { CompiledConfig } from '../../crds/compiled.ts';
import { algorithmFor, algorithmMode, drlShare, usesHeartbeats, type AlgorithmMode } from './algorithm.ts';
import type { LimitBackends } from './backends.ts';
import { DrlBuckets } from './drl-buckets.ts';
import { policyGlobalApis } from './effective-session.ts';
import type { GatewayHeartbeat } from './heartbeat.ts';
import { createLimitMetrics, type LimitMetrics } from './metrics.ts';
import { isRateLimited, refusalFrom, toDecision, type Evaluated, type Step, type StepResult } from './outcome.ts';
import { isApiScope } from './plan-types.ts';
import type { PlannedLimit, QuotaPlan, RequestPlan, ThrottlePlan } from './plan-types.ts';
import { Planner } from './plan.ts';
import type { StoreHealth } from './store-health.ts';
import type { LimitStore, PeekResult, StoreOp, StoreResult } from './stores/store.ts';
import type { LimitDecision, LimitEngine, LimitExplanation, LimitReading, LimitRequest, RateHeaderData, SmoothingEventSink } from './types.ts';
import { Sampler, TIMING_SAMPLE_EVERY } from '../../common/sampler.ts';

export interface LimitEngineOptions {
  config: CompiledConfig;
  /** The store and the live gateways it counts with (backends.ts); the engine closes them. */
  backends: LimitBackends;
  events: SmoothingEventSink;
  logger: Logger;
  registry?: Registry;
  /**
   * This gateway's clock: the DRL, throttling and the in-memory store read it. Limiters in
   * Redis read Redis's clock instead, so gateways whose clocks disagree share one window.
   * The backends' `now` must be the same clock.
   */
  now?: () => number;
}

const bucketSweepMs = 10_000;

function toOp(step: Step): StoreOp {
  const { limiterId, rate, perMs, smoothing } = step.limit;
  if (step.algorithm === 'sliding_log') return { kind: 'sliding_log', limiterId, rate, perMs, smoothing: smoothing?.settings ?? null };
  if (step.algorithm === 'sentinel') return { kind: 'sentinel', limiterId, rate, perMs };
  return { kind: 'fixed_window', limiterId, rate, perMs };
}

/**
 * The store op of a planned limit under the algorithm it runs with now. Planned limits live
 * as long as their config or session entry, so the op (and the store's encoding of it) is
 * built once for all the requests that meet the limit, not once per request.
 */
const storeOps = new WeakMap<PlannedLimit, StoreOp>();

function opOf(step: Step): StoreOp {
  const cached = storeOps.get(step.limit);
  if (cached !== undefined && cached.kind === step.algorithm) return cached;
  const op = toOp(step);
  storeOps.set(step.limit, op);
  return op;
}

/** A plan's limits as they stand (`LimitEngine#read`): a reading per step, in order, and the quota's. */
interface Readings {
  steps: Step[];
  held: Array<PeekResult | null>;
  quota: PeekResult | null;
}

/** One evaluation's local part, waiting for the store's: `quotaAt` is the quota op's index among the store's ops. */
interface Counted {
  steps: Step[];
  results: (StepResult | undefined)[];
  remote: number[];
  quotaAt: number | null;
}

/** `#evaluate`'s continuation for an evaluation that is not the decision yet (a throttled key's). */
const asEvaluated = (evaluated: Evaluated): Evaluated => evaluated;

const noLimits = (): Evaluated => ({ decision: { outcome: 'allowed', rate: null, quota: null }, algorithm: 'none' });

/** The store counts; which resource set the quota is the explanation's business, not the store's. */
const quotaOp = ({ source: _source, ...counted }: QuotaPlan): StoreOp => ({ kind: 'quota', ...counted });

/**
 * APIs a policy's global allowance shares with a served API: their gateways split it too. What
 * a key's own grant shares, or a Policy granting every API a key may call, the heartbeat learns
 * from the limits it is asked to count (`GatewayHeartbeat.cover`).
 */
function sharedApis(config: CompiledConfig, served: ReadonlySet<string>): string[] {
  const shared = new Set<string>();
  for (const policy of Object.values(config.policies)) {
    const covered = policyGlobalApis(policy);
    if (covered.some((api) => served.has(api))) for (const api of covered) shared.add(api);
  }
  return [...shared];
}

class Engine implements LimitEngine {
  readonly #options: LimitEngineOptions;
  readonly #now: () => number;
  readonly #planner: Planner;
  readonly #store: LimitStore;
  readonly #buckets = new DrlBuckets();
  readonly #heartbeat: GatewayHeartbeat | null;
  readonly #drlPeer: boolean;
  readonly #metrics: LimitMetrics;
  readonly #timingSampler = new Sampler(TIMING_SAMPLE_EVERY);
  readonly #health: StoreHealth;
  readonly #sweeper: NodeJS.Timeout;
  #config: CompiledConfig;
  #mode: AlgorithmMode;

  constructor(options: LimitEngineOptions) {
    this.#options = options;
    this.#config = options.config;
    this.#mode = algorithmMode(options.config.settings);
    this.#now = options.now ?? Date.now;
    this.#metrics = createLimitMetrics(options.registry);
    this.#planner = new Planner(options.config);
    this.#store = options.backends.store;
    this.#heartbeat = options.backends.peers;
    this.#drlPeer = options.backends.drlPeer;
    this.#health = options.backends.health;
    this.#sweeper = setInterval(() => this.#buckets.sweep(this.#now()), bucketSweepMs).unref();
    this.updateConfig(options.config);
  }

  updateConfig(config: CompiledConfig): void {
    this.#config = config;
    this.#mode = algorithmMode(config.settings);
    this.#planner.update(config);
    this.#store.configure(config.settings);
    this.#health.configure(config.settings);
    this.#metrics.smoothingAllowance.retainSources(config);
    if (!this.#heartbeat) return;
    this.#heartbeat.configure(config.settings);
    const served = config.apis.map((api) => api.api_id);
    this.#heartbeat.serve(served, sharedApis(config, new Set(served)));
    if (usesHeartbeats(this.#mode)) this.#heartbeat.start();
    else void this.#heartbeat.stop();
  }

  decide(request: LimitRequest, signal?: AbortSignal): MaybePromise<LimitDecision> {
    const started = this.#now();
    const plan = this.#planner.plan(request, started);
    // Nothing to count (a keyless API without an API limit): no store, nothing to wait for.
    if (plan.limits.length === 0 && plan.quota === null) {
      const { decision, algorithm } = noLimits();
      this.#metrics.decisions.inc(algorithm, decision.outcome);
      return decision;
    }
    const peersRead = this.#peersRead(plan);
    if (peersRead !== undefined) return peersRead.then(() => this.#decidePlanned(plan, started, signal));
    return this.#decidePlanned(plan, started, signal);
  }

  #decidePlanned(plan: RequestPlan, started: number, signal: AbortSignal | undefined): MaybePromise<LimitDecision> {
    // A throttled key's first evaluation may be followed by others: the decision is counted once, at the end.
    if (plan.throttle !== null) return this.#throttled(plan, plan.throttle, started, this.#evaluate(plan, asEvaluated), signal);
    return this.#evaluate(plan, this.#counted);
  }

  /**
   * The heartbeat's first reads of the live gateways of an API one of `plan`'s limits covers,
   * under way since the API was loaded (or the gateway started, or a limit covering it was
   * first counted): counted alone until then, this gateway would take a DRL limit's whole rate
   * rather than its share.
   */
  #peersRead(plan: RequestPlan): Promise<void> | undefined {
    const heartbeat = this.#heartbeat;
    if (!heartbeat?.running) return undefined;
    for (const limit of plan.limits) if (limit.coverApis.length > 1) heartbeat.cover(limit.coverApis);
    if (!heartbeat.readingNew) return undefined;
    for (const limit of plan.limits) {
      const reading = heartbeat.firstReadOf(limit.coverApis);
      if (reading !== undefined) return reading;
    }
    return undefined;
  }

  throttles(request: LimitRequest): boolean {
    return this.#planner.throttle(request) !== null;
  }

  readonly #counted = (evaluated: Evaluated): LimitDecision => {
    this.#metrics.decisions.inc(evaluated.algorithm, evaluated.withoutStore ? 'allowed_without_store' : evaluated.decision.outcome);
    return evaluated.decision;
  };

  /** A rate-limited request of a throttled key is evaluated again every interval, until admitted or out of retries or time. */
  async #throttled(plan: RequestPlan, throttle: ThrottlePlan, started: number, first: MaybePromise<Evaluated>, signal: AbortSignal | undefined): Promise<LimitDecision> {
    let evaluated = await first;
    const deadline = started + this.#config.settings.throttle_max_wait_ms;
    for (let retry = 0; retry < throttle.retries && isRateLimited(evaluated.decision); retry++) {
      if (this.#now() + throttle.intervalMs > deadline || !(await this.#wait(throttle.intervalMs, signal))) break;
      // A retry the limits would refuse again is not made: the sliding log and the sentinel log
      // every refusal, so the gateway's own retries would keep the caller's window full
      // (docs/behaviour.md#throttling). Its reading is the answer's, should the request give up.
      const refusal = await this.#refusalNow(plan, evaluated.decision.quota);
      evaluated = refusal ?? (await this.#evaluate(plan, asEvaluated));
    }
    return this.#counted(evaluated);
  }

  /**
   * The refusal a request of `plan` would meet now, read without counting anything; null when
   * every rate limit has room. A store that cannot be read leaves the answer to the
   * evaluation itself (null), which meets the same fault and answers as the failure mode says.
   */
  async #refusalNow(plan: RequestPlan, quota: RateHeaderData | null): Promise<Evaluated | null> {
    let read: Readings;
    try {
      // As the evaluation does, a DRL limit is read from this gateway's bucket, peer or not.
      read = await this.#read(plan, this.#now(), { quota: false, drlWithoutPeer: true });
    } catch {
      return null;
    }
    // In evaluation order: the first limit with nothing left is the one that refuses.
    for (const [i, step] of read.steps.entries()) {
      const held = read.held[i]!;
      if (held.remaining === 0) return refusalFrom(step, { ...held, allowed: false }, quota);
    }
    return null;
  }

  /**
   * Each limit of `plan` as it stands, counting nothing, in evaluation order: the store's
   * peeks merged with the DRL buckets' (null for a DRL limit of a gateway that is no DRL peer,
   * unless `drlWithoutPeer`), and the quota's reading when asked for.
   */
  async #read(plan: RequestPlan, nowMs: number, options: { quota: boolean; drlWithoutPeer: boolean }): Promise<Readings> {
    const steps = plan.limits.map((limit) => this.#step(limit));
    const ops = steps.flatMap((step) => (step.algorithm === 'drl' ? [] : [opOf(step)]));
    const quotaPlan = options.quota ? plan.quota : null;
    // The quota's op goes last, so its reading is the one after the rate limits'.
    if (quotaPlan) ops.push(quotaOp(quotaPlan));
    const peeked = ops.length > 0 ? await this.#store.peek(ops) : [];
    let next = 0;
    const readsDrl = options.drlWithoutPeer || this.#drlPeer;
    const held = steps.map(({ algorithm, limit, share }) => {
      if (algorithm !== 'drl') return peeked[next++]!;
      return readsDrl ? this.#buckets.peek(limit.limiterId, share, limit.perMs, nowMs) : null;
    });
    return { steps, held, quota: quotaPlan ? peeked[next]! : null };
  }

  async explain(request: LimitRequest): Promise<LimitExplanation> {
    const nowMs = this.#now();
    const plan = this.#planner.plan(request, nowMs);
    await this.#peersRead(plan);
    const read = await this.#read(plan, nowMs, { quota: true, drlWithoutPeer: false });
    const limits = read.steps.map(({ limit, algorithm, share }, i): LimitReading => {
      const drl = algorithm === 'drl';
      const held = read.held[i] ?? null;
      const smoothing = limit.smoothing?.settings ?? null;
      const smooths = algorithm === 'sliding_log';
      return {
        scope: limit.scope,
        source: limit.source,
        rate: limit.rate,
        per: limit.perMs / 1000,
        algorithm,
        drl: drl && this.#drlPeer ? { gateways: this.#heartbeat?.count(limit.coverApis) ?? 1, share } : null,
        smoothing: smooths ? smoothing : null,
        unusedSmoothing: smooths ? null : smoothing,
        held,
      };
    });
    const quota = plan.quota && read.quota && {
      source: plan.quota.source,
      max: plan.quota.max,
      renewal: plan.quota.renewalMs / 1000,
      used: read.quota.count,
      remaining: read.quota.remaining,
      resetMs: read.quota.resetMs,
    };
    // Evaluation stops at the first level with nothing left; the quota counts only after every rate limit passed.
    const refusing = limits.find((reading) => reading.held?.remaining === 0);
    const quotaRefuses = quota !== null && quota.remaining === 0;
    const { passedOver, outranked, smoothingWithoutRate } = this.#planner.choices(request);
    return {
      limits,
      quota,
      throttle: plan.throttle && { ...plan.throttle, maxWaitMs: this.#config.settings.throttle_max_wait_ms },
      passedOver,
      outranked,
      smoothingWithoutRate,
      outcome: refusing ? (isApiScope(refusing.scope) ? 'api_rate_limited' : 'key_rate_limited') : quotaRefuses ? 'quota_exceeded' : 'allowed',
      refusedBy: refusing?.scope ?? (quotaRefuses ? 'quota' : null),
    };
  }

  /** Whether the store's calls are failing now (store-health.ts), for the gateway's readiness. */
  get storeFailing(): boolean {
    return this.#health.failingNow();
  }

  async close(): Promise<void> {
    clearInterval(this.#sweeper);
    await this.#heartbeat?.stop();
    await this.#store.close();
  }

  async #wait(ms: number, signal?: AbortSignal): Promise<boolean> {
    try {
      await sleep(ms, undefined, { signal });
      return true;
    } catch {
      return false;
    }
  }

  #step(limit: PlannedLimit): Step {
    const gateways = this.#heartbeat?.count(limit.coverApis) ?? 1;
    const algorithm = algorithmFor(this.#mode, limit, this.#config.settings.drl_threshold, gateways);
    return { limit, algorithm, share: algorithm === 'drl' ? drlShare(limit.rate, gateways) : limit.rate };
  }

  /**
   * DRL limits are taken in process first; every other limit (and the quota, when no
   * local limit refused) goes to the store in one call. A refused request consumes
   * nothing: the store undoes the admissions it made (in the same call), and the DRL
   * tokens taken for the other limits are given back here. `then` takes the evaluation
   * where it concludes, so a store call costs the request one promise reaction, not two.
   */
  #evaluate<T>(plan: RequestPlan, then: (evaluated: Evaluated) => T): MaybePromise<T> {
    const nowMs = this.#now();
    // Plain loops into arrays of the size they need: this runs for every limited request,
    // flatMap's and entries()'s per-element arrays were the larger part of its cost, and an
    // empty array grows to 16 slots at its first push (docs/architecture.md#performance).
    const count = plan.limits.length;
    const steps = new Array<Step>(count);
    for (let i = 0; i < count; i++) steps[i] = this.#step(plan.limits[i]!);
    const results = new Array<StepResult | undefined>(count);
    const cut = this.#takeLocal(steps, results, nowMs);
    const refusedLocally = cut < count;
    // Limits before a local refusal still run: an API-level refusal there is the answer.
    const remote = new Array<number>(cut);
    const ops = new Array<StoreOp>(cut + 1);
    let sent = 0;
    for (let i = 0; i < cut; i++) {
      const step = steps[i]!;
      if (step.algorithm === 'drl') continue;
      remote[sent] = i;
      ops[sent++] = opOf(step);
    }
    remote.length = sent;
    const quotaAt = !refusedLocally && plan.quota ? sent : null;
    if (quotaAt !== null) ops[sent++] = quotaOp(plan.quota!);
    ops.length = sent;
    const counted: Counted = { steps, results, remote, quotaAt };
    // Only DRL limits (the default algorithm) and no quota: decided in process, with no promise.
    if (sent === 0) return then(this.#conclude(counted, []));
    return this.#runStore(ops, refusedLocally, counted, then);
  }

  /** The decision from the local results and what the store returned (null/undefined: see `#runStore`). */
  #conclude({ steps, results, remote, quotaAt }: Counted, stored: StoreResult[] | null | undefined): Evaluated {
    if (stored === null) {
      this.#refund(steps, results);
      return { decision: { outcome: 'store_unavailable', rate: null, quota: null }, algorithm: steps[0]?.algorithm ?? 'none' };
    }
    if (stored !== undefined) {
      for (let j = 0; j < remote.length; j++) results[remote[j]!] = stored[j];
      this.#emitSmoothing(steps, remote, stored);
    }
    // The store stops at the first refusal, so a quota it did not reach has no result.
    const quota = quotaAt !== null && stored && stored.length === quotaAt + 1 ? stored[quotaAt]! : null;
    const evaluated = toDecision(steps, results, quota);
    if (evaluated.decision.outcome !== 'allowed') this.#refund(steps, results);
    // The store failed under `open`: the limits it counts (the first named) went unchecked.
    else if (stored === undefined) return { ...evaluated, algorithm: remote.length > 0 ? steps[remote[0]!]!.algorithm : evaluated.algorithm, withoutStore: true };
    return evaluated;
  }

  /** Takes DRL tokens in order, into `results`; the index of the first local refusal (or the length). */
  #takeLocal(steps: readonly Step[], results: (StepResult | undefined)[], nowMs: number): number {
    for (let i = 0; i < steps.length; i++) {
      const step = steps[i]!;
      if (step.algorithm !== 'drl') continue;
      const result = this.#buckets.take(step.limit.limiterId, step.share, step.limit.perMs, nowMs);
      results[i] = result;
      if (!result.allowed) return i;
    }
    return steps.length;
  }

  /**
   * The store's part of an evaluation, concluded: when the store fails, with null for the
   * `closed` failure mode, and with undefined for `open`, where the request goes on with the
   * limits that did not need the store. One `then` for the call and the conclusion: every
   * limited request passes here (docs/architecture.md#performance).
   */
  #runStore<T>(ops: StoreOp[], refused: boolean, counted: Counted, then: (evaluated: Evaluated) => T): Promise<T> {
    const timed = this.#timingSampler.next();
    const started = timed ? performance.now() : 0;
    return this.#store.run(ops, refused).then(
      (stored) => {
        if (timed) this.#metrics.storeSeconds.observe((performance.now() - started) / 1000);
        this.#health.succeeded();
        return then(this.#conclude(counted, stored));
      },
      (error: unknown) => {
        if (timed) this.#metrics.storeSeconds.observe((performance.now() - started) / 1000);
        this.#health.failed(error);
        return then(this.#conclude(counted, this.#config.settings.redis_failure_mode === 'closed' ? null : undefined));
      },
    );
  }

  /** Gives back every DRL token this refused request took. */
  #refund(steps: readonly Step[], results: readonly (StepResult | undefined)[]): void {
    for (const [i, step] of steps.entries()) {
      if (step.algorithm === 'drl' && results[i]?.allowed) this.#buckets.refund(step.limit.limiterId, step.share);
    }
  }

  /** Smoothing events of the store's results; `remote[j]` is the step of `stored[j]` (the quota's result has none). */
  #emitSmoothing(steps: readonly Step[], remote: readonly number[], stored: readonly StoreResult[]): void {
    for (let j = 0; j < remote.length && j < stored.length; j++) {
      const result = stored[j]!;
      const step = steps[remote[j]!]!;
      const smoothing = step.limit.smoothing;
      if (!result.smoothing || !smoothing) continue;
      const { oldAllowance, newAllowance } = result.smoothing;
      const reason = newAllowance > oldAllowance ? 'RateLimitSmoothingUp' : 'RateLimitSmoothingDown';
      this.#metrics.smoothingEvents.inc({ reason });
      this.#metrics.smoothingAllowance.set({ kind: smoothing.source.kind, namespace: smoothing.source.namespace, name: smoothing.source.name }, newAllowance);
      try {
        this.#options.events.emit({
          reason,
          source: smoothing.source,
          limiterKey: step.limit.limiterId,
          oldAllowance,
          newAllowance,
          time: new Date(this.#now()),
        });
      } catch (error) {
        this.#options.logger.warn({ err: error }, 'smoothing event sink failed');
      }
    }
  }
}

/** The rate-limit engine of one gateway process (docs/behaviour.md#algorithms, docs/architecture.md#performance). */
export function createLimitEngine(options: LimitEngineOptions): LimitEngine {
  return new Engine(options);
}
