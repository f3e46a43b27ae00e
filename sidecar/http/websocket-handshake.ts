import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/** RFC 6455 §1.3: the GUID a server appends to the client's key to prove it read the handshake. */
const HANDSHAKE_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

/** The headers name WebSocket as the upgrade: the one upgrade the proxy listener carries (docs/behaviour.md#gateway-answers). */
export const upgradesToWebSocket = (headers: IncomingHttpHeaders): boolean => /^websocket$/i.test(String(headers.upgrade ?? ''));

/** The `Sec-WebSocket-Accept` an upstream that took the client's handshake answers with; null without a key. */
export function expectedWebSocketAccept(requestHeaders: IncomingHttpHeaders): string | null {
  const key = requestHeaders['sec-websocket-key'];
  if (typeof key !== 'string' || key === '') return null;
  return createHash('sha1').update(key + HANDSHAKE_GUID).digest('base64');
}

/**
 * The upstream's 101 completes the client's WebSocket handshake, as RFC 6455 §4.1 has a client
 * check before it sends anything over the connection. Any other 101 would switch the client's
 * connection to a raw byte stream the upstream reads as it likes, so that what the client sends
 * next reaches the upstream with no route, auth or limit of the gateway's (docs/behaviour.md#gateway-answers).
 */
export function completesWebSocketHandshake(statusCode: number | undefined, headers: IncomingHttpHeaders, expectedAccept: string | null): boolean {
  if (statusCode !== 101 || expectedAccept === null) return false;
  if (!upgradesToWebSocket(headers)) return false;
  if (!String(headers.connection ?? '').split(',').some((token) => token.trim().toLowerCase() === 'upgrade')) return false;
  return headers['sec-websocket-accept'] === expectedAccept;
}
