import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { KubeEventRecorder } from '../../../operator/runtime/event-recorder.ts';
import { createNamespace, kubeConfig, kubectl } from '../../harness/index.ts';
import { eventually, quietLogger } from '../sidecar/helpers.ts';

interface CoreEvent {
  reason: string;
  type: string;
  message: string;
  action: string;
  reportingComponent: string;
  reportingInstance: string;
  involvedObject: { kind: string; name: string; uid?: string };
  series?: { count: number };
}

async function eventsIn(namespace: string): Promise<CoreEvent[]> {
  const res = await kubectl(['get', 'events', '-n', namespace, '-o', 'json']);
  expect(res.code, res.stderr).toBe(0);
  return (JSON.parse(res.stdout) as { items: CoreEvent[] }).items;
}

describe('operator Events (events.k8s.io/v1, as kubectl get events shows them)', () => {
  let recorder: KubeEventRecorder | undefined;
  afterEach(async () => {
    await recorder?.close();
  });

  it('one Event per repeated failure, whose series counts the retries; another message is another Event', async () => {
    const namespace = await createNamespace('op-events');
    recorder = new KubeEventRecorder(kubeConfig(), 'operator-pod-a', quietLogger);
    const policy = { apiVersion: 'gw.dev/v1alpha1', kind: 'Policy', metadata: { name: 'orphan', namespace, uid: '5d1b0c7e-2222-4333-8444-955566667777' } };
    recorder.record(policy, 'Warning', 'MissingApi', 'access_rights names api "gone", which does not exist');
    await eventually(async () => (await eventsIn(namespace)).length === 1, 10_000, 'first event');
    recorder.record(policy, 'Warning', 'MissingApi', 'access_rights names api "gone", which does not exist');
    recorder.record(policy, 'Warning', 'MissingApi', 'access_rights names api "gone", which does not exist');
    recorder.record(policy, 'Normal', 'Ready', 'compiled into 1 API');
    await eventually(async () => (await eventsIn(namespace)).some((e) => e.series?.count === 3), 10_000, 'series of 3');
    const events = await eventsIn(namespace);
    expect(events).toHaveLength(2);
    expect(events.find((e) => e.reason === 'MissingApi')).toMatchObject({
      type: 'Warning',
      action: 'Reconcile',
      message: 'access_rights names api "gone", which does not exist',
      reportingComponent: 'gw.dev/operator',
      reportingInstance: 'operator-pod-a',
      involvedObject: { kind: 'Policy', name: 'orphan', uid: policy.metadata.uid },
      series: { count: 3 },
    });
    expect(events.find((e) => e.reason === 'Ready')).toMatchObject({ type: 'Normal', message: 'compiled into 1 API' });
  });

  it('a note beyond 1,024 bytes of UTF-8 is cut on a character boundary, not refused', async () => {
    const namespace = await createNamespace('op-events');
    recorder = new KubeEventRecorder(kubeConfig(), 'operator-pod-a', quietLogger);
    const api = { apiVersion: 'gw.dev/v1alpha1', kind: 'ApiDefinition', metadata: { name: 'accents', namespace, uid: '5d1b0c7e-2222-4333-8444-955566667778' } };
    recorder.record(api, 'Warning', 'InvalidRegex', `invalid regex ${'é'.repeat(900)}`);
    await eventually(async () => (await eventsIn(namespace)).length === 1, 10_000, 'the event');
    const [event] = await eventsIn(namespace);
    expect(Buffer.byteLength(event!.message)).toBeLessThanOrEqual(1024);
    expect(event!.message).toBe(`invalid regex ${'é'.repeat(505)}`);
  });

  it('an Event refused because its namespace is being deleted is logged at debug, not warned about', async () => {
    const namespace = await createNamespace('op-events');
    // The harness runs no namespace controller: the namespace stays Terminating, refusing writes.
    expect((await kubectl(['delete', 'namespace', namespace, '--wait=false'])).code).toBe(0);
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => lines.push(JSON.parse(line) as { level: number; msg: string }) });
    recorder = new KubeEventRecorder(kubeConfig(), 'operator-pod-a', logger);
    const key = { apiVersion: 'gw.dev/v1alpha1', kind: 'Key', metadata: { name: 'k1', namespace, uid: '5d1b0c7e-2222-4333-8444-955566667779' } };
    recorder.record(key, 'Normal', 'Deleted', 'session removed');
    const notWritten = (): { level: number }[] => lines.filter((line) => line.msg === 'Event not written');
    await eventually(async () => notWritten().length === 1, 10_000, 'the refused write');
    await recorder.close();
    expect(notWritten().map((line) => line.level)).toEqual([pino.levels.values.debug]);
  });
});
