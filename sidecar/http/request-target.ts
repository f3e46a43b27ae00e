import type { IncomingMessage } from 'node:http';
import { gatewayErrors, type GatewayError } from './errors.ts';

/** A request-target in absolute-form: its authority, and the rest (path, query) from the first `/`, `?` or `#`. */
const absoluteForm = /^https?:\/\/([^/?#]*)(.*)$/is;

/** A dot segment (`.`, `..`, either escaped) followed by parameters: `/public/..;/admin`. */
const dotSegmentWithParameters = /(?:^|[/\\])(?:\.|%2e){1,2};/i;

/**
 * True when the path holds a dot segment with parameters. The gateway resolves dot segments
 * before it matches a path, and keeps `..;x` as a name; servers that drop a segment's
 * parameters first (Tomcat, Jetty) read it as `..`, so `/public/..;/admin` would pass a no-auth
 * `/public/.*` rule and be served as `/admin`. No client needs one, so it is refused.
 */
function hasDotSegmentWithParameters(url: string): boolean {
  if (!url.includes(';')) return false;
  const end = url.search(/[?#]/);
  return dotSegmentWithParameters.test(end === -1 ? url : url.slice(0, end));
}

function hostHeaders(raw: readonly string[]): number {
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++;
  }
  return hosts;
}

/**
 * What every listener requires of a request's Host and request-target (RFC 9112 §3.2 and
 * §3.2.2): an HTTP/1.1 request carries exactly one Host header, and a target in absolute-form
 * (`GET http://host/path`, which a server must accept) is served as the origin-form path it
 * names, its authority standing for the Host; and no path holds a dot segment with
 * parameters. Returns the refusal, or null with `req.url` and `req.headers.host` in origin form.
 * Any other target (`*`) is left to routing, which finds no API for it.
 */
export function refusedTarget(req: IncomingMessage): GatewayError | null {
  const hosts = hostHeaders(req.rawHeaders);
  if (hosts > 1 || (hosts === 0 && req.httpVersion === '1.1')) return gatewayErrors.badHost;
  const url = req.url ?? '/';
  if (url.startsWith('/')) return hasDotSegmentWithParameters(url) ? gatewayErrors.badPath : null;
  const absolute = absoluteForm.exec(url);
  if (absolute === null) return null;
  const [, authority = '', rest = ''] = absolute;
  // An empty host, or a user's name and password in the URI (deprecated, and a way to
  // disguise the host a request goes to), are invalid (RFC 9110 §4.2.1, §4.2.4).
  if (authority === '' || authority.includes('@')) return gatewayErrors.badTarget;
  req.url = rest.startsWith('/') ? rest : `/${rest}`;
  req.headers.host = authority;
  return hasDotSegmentWithParameters(req.url) ? gatewayErrors.badPath : null;
}
