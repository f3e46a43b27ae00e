import type { IncomingMessage } from 'node:http';
import { gatewayErrors, type GatewayError } from './errors.ts';

/** A request-target in absolute-form: its authority, and the rest (path, query) from the first `/`, `?` or `#`. */
const absoluteForm = /^https?:\/\/([^/?#]*)(.*)$/is;

/**
 * What every listener requires of a request's Host and request-target (RFC 9112 §3.2 and
 * §3.2.2): an HTTP/1.1 request carries exactly one Host header, and a target in absolute-form
 * (`GET http://host/path`, which a server must accept) is served as the origin-form path it
 * names, its authority standing for the Host. Returns the refusal, or null with `req.url` and
 * `req.headers.host` in origin form. Any other target (`*`) is left to routing, which finds no
 * API for it.
 */
export function refusedTarget(req: IncomingMessage): GatewayError | null {
  let hosts = 0;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++;
  }
  if (hosts > 1 || (hosts === 0 && req.httpVersion === '1.1')) return gatewayErrors.badHost;
  const url = req.url ?? '/';
  if (url.startsWith('/')) return null;
  const absolute = absoluteForm.exec(url);
  if (absolute === null) return null;
  const [, authority = '', rest = ''] = absolute;
  // An empty host, or a user's name and password in the URI (deprecated, and a way to
  // disguise the host a request goes to), are invalid (RFC 9110 §4.2.1, §4.2.4).
  if (authority === '' || authority.includes('@')) return gatewayErrors.badTarget;
  req.url = rest.startsWith('/') ? rest : `/${rest}`;
  req.headers.host = authority;
  return null;
}
