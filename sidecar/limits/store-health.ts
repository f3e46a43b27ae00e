import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from '../../common/logger.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import type { LimitScriptReporter } from './stores/limits-script.ts';

/** Where the store and the peer counter report how their calls to Redis went. */
export interface StoreReporter {
  failed(error: unknown): void;
  succeeded(): void;
}

/**
 * How long calls must go on succeeding, with none failing, before the outage's end is logged.
 * A Redis Cluster with one master down answers the calls to the others, so successes and
 * failures alternate for the whole outage.
 */
export const STORE_STEADY_MS = 5_000;

/**
 * Redis trouble is counted every time but logged once per outage: one line when it
 * starts, one when Redis has answered for STORE_STEADY_MS with no call failing. Only the
 * message is logged, never the command (its keys are hashed, but nothing is gained by
 * printing them). Readiness and the failure mode follow each call (`failingNow`), not the log.
 */
export class StoreHealth implements StoreReporter, LimitScriptReporter {
  readonly #logger: Logger;
  readonly #errors: Counter;
  readonly #runsAsFunction: Gauge;
  #failureMode: GatewaySettings['redis_failure_mode'] = 'closed';
  #failing = false;
  /** An outage logged whose end is not logged yet, and the wait that logs it once Redis has answered long enough. */
  #outageLogged = false;
  #steady: NodeJS.Timeout | undefined;
  readonly #probe: (() => Promise<unknown>) | undefined;
  #probing = false;

  /**
   * Without a registry the metrics still count but are exported nowhere; `probe` asks Redis
   * whether it answers (see failingNow), and is absent without Redis (the in-memory store),
   * which has no limit script either.
   */
  constructor(logger: Logger, registry?: Registry, probe?: () => Promise<unknown>) {
    this.#logger = logger;
    this.#probe = probe;
    const registers = registry ? [registry] : [];
    this.#errors = new Counter({ name: 'gw_redis_errors_total', help: 'Failed or timed-out Redis calls of the rate-limit engine.', registers });
    this.#runsAsFunction = new Gauge({
      name: 'gw_limit_script_function',
      help: '1 while the limit script runs as a Redis Function (FCALL); 0 once Redis refused functions and it runs by EVALSHA (README.md#redis).',
      registers: probe ? registers : [],
      // With workers: 0 when any of them runs by EVALSHA.
      aggregator: 'min',
    });
    this.#runsAsFunction.set(1);
  }

  /** The failure mode in force, named in the outage's log line. */
  configure(settings: GatewaySettings): void {
    this.#failureMode = settings.redis_failure_mode;
  }

  /**
   * Whether Redis's last call failed or timed out with none answered since (a hung server with
   * its connection up reads so). While it is, each look sends one probe (`probe`, one at a
   * time): a gateway that its failure made unready gets no traffic whose calls could show
   * Redis back, so the readiness checks that ask here are what find it back.
   */
  failingNow(): boolean {
    if (this.#failing && this.#probe && !this.#probing) {
      this.#probing = true;
      this.#probe().then(
        () => this.succeeded(),
        () => undefined,
      ).finally(() => (this.#probing = false));
    }
    return this.#failing;
  }

  failed(error: unknown): void {
    this.#errors.inc();
    clearTimeout(this.#steady);
    this.#steady = undefined;
    if (this.#failing) return;
    this.#failing = true;
    if (this.#outageLogged) return;
    this.#outageLogged = true;
    this.#logger.error({ err: error, failureMode: this.#failureMode }, 'rate-limit store unreachable');
  }

  succeeded(): void {
    if (!this.#failing) return;
    this.#failing = false;
    this.#steady = setTimeout(() => {
      this.#steady = undefined;
      this.#outageLogged = false;
      this.#logger.info('rate-limit store reachable again');
    }, STORE_STEADY_MS).unref();
  }

  functionLoaded(name: string, primaries: number): void {
    this.#logger.info({ function: name, primaries }, 'redis: limit function loaded');
  }

  functionsRefused(reason: string): void {
    this.#runsAsFunction.set(0);
    this.#logger.warn({ reason }, 'redis: the server refused Redis Functions; limits run by EVALSHA from now on (README.md#redis)');
  }
}
