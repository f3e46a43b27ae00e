import { createHash } from 'node:crypto';
import { createLogger } from '../../common/logger.ts';
import type { CompiledApi } from '../../crds/compiled.ts';
import type { Session } from '../../crds/session.ts';
import type { LimitRequest, SmoothingEvent, SmoothingEventSink } from '../../sidecar/limits/types.ts';
import type { StoreReporter } from '../../sidecar/limits/store-health.ts';
import type { LimitScriptReporter } from '../../sidecar/limits/stores/limits-script.ts';

/** The limit engine's test kit (unit, integration, bench): requests, event sinks and a hand-moved clock. */

export const silentLogger = createLogger('limits-test', 'silent');

/** A Redis limit store's reporter that keeps only its background failures (`failed`), for tests that build a store alone. */
export function failuresReporter(failed: (error: unknown) => void = () => undefined): StoreReporter & LimitScriptReporter {
  return { failed, succeeded: () => undefined, functionLoaded: () => undefined, functionsRefused: () => undefined };
}

export const keyHashOf = (raw: string): string => createHash('sha256').update(raw).digest('hex');

export function request(
  target: CompiledApi,
  caller: { session: Session; raw: string } | null,
  method = 'GET',
  path = '/',
): LimitRequest {
  return {
    api: target,
    method,
    path,
    session: caller?.session ?? null,
    keyHash: caller ? keyHashOf(caller.raw) : null,
  };
}

export function collectingSink(): SmoothingEventSink & { events: SmoothingEvent[] } {
  const events: SmoothingEvent[] = [];
  return { events, emit: (event) => void events.push(event) };
}

/** A clock the test moves by hand. */
export function manualClock(start = Date.UTC(2030, 0, 1)): { now: () => number; advance(ms: number): void; set(ms: number): void } {
  let current = start;
  return {
    now: () => current,
    advance: (ms) => void (current += ms),
    set: (ms) => void (current = ms),
  };
}
