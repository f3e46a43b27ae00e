import { createHash } from 'node:crypto';
import { createLogger } from '../../common/logger.ts';
import {
  compiledConfigSchema,
  type CompiledApi,
  type CompiledConfig,
  type CompiledPolicy,
} from '../../crds/compiled.ts';
import { sessionSchema, type Session } from '../../crds/session.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import type { LimitRequest, SmoothingEvent, SmoothingEventSink } from './types.ts';

/**
 * Builders for the engine's tests (unit and integration). Every config goes through
 * compiledConfigSchema.parse, so tests only build what the compile step could emit.
 */

export const silentLogger = createLogger('limits-test', 'silent');

export const keyHashOf = (raw: string): string => createHash('sha256').update(raw).digest('hex');

export function api(apiId: string, overrides: Partial<CompiledApi> = {}): CompiledApi {
  return {
    api_id: apiId,
    name: apiId,
    source: { kind: 'ApiDefinition', namespace: 'default', name: apiId },
    active: true,
    keyless: false,
    auth_header_name: 'Authorization',
    listen_path: `/${apiId}/`,
    target_url: 'http://127.0.0.1:1',
    strip_listen_path: true,
    api_limit: null,
    endpoint_limits: [],
    ignored: [],
    categories: [],
    stream_limit: null,
    smoothing: null,
    ...overrides,
  };
}

export function policy(name: string, overrides: Partial<CompiledPolicy> = {}, namespace = 'default'): CompiledPolicy {
  return {
    id: `${namespace}/${name}`,
    source: { kind: 'Policy', namespace, name },
    rate: null,
    quota_max: -1,
    quota_renewal_rate: 0,
    throttle_interval: 0,
    throttle_retry_limit: 0,
    smoothing: null,
    meta_data: {},
    rate_limit_pattern: null,
    tags: [],
    access_rights: {},
    ...overrides,
  };
}

export function config(parts: {
  settings?: Partial<GatewaySettings>;
  apis?: CompiledApi[];
  policies?: CompiledPolicy[];
}): CompiledConfig {
  return compiledConfigSchema.parse({
    version: 1,
    settings: parts.settings ?? {},
    apis: parts.apis ?? [],
    policies: Object.fromEntries((parts.policies ?? []).map((p) => [p.id, p])),
  });
}

export function session(input: Record<string, unknown> = {}): Session {
  return sessionSchema.parse(input);
}

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
