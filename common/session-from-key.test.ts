import { describe, expect, it } from 'vitest';
import { sessionSchema } from '../crds/session.ts';
import { sessionFromKey } from './session-from-key.ts';
import { LONGEST_QUOTA_PERIOD_SECONDS } from '../crds/quota-times.ts';

const t0 = new Date('2026-01-01T00:00:00Z');
const t1 = new Date('2026-01-02T00:00:00Z');

describe('sessionFromKey', () => {
  it('builds the session from the spec, allowance defaulting to rate, in the Key namespace', () => {
    const outcome = sessionFromKey(
      { alias: 'ci', rate: 10, per: 60, apply_policies: ['gold'], quota_max: 100, meta_data: { team: 'a' }, access_rights: { api1: { limit: { rate: 5, per: 1 } } } },
      { name: 'ci-key', namespace: 'shop' },
      null,
      t0,
    );
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    expect(outcome.changed).toBe(true);
    expect(outcome.session).toMatchObject({
      alias: 'ci',
      rate: 10,
      per: 60,
      allowance: 10,
      apply_policies: ['gold'],
      namespace: 'shop',
      quota_max: 100,
      quota_remaining: 100,
      meta_data: { team: 'a' },
      key_id: 'ci-key',
      date_created: t0.toISOString(),
      last_updated: t0.toISOString(),
    });
    expect(outcome.session.access_rights.api1).toMatchObject({ api_id: 'api1', limit: { rate: 5, per: 1 } });
  });

  it('keeps the session to what is enforced: allowance is rate, and a first period has no more left than quota_max', () => {
    const both = sessionFromKey({ rate: 5, per: 10, allowance: 1 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(both.ok && both.session).toMatchObject({ rate: 5, allowance: 5 });
    const alone = sessionFromKey({ allowance: 7 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(alone.ok && alone.session).toMatchObject({ rate: 0, allowance: 0 });
    const over = sessionFromKey({ quota_max: 3, quota_remaining: 50, quota_renewal_rate: 3600 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(over.ok && over.session.quota_remaining).toBe(3);
    // -1 (unset) starts the period full, as the limit engine counts it, and the record says so.
    const unset = sessionFromKey({ quota_max: 3, quota_remaining: -1, quota_renewal_rate: 600 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(unset.ok && unset.session.quota_remaining).toBe(3);
    const unlimited = sessionFromKey({ quota_max: -1, quota_remaining: 50 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(unlimited.ok && unlimited.session.quota_remaining).toBe(50);
  });

  it("starts a renewing quota's first period at creation, so its quota_remaining counts", () => {
    const fresh = sessionFromKey({ rate: 10, per: 60, quota_max: 10, quota_remaining: 2, quota_renewal_rate: 3600 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(fresh.ok && fresh.session).toMatchObject({ quota_remaining: 2, quota_renews: t0.getTime() / 1000 + 3600 });
    // A renewal time the spec gives is kept; a quota that never renews has none.
    const given = sessionFromKey({ rate: 10, per: 60, quota_max: 10, quota_renewal_rate: 3600, quota_renews: 1_900_000_000 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(given.ok && given.session.quota_renews).toBe(1_900_000_000);
    const never = sessionFromKey({ rate: 10, per: 60, quota_max: 10 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(never.ok && never.session.quota_renews).toBe(0);
  });

  it('takes a quota period as long as the field allows, its first period ending as the limit engine counts it', () => {
    const longest = sessionFromKey({ rate: 10, per: 60, quota_max: 10, quota_renewal_rate: Number.MAX_SAFE_INTEGER }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(longest).toMatchObject({ ok: true, session: { quota_renewal_rate: Number.MAX_SAFE_INTEGER, quota_renews: t0.getTime() / 1000 + LONGEST_QUOTA_PERIOD_SECONDS } });
  });

  it('keeps run-time fields of an existing session and only moves last_updated on change', () => {
    const existing = sessionSchema.parse({ rate: 10, per: 60, allowance: 10, quota_max: 100, quota_remaining: 42, date_created: 'then', last_updated: 'then', key_id: 'k', namespace: 'shop' });
    const same = sessionFromKey({ rate: 10, per: 60, quota_max: 100, quota_remaining: 100 }, { name: 'k', namespace: 'shop' }, existing, t1);
    expect(same).toEqual({ ok: true, session: existing, changed: false });
    const changed = sessionFromKey({ rate: 20, per: 60, quota_max: 100 }, { name: 'k', namespace: 'shop' }, existing, t1);
    expect(changed.ok && changed.session).toMatchObject({ rate: 20, allowance: 20, quota_remaining: 42, date_created: 'then', last_updated: t1.toISOString() });
    expect(changed.ok && changed.changed).toBe(true);
  });

  it('takes a field the spec no longer sets back to its default, as kubectl apply means', () => {
    const first = sessionFromKey(
      { rate: 1, per: 60, apply_policies: ['gold'], is_inactive: true, expires: 1000, meta_data: { org: 'a' }, quota_max: 5, tags: ['t'], access_rights: { api1: {} } },
      { name: 'k', namespace: 'shop' },
      null,
      t0,
    );
    if (!first.ok) throw new Error(first.message);
    const later = sessionFromKey({ alias: 'flip', access_rights: { api2: {} } }, { name: 'k', namespace: 'shop' }, first.session, t1);
    if (!later.ok) throw new Error(later.message);
    expect(later.changed).toBe(true);
    expect(later.session).toMatchObject({ alias: 'flip', rate: 0, per: 0, allowance: 0, apply_policies: [], is_inactive: false, expires: 0, meta_data: {}, quota_max: -1, tags: [] });
    expect(Object.keys(later.session.access_rights)).toEqual(['api2']);
    // Run-time fields stay: the quota's remaining count and the key's creation.
    expect(later.session).toMatchObject({ quota_remaining: 5, date_created: t0.toISOString(), key_id: 'k' });
  });

  it('carries the Key\'s uid once known, keeps it when the caller has none, and takes a new one (a Key made again)', () => {
    const stored = sessionFromKey({ rate: 1, per: 1 }, { name: 'k', namespace: 'ns' }, null, t0);
    if (!stored.ok) throw new Error(stored.message);
    expect(stored.session.key_uid).toBe('');
    const adopted = sessionFromKey({ rate: 1, per: 1 }, { name: 'k', namespace: 'ns', uid: 'u-1' }, stored.session, t1);
    expect(adopted).toMatchObject({ ok: true, changed: true, session: { key_uid: 'u-1' } });
    if (!adopted.ok) throw new Error(adopted.message);
    expect(sessionFromKey({ rate: 1, per: 1 }, { name: 'k', namespace: 'ns', uid: 'u-1' }, adopted.session, t1)).toMatchObject({ changed: false });
    expect(sessionFromKey({ rate: 1, per: 1 }, { name: 'k', namespace: 'ns' }, adopted.session, t1)).toMatchObject({ changed: false, session: { key_uid: 'u-1' } });
    expect(sessionFromKey({ rate: 1, per: 1 }, { name: 'k', namespace: 'ns', uid: 'u-2' }, adopted.session, t1)).toMatchObject({ changed: true, session: { key_uid: 'u-2' } });
  });

  it('stores smoothing only while it is on', () => {
    const on = { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 1 };
    const off = sessionFromKey({ rate: 5, per: 1, smoothing: { enabled: false }, access_rights: { a: { limit: { rate: 5, per: 1, smoothing: { ...on, enabled: false } } } } }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(off).toMatchObject({ ok: true, session: { smoothing: null, access_rights: { a: { limit: { smoothing: null } } } } });
    expect(sessionFromKey({ rate: 5, per: 1, smoothing: on }, { name: 'k', namespace: 'ns' }, null, t0)).toMatchObject({ ok: true, session: { smoothing: on } });
  });

  it('reports an invalid spec with its field instead of storing it', () => {
    const outcome = sessionFromKey({ rate: 'ten' }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(outcome).toEqual({ ok: false, message: expect.stringMatching(/^spec\.rate: /) as unknown as string });
    const pair = sessionFromKey({ rate: 5 }, { name: 'k', namespace: 'ns' }, null, t0);
    expect(pair.ok).toBe(false);
    // A rule between two fields is the spec's own: named as `spec`, not `spec.`.
    expect(sessionFromKey({ rate: 7 }, { name: 'k', namespace: 'ns' }, null, t0)).toEqual({ ok: false, message: 'spec: rate and per must be set together (or both left out)' });
    expect(sessionFromKey({ rate: 5, per: 1, is_inactve: true }, { name: 'k', namespace: 'ns' }, null, t0)).toEqual({ ok: false, message: expect.stringMatching(/^spec\.is_inactve: Key has no such field/) as unknown as string });
  });
});
