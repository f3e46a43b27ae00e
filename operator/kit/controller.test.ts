import { ApiException } from '@kubernetes/client-node';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { KindName } from '../../crds/kinds.ts';
import { MemorySource } from '../controllers/fakes.ts';
import { OperatorMetrics } from '../runtime/metrics.ts';
import { Controller, type KindController } from './controller.ts';
import { LeaseLapsedError, TerminalError, type Request, type Result } from './reconciler.ts';
import { forObjects } from './watch.ts';

const until = async (condition: () => boolean, timeoutMs = 2_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
};
const settle = (ms = 30): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const thing = (name: string) => ({ metadata: { namespace: 'ns', name } });

function harness(reconcile: (request: Request, signal: AbortSignal) => Promise<Result | void>, timeoutMs = 1_000, mayReconcile?: () => boolean) {
  const source = new MemorySource<ReturnType<typeof thing>>();
  const metrics = new OperatorMetrics(() => ({}), false);
  const reconciler: KindController = { kind: 'Category' satisfies KindName, watches: [forObjects(source)], reconcile };
  const logged: Record<string, unknown>[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void logged.push(JSON.parse(line) as Record<string, unknown>) });
  const controller = new Controller(reconciler, { concurrency: 2, baseDelayMs: 20, maxDelayMs: 60_000, timeoutMs, mayReconcile }, metrics, log);
  const counts = async () => (await metrics.reconciles.get()).values.map((v) => `${v.labels.result}=${v.value}`).sort();
  return { source, controller, counts, logged };
}

