import {
  compiledConfigSchema,
  type CompiledApi,
  type CompiledConfig,
  type CompiledPolicy,
} from '../../crds/compiled.ts';
import { sessionSchema, type Session } from '../../crds/session.ts';
import type { GatewaySettings } from '../../crds/settings.ts';

/**
 * The one builder of compiled configs for tests (unit, integration, bench). Defaults are
 * what the compile step emits for a minimal classic API or Policy, so a test names only
 * the fields it is about.
 */

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

/** Goes through compiledConfigSchema.parse, so tests only build what the compile step could emit. */
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
