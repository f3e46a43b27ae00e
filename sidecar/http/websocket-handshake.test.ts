import { describe, expect, it } from 'vitest';
import { completesWebSocketHandshake, expectedWebSocketAccept } from './websocket-handshake.ts';

// RFC 6455 §1.3's worked example.
const KEY = 'dGhlIHNhbXBsZSBub25jZQ==';
const ACCEPT = 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=';

describe('WebSocket handshake', () => {
  it('computes the accept value of RFC 6455 §1.3, and none without a key', () => {
    expect(expectedWebSocketAccept({ 'sec-websocket-key': KEY })).toBe(ACCEPT);
    expect(expectedWebSocketAccept({})).toBeNull();
    expect(expectedWebSocketAccept({ 'sec-websocket-key': '' })).toBeNull();
  });

  it('takes a 101 that upgrades to websocket with the accept value, header case and token lists as RFC 9110 allows', () => {
    expect(completesWebSocketHandshake(101, { upgrade: 'websocket', connection: 'Upgrade', 'sec-websocket-accept': ACCEPT }, ACCEPT)).toBe(true);
    expect(completesWebSocketHandshake(101, { upgrade: 'WebSocket', connection: 'keep-alive, upgrade', 'sec-websocket-accept': ACCEPT }, ACCEPT)).toBe(true);
  });

  it('refuses any other 101: another protocol, no Connection upgrade, a wrong or missing accept, no client key', () => {
    const good = { upgrade: 'websocket', connection: 'Upgrade', 'sec-websocket-accept': ACCEPT };
    expect(completesWebSocketHandshake(200, good, ACCEPT)).toBe(false);
    expect(completesWebSocketHandshake(101, { ...good, upgrade: 'h2c' }, ACCEPT)).toBe(false);
    expect(completesWebSocketHandshake(101, { ...good, upgrade: undefined }, ACCEPT)).toBe(false);
    expect(completesWebSocketHandshake(101, { ...good, connection: 'keep-alive' }, ACCEPT)).toBe(false);
    expect(completesWebSocketHandshake(101, { ...good, 'sec-websocket-accept': 'x' + ACCEPT.slice(1) }, ACCEPT)).toBe(false);
    expect(completesWebSocketHandshake(101, { upgrade: 'websocket', connection: 'Upgrade' }, ACCEPT)).toBe(false);
    expect(completesWebSocketHandshake(101, good, null)).toBe(false);
  });
});
