import type { CompiledApi, CompiledEndpointLimit, CompiledMatcher, CompiledRate } from '../compiled.ts';
import { durationMs } from '../duration.ts';
import { isRecord } from '../is-record.ts';
import type { OasDocument, OasOperation } from '../schemas/api-definition.ts';
import type { ApiBase } from './api-base.ts';
import { smoothingOf } from './limits.ts';
import { oasPathPattern } from './paths.ts';
import { canonicalPath } from './request-path.ts';
import type { CompileProblem } from './problems.ts';

const operationMethods = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']);

interface Operation {
  id: string;
  path: string;
  method: string;
  pattern: string;
}

/** Operations of the document in the order of `paths` (docs/behaviour.md#limits-and-their-scopes), then of methods within a path. */
function operationsOf(doc: OasDocument, base: ApiBase, problems: CompileProblem[]): Map<string, Operation> {
  const ops = new Map<string, Operation>();
  for (const [path, item] of Object.entries(doc.paths)) {
    // OpenAPI allows specification extensions (`x-…`) beside the paths.
    if (!isRecord(item) || path.startsWith('x-')) continue;
    const pattern = oasPathPattern(path);
    if (!pattern.ok) problems.push(base.problem(`spec.oas.paths["${path}"]`, 'InvalidPath', pattern.message));
    for (const [method, operation] of Object.entries(item)) {
      if (!operationMethods.has(method) || !isRecord(operation) || typeof operation.operationId !== 'string') continue;
      const id = operation.operationId;
      if (ops.has(id)) {
        problems.push(base.problem(`spec.oas.paths["${path}"].${method}.operationId`, 'DuplicateOperation', `operationId "${id}" is used by more than one operation`));
        continue;
      }
      // An invalid path's operations still count as defined (the API is left out for the path alone).
      ops.set(id, { id, path, method: method.toUpperCase(), pattern: pattern.ok ? pattern.pattern : '' });
    }
  }
  return ops;
}

type OasRateLimit = NonNullable<OasOperation['rateLimit']>;

/**
 * `per` as a duration string → seconds; rate 0 or disabled → no limit. The schema holds an
 * enabled limit's `per` with a rate to a duration over 0 and at most the longest window
 * (api-definition.ts).
 */
function oasRate(limit: OasRateLimit | undefined): CompiledRate | null {
  if (!limit || !limit.enabled || limit.rate === 0) return null;
  return { rate: limit.rate, per: durationMs(limit.per) / 1000 };
}

function compileOperations(doc: OasDocument, base: ApiBase, problems: CompileProblem[]) {
  const ops = operationsOf(doc, base, problems);
  const configured = doc['x-gw-api-gateway'].middleware?.operations ?? {};
  const prefix = 'spec.oas.x-gw-api-gateway.middleware.operations';
  for (const id of Object.keys(configured)) {
    if (!ops.has(id)) problems.push(base.problem(`${prefix}.${id}`, 'UnknownOperation', `operationId "${id}" is not defined in the document's paths`));
  }
  const endpointLimits: CompiledEndpointLimit[] = [];
  const ignored: CompiledMatcher[] = [];
  // Evaluation follows the document's `paths` order, not the order of the middleware map.
  for (const op of ops.values()) {
    const middleware = configured[op.id];
    if (!middleware) continue;
    const matcher = { path: op.path, pattern: op.pattern, method: op.method };
    const rate = oasRate(middleware.rateLimit);
    if (rate) endpointLimits.push({ ...matcher, ...rate });
    if (middleware.ignoreAuthentication?.enabled) ignored.push(matcher);
  }
  return { endpointLimits, ignored };
}

/** OAS definition → compiled API; any problem leaves the API out. */
export function compileOasApi(doc: OasDocument, base: ApiBase): { api: CompiledApi | null; problems: CompileProblem[] } {
  const problems: CompileProblem[] = [];
  const gw = doc['x-gw-api-gateway'];
  const { endpointLimits, ignored } = compileOperations(doc, base, problems);
  const apiLimit = oasRate(gw.upstream.rateLimit);
  if (problems.length > 0) return { api: null, problems };
  const auth = gw.server.authentication;
  return {
    api: {
      ...base.fields,
      active: gw.info?.state?.active ?? true,
      keyless: !(auth?.enabled ?? false),
      auth_header_name: auth?.header?.name ?? 'Authorization',
      listen_path: canonicalPath(gw.server.listenPath.value),
      target_url: gw.upstream.url,
      strip_listen_path: gw.server.listenPath.strip,
      api_limit: apiLimit,
      endpoint_limits: endpointLimits,
      ignored,
      stream_limit: null,
      smoothing: smoothingOf(gw.upstream.rateLimit?.smoothing, apiLimit),
    },
    problems,
  };
}
