/**
 * Every error the admin listener answers, defined once: a stable code (also sent as the
 * `X-GW-Error-Code` header, since the SPEC's body shapes have no room for one), an HTTP
 * status and the message. The body shape is the operation's own (see responses.ts).
 */
export interface ErrorDef {
  readonly code: string;
  readonly status: number;
  readonly message: string;
}

const def = (code: string, status: number, message: string): ErrorDef => ({ code, status, message });

export const MAX_BODY_BYTES = 1024 * 1024;

export const adminErrors = {
  routeNotFound: def('route_not_found', 404, 'Not found'),
  methodNotAllowed: def('method_not_allowed', 405, 'Method not allowed'),
  duplicateHeader: def('duplicate_header', 400, 'Header given more than once'),

  adminKeyInvalid: def('admin_key_invalid', 403, 'Not authorised'),
  gatewayKeyInvalid: def('gateway_key_invalid', 403, 'Attempted administrative access with invalid or missing key!'),
  portalKeyInvalid: def('portal_key_invalid', 401, 'Not authorised'),
  bearerMissing: def('bearer_unauthenticated', 401, 'Not authorised'),
  bearerForbidden: def('bearer_forbidden', 403, 'access denied: You do not have permission to access'),
  authCheckFailed: def('auth_check_failed', 500, 'Could not check the credentials'),
  reviewsNotPermitted: def(
    'reviews_not_permitted',
    403,
    "Category reads are served by the admin gateway (Service gw-admin), not here: this gateway's ServiceAccount may not review tokens",
  ),

  unsupportedMediaType: def('unsupported_media_type', 415, 'Content-Type must be application/json'),
  unsupportedEncoding: def('unsupported_encoding', 415, 'Content-Encoding is not supported: send the body uncompressed'),
  bodyEmpty: def('body_empty', 400, 'Request body empty'),
  bodyTooLarge: def('body_too_large', 413, 'Request body too large'),
  bodyNotUtf8: def('body_not_utf8', 400, 'Request body is not valid UTF-8'),
  bodyMalformed: def('body_malformed', 400, 'Request body is not valid JSON'),
  bodyInvalid: def('body_invalid', 400, 'Invalid request body'),
  // 499 as nginx and the proxy's metrics count it: the client left, no answer reaches it.
  clientClosed: def('client_closed', 499, 'The client closed the request before its body ended'),
  paramInvalid: def('param_invalid', 400, 'Invalid path parameter'),
  queryInvalid: def('query_invalid', 400, 'Invalid query parameter'),
  keyWithoutAccess: def('key_without_access', 400, 'Failed to create key, keys must have at least one Access Rights record set.'),

  keySaveFailed: def('key_save_failed', 500, 'Failed to create key, save of the new session failed'),
  productNotFound: def('product_not_found', 404, 'Product not found'),
  productTagsFull: def('product_tags_full', 409, 'Product has as many tags as a product may have'),
  productUpdateFailed: def('product_update_failed', 500, 'Failed to add the tag'),
  apiNotFound: def('api_not_found', 404, 'API not found'),
  keyNotFound: def('key_not_found', 404, 'Key not found'),
  limitsUnavailable: def('limits_unavailable', 503, 'Could not read the limits: the session or rate-limit store is unavailable'),
  gatewaysUnavailable: def('gateways_unavailable', 503, 'Could not read the live gateways: Redis is unavailable'),
  apisUnavailable: def('apis_unavailable', 500, 'Could not retrieve APIs'),
  deleteFailed: def('delete_failed', 500, 'Delete failed'),
  reloadFailed: def('reload_failed', 500, 'Reload failed'),
} as const;

/** Thrown by handlers; `detail` completes the message (the field, the path) without changing the code. */
export class AdminError extends Error {
  readonly def: ErrorDef;
  readonly detail: string | undefined;

  constructor(errorDef: ErrorDef, detail?: string, options?: { cause?: unknown }) {
    super(detail ? `${errorDef.message}: ${detail}` : errorDef.message, options);
    this.name = 'AdminError';
    this.def = errorDef;
    this.detail = detail;
  }
}

/** The message as a client sees it. `bearerForbidden` names the path after a space, as docs/behaviour.md#authentication words it. */
export function errorMessage(error: AdminError): string {
  if (!error.detail) return error.def.message;
  const separator = error.def === adminErrors.bearerForbidden ? ' ' : ': ';
  return `${error.def.message}${separator}${error.detail}`;
}
