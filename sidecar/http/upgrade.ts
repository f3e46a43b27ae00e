import type { IncomingMessage } from 'node:http';

/** The request offers an upgrade to WebSocket: the one upgrade the proxy listener carries (docs/behaviour.md#gateway-answers). */
export const offersWebSocket = (req: IncomingMessage): boolean => /^websocket$/i.test(String(req.headers.upgrade ?? ''));
