import { describe, expect, it } from 'vitest';
import { IpcCallError, IpcPeer } from './ipc.ts';

type Methods = { double: { params: number; result: number }; fail: { params: undefined; result: undefined } };

/** Two peers joined as the IPC channel joins a primary and a worker (asynchronously, as messages go). */
function pair(): { a: IpcPeer<Methods, Methods>; b: IpcPeer<Methods, Methods>; notices: unknown[]; cut: () => void } {
  const notices: unknown[] = [];
  let connected = true;
  const handlers = {
    double: (n: number) => n * 2,
    fail: () => {
      throw new Error('refused');
    },
  };
  const link = (to: () => IpcPeer<Methods, Methods>) => (message: unknown) => {
    if (!connected) throw new Error('channel closed');
    setImmediate(() => to().receive(message));
  };
  const a: IpcPeer<Methods, Methods> = new IpcPeer<Methods, Methods>(link(() => b), handlers, { started: () => notices.push('started') });
  const b: IpcPeer<Methods, Methods> = new IpcPeer<Methods, Methods>(link(() => a), handlers);
  return { a, b, notices, cut: () => (connected = false) };
}

describe('IpcPeer', () => {
  it('answers a call with the handler result, and many calls each with its own', async () => {
    const { a, b } = pair();
    expect(await Promise.all([a.call('double', 2, 1000), b.call('double', 21, 1000), a.call('double', 5, 1000)])).toEqual([4, 42, 10]);
  });

  it('fails a call with the error the other side threw, or with a method it does not serve', async () => {
    const { a } = pair();
    await expect(a.call('fail', undefined, 1000)).rejects.toThrow(new IpcCallError('refused'));
    await expect(a.call('missing' as 'fail', undefined, 1000)).rejects.toThrow('no method missing');
  });

  it('fails a call at its timeout when no answer comes, and at once when the channel is closed', async () => {
    const silent = new IpcPeer<Methods, Methods>(() => undefined, { double: (n) => n, fail: () => undefined });
    await expect(silent.call('double', 1, 20)).rejects.toThrow('double: no answer within 20 ms');
    const pending = silent.call('double', 1, 60_000);
    silent.close('the primary is gone');
    await expect(pending).rejects.toThrow('the primary is gone');
    const { a, cut } = pair();
    cut();
    await expect(a.call('double', 1, 60_000)).rejects.toThrow('double: channel closed');
  });

  it('delivers notices, and ignores messages that are not its own (prom-client shares the channel)', async () => {
    const { a, b, notices } = pair();
    b.notify('started', undefined);
    a.receive({ type: 'prom-client:getMetricsReq', requestId: 1 });
    a.receive(null);
    await new Promise((r) => setImmediate(r));
    expect(notices).toEqual(['started']);
  });

  it("hands a call's late answer to its `late` handler, once, and nothing else's", async () => {
    // The answering side holds its answers until let go, as a primary stopped a while would.
    const held: Array<() => void> = [];
    const caller: IpcPeer<Methods, Methods> = new IpcPeer<Methods, Methods>((message) => held.push(() => answering.receive(message)), { double: (n) => n, fail: () => undefined });
    const answering: IpcPeer<Methods, Methods> = new IpcPeer<Methods, Methods>((message) => setImmediate(() => caller.receive(message)), { double: (n) => n * 2, fail: () => undefined });
    const late: number[] = [];
    await expect(caller.call('double', 21, 20, (result) => late.push(result))).rejects.toThrow('double: no answer within 20 ms');
    await expect(caller.call('double', 5, 20)).rejects.toThrow('no answer within 20 ms');
    for (const deliver of held.splice(0)) deliver();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(late).toEqual([42]);
    // A late answer comes once: the same reply again is ignored.
    caller.receive({ gw: 'reply', id: 0, result: 42 });
    expect(late).toEqual([42]);
  });
});
