import { ApiException } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { key } from '../controllers/fixtures.ts';
import { RecordingEvents } from '../controllers/fakes.ts';
import { removeFinalizer, setStatus, type FinalizerWriter } from './controllerutil.ts';

const failingWith = (code: number): FinalizerWriter => ({
  set: () => Promise.reject(new ApiException(code, 'refused', '', {})),
});

describe('removeFinalizer', () => {
  const deleting = { ...key('alice'), metadata: { ...key('alice').metadata, finalizers: ['gw.dev/key-session'], deletionTimestamp: new Date() } };

  it('is done when the object is gone already (a second reconcile of one deletion)', async () => {
    await expect(removeFinalizer(failingWith(404), 'Key', deleting, 'gw.dev/key-session')).resolves.toBeUndefined();
  });

  it('fails on any other refusal, so the reconcile retries', async () => {
    await expect(removeFinalizer(failingWith(409), 'Key', deleting, 'gw.dev/key-session')).rejects.toMatchObject({ code: 409 });
  });
});

describe('setStatus', () => {
  const refusing = (code: number) => ({ write: () => Promise.reject(new ApiException(code, 'refused', '', {})) });
  const notReady = { ready: false, reason: 'MissingPolicy', message: 'apply_policies names gold', fields: {} };

  it('writes neither status nor Event for an object deleted while it was reconciled', async () => {
    const events = new RecordingEvents();
    await expect(setStatus({ status: refusing(404), events }, 'Key', key('alice'), notReady)).resolves.toBeUndefined();
    expect(events.events).toEqual([]);
  });

  it('fails on any other refusal, so the reconcile retries', async () => {
    await expect(setStatus({ status: refusing(409), events: new RecordingEvents() }, 'Key', key('alice'), notReady)).rejects.toMatchObject({ code: 409 });
  });
});