describe('Controller', () => {
  it('counts reconciles by result, and its resync skips items reconciled within the period', async () => {
    const runs: string[] = [];
    const { source, controller, counts, logged } = harness(async ({ name }) => {
      runs.push(name);
      if (name === 'bad') throw new TerminalError('boom');
    });
    ['a', 'b', 'bad'].forEach((name) => source.put(thing(name)));
    controller.start();
    await settle();
    expect(runs.sort()).toEqual(['a', 'b', 'bad']);
    expect(await counts()).toEqual(['error=1', 'success=2']);
    // A terminal error is the object's input, which its status names: a warning with the reason, no stack.
    expect(logged).toEqual([expect.objectContaining({ level: 40, object: 'ns/bad', reason: 'boom', msg: 'reconcile failed; not retried until the object changes' })]);
    expect(logged[0]).not.toHaveProperty('err');

    // 'bad' has no success to be fresh from; a and b reconciled just now.
    runs.length = 0;
    controller.resync(10_000);
    await settle();
    expect(runs).toEqual(['bad']);
    // Failing the same way at the resync: not a second warning.
    expect(logged).toHaveLength(1);

    runs.length = 0;
    controller.resync(0);
    await settle();
    expect(runs.sort()).toEqual(['a', 'b', 'bad']);
    await controller.stop();
  });

  it('spreads a resync over its spread in even slices, and a stop ends the slices still to come', async () => {
    const runs: string[] = [];
    const { source, controller } = harness(async ({ name }) => void runs.push(name));
    const names = Array.from({ length: 10 }, (_, i) => `item-${i}`);
    names.forEach((name) => source.put(thing(name)));
    controller.start();
    await until(() => runs.length === 10);

    // 10 items over 500 ms: 5 slices of 2, one every 100 ms, so the last starts 400 ms in.
    runs.length = 0;
    const started = Date.now();
    controller.resync(0, 500);
    await until(() => runs.length === 10, 2_000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    expect(runs.sort()).toEqual([...names].sort());

    runs.length = 0;
    controller.resync(0, 1_000);
    await until(() => runs.length >= 1);
    await controller.stop();
    const ranBeforeStop = runs.length;
    await settle(300);
    expect(runs).toHaveLength(ranBeforeStop);
    expect(ranBeforeStop).toBeLessThan(10);
  });

  it('postpones its resync while items wait for a worker', async () => {
    const runs: string[] = [];
    let release = (): void => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const { source, controller } = harness(async ({ name }) => {
      runs.push(name);
      if (name.startsWith('slow')) await gate;
    });
    source.put(thing('done'));
    controller.start();
    await until(() => runs.includes('done'));
    // Two slow items hold both workers; a third waits behind them.
    ['slow-1', 'slow-2', 'waiting'].forEach((name) => source.put(thing(name)));
    await until(() => runs.length === 3);
    controller.resync(0);
    release();
    await until(() => runs.length === 4);
    await settle();
    expect(runs.sort()).toEqual(['done', 'slow-1', 'slow-2', 'waiting']);

    // Nothing waits now: the same resync queues everything again.
    controller.resync(0);
    await until(() => runs.length === 8);
    await controller.stop();
  });

  it('enqueues watched changes only while started', async () => {
    const runs: string[] = [];
    const { source, controller } = harness(async ({ name }) => void runs.push(name));
    source.put(thing('before-start'));
    await settle();
    expect(runs).toEqual([]);
    controller.start();
    source.put(thing('while-running'));
    await until(() => runs.length === 2);
    await controller.stop();
    source.put(thing('after-stop'));
    await settle();
    expect(runs.sort()).toEqual(['before-start', 'while-running']);
  });

  it('reconciles nothing while the lease is not known to be held, and everything put off once it is', async () => {
    const runs: string[] = [];
    let held = false;
    const { source, controller, counts } = harness(async ({ name }) => void runs.push(name), 1_000, () => held);
    source.put(thing('a'));
    source.put(thing('b'));
    controller.start();
    await settle(100);
    expect(runs).toEqual([]);
    expect(await counts()).toEqual([]);
    held = true;
    await until(() => runs.length === 2, 2_000);
    expect(runs.sort()).toEqual(['a', 'b']);
    expect(await counts()).toEqual(['success=2']);
    await controller.stop();
  });

  it('puts off, uncounted and unlogged as a failure, a reconcile whose write found the lease lapsed', async () => {
    let calls = 0;
    const { source, controller, counts, logged } = harness(async () => {
      calls += 1;
      if (calls === 1) throw new LeaseLapsedError('not written');
    });
    source.put(thing('a'));
    controller.start();
    await until(() => calls === 2, 2_000);
    expect(await counts()).toEqual(['success=1']);
    expect(logged.filter((line) => line.level === 40)).toEqual([]);
    await controller.stop();
  });

  it('logs a failure with its stack once, and its retries failing the same way only at debug', async () => {
    const runs: string[] = [];
    const { source, controller, logged } = harness(async ({ name }) => {
      runs.push(name);
      if (runs.length <= 3) throw new Error('Redis is not connected');
      if (runs.length === 4) throw new Error('another cause');
    });
    source.put(thing('a'));
    controller.start();
    await until(() => runs.length === 5);
    const warnings = logged.filter((line) => line.level === 40);
    expect(warnings.map((line) => (line.err as { message: string }).message)).toEqual(['Redis is not connected', 'another cause']);
    expect(warnings[0]!.err).toHaveProperty('stack');
    await controller.stop();
  });

  it('logs an API server refusal once at warn by its code and Status message, though each response has its own headers', async () => {
    const runs: string[] = [];
    const status = JSON.stringify({ kind: 'Status', code: 422, reason: 'Invalid', message: 'ConfigMap "gw-api-a" is invalid: data: Too long' });
    const { source, controller, logged } = harness(async ({ name }) => {
      runs.push(name);
      throw new ApiException(422, `HTTP-Code: 422\nMessage: Unknown API Status Code!\nBody: ${status}\nHeaders: {"audit-id":"${runs.length}"}`, status, { 'audit-id': String(runs.length) });
    });
    source.put(thing('a'));
    controller.start();
    await until(() => runs.length === 4);
    const warnings = logged.filter((line) => line.level === 40);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ reason: '422 Unprocessable Entity: ConfigMap "gw-api-a" is invalid: data: Too long' });
    expect(warnings[0]).not.toHaveProperty('err');
    await controller.stop();
  });

  it('does not retry a write its namespace refused as being deleted', async () => {
    const runs: string[] = [];
    const terminating = new ApiException(403, 'Forbidden', JSON.stringify({ kind: 'Status', reason: 'Forbidden', code: 403, details: { causes: [{ reason: 'NamespaceTerminating', message: 'namespace ns is being terminated' }] } }), {});
    const { source, controller, counts, logged } = harness(async ({ name }) => {
      runs.push(name);
      throw terminating;
    });
    source.put(thing('a'));
    controller.start();
    await until(() => runs.length === 1);
    await settle(300);
    expect(runs).toHaveLength(1);
    expect(await counts()).toEqual(['error=1']);
    expect(logged.filter((line) => line.level === 40)).toEqual([]);
    await controller.stop();
  });

  it('brings an object back after the requeueAfterMs its reconcile returned', async () => {
    const times: number[] = [];
    const { source, controller } = harness(async () => {
      times.push(Date.now());
      return times.length === 1 ? { requeueAfterMs: 80 } : undefined;
    });
    source.put(thing('a'));
    controller.start();
    await until(() => times.length === 2);
    expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(75);
    await settle(150);
    expect(times).toHaveLength(2);
    await controller.stop();
  });

  it('retries an error with backoff but not a terminal error', async () => {
    const runs: string[] = [];
    const { source, controller, counts } = harness(async ({ name }) => {
      runs.push(name);
      if (name === 'flaky' && runs.filter((r) => r === 'flaky').length < 3) throw new Error('not yet');
      if (name === 'broken') throw new TerminalError('cannot be fixed by retrying');
    });
    source.put(thing('flaky'));
    source.put(thing('broken'));
    controller.start();
    await until(() => runs.filter((r) => r === 'flaky').length === 3);
    await settle(200);
    expect(runs.filter((r) => r === 'broken')).toHaveLength(1);
    expect(await counts()).toEqual(['error=3', 'success=1']);
    expect(controller.depth()).toBe(0);
    await controller.stop();
  });

  it('abandons a reconcile past its time limit, aborting its signal, so stopping does not wait for it', async () => {
    let signal: AbortSignal | undefined;
    const { source, controller, counts } = harness((_request, s) => {
      signal = s;
      return new Promise(() => undefined);
    }, 50);
    source.put(thing('stuck'));
    controller.start();
    await until(() => signal?.aborted === true);
    const stopped = Date.now();
    await controller.stop();
    expect(Date.now() - stopped).toBeLessThan(500);
    expect(await counts()).toEqual(['error=1']);
  });
});
