import { createHash } from 'node:crypto';
import { createLogger } from '../../common/logger.ts';
import type { CompiledApi } from '../../crds/compiled.ts';
import type { Session } from '../../crds/session.ts';
import type { LimitRequest, SmoothingEvent, SmoothingEventSink } from '../../sidecar/limits/types.ts';

/** The limit engine's test kit (unit, integration, bench): requests, event sinks and a hand-moved clock. */

export const silentLogger = createLogger('limits-test', 'silent');

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
