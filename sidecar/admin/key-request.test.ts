import { describe, expect, it } from 'vitest';
import { AdminError } from './errors.ts';
import { keySpecOf } from './key-request.ts';

const hash = 'a'.repeat(64);

function refusal(body: unknown): string {
  try {
    keySpecOf(body, hash);
  } catch (error) {
    expect(error).toBeInstanceOf(AdminError);
    expect((error as AdminError).def.status).toBe(400);
    return (error as AdminError).message;
  }
  throw new Error('accepted');
}

describe('create-key request', () => {
  it('accepts every request field of the create-key body and adds the hash', () => {
    const body = {
      alias: 'mobile',
      allowance: 10,
      apply_policies: ['gold'],
      enable_detailed_recording: true,
      expires: 1_900_000_000,
      hmac_enabled: false,
      is_inactive: false,
      meta_data: { team: 'a', nested: { x: 1, list: [{ y: 2 }] } },
      org_id: 'org1',
      per: 60,
      quota_max: 1000,
      quota_remaining: 900,
      quota_renewal_rate: 3600,
      quota_renews: 1_900_000_000,
      rate: 10,
      tags: ['t1'],
      throttle_interval: 1,
      throttle_retry_limit: 2,
    };
    expect(keySpecOf(body, hash)).toEqual({ ...body, key_hash: hash });
  });

  it.each([
    ['rate as a string', { rate: '10', per: 60 }, 'rate'],
    ['fractional per', { rate: 10, per: 1.5 }, 'per'],
    ['negative allowance', { allowance: -1 }, 'allowance'],
    ['expires as a date string', { expires: '2030-01-01' }, 'expires'],
    ['tags not an array', { tags: 'a' }, 'tags'],
    ['tag not a string', { tags: [1] }, 'tags.0'],
    ['meta_data an array', { meta_data: [] }, 'meta_data'],
    ['a rate_limit_pattern that is a number', { apply_policies: ['gold'], meta_data: { rate_limit_pattern: 123 } }, 'meta_data.rate_limit_pattern'],
    ['a rate_limit_pattern that is a list', { apply_policies: ['gold'], meta_data: { rate_limit_pattern: ['$gw_meta.org'] } }, 'meta_data.rate_limit_pattern'],
    ['a meta_data field name over 253 characters', { apply_policies: ['gold'], meta_data: { ['f'.repeat(254)]: 1 } }, '<=253'],
    ['meta_data of more than 256 fields', { apply_policies: ['gold'], meta_data: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`f${i}`, i])) }, 'meta_data: at most 256 fields'],
    ['meta_data of more than 64 KiB', { apply_policies: ['gold'], meta_data: { notes: 'n'.repeat(64 * 1024) } }, 'meta_data: at most 65536 bytes as JSON'],
    ['is_inactive as a string', { is_inactive: 'true' }, 'is_inactive'],
    ['null alias', { alias: null }, 'alias'],
    ['unknown field', { rate: 1, per: 1, raw_key: 'x' }, 'raw_key'],
    ['unknown field of an access right', { access_rights: { pets: { api_id: 'pets', endpoints: [] } } }, 'access_rights.pets.endpoints: unknown field'],
    ['unknown field of a per-API limit', { access_rights: { pets: { limit: { rate: 1, per: 1, burst: 2 } } } }, 'access_rights.pets.limit.burst: unknown field'],
    ['unknown field of smoothing', { apply_policies: ['gold'], smoothing: { enabled: true, threshold: 1, step: 1, trigger: 0.5, delay: 1, floor: 0 } }, 'smoothing.floor: unknown field'],
    ['a __proto__ field', JSON.parse('{"apply_policies":["gold"],"__proto__":{"rate":1}}') as unknown, '__proto__'],
    ['key_hash smuggled in', { key_hash: 'b'.repeat(64) }, 'key_hash'],
    ['rate without per', { rate: 10 }, 'rate and per'],
    ['rate with per 0', { rate: 10, per: 0 }, 'per'],
    ['smoothing threshold above rate', { rate: 5, per: 1, smoothing: { enabled: true, threshold: 6, step: 1, trigger: 0.5, delay: 1 } }, 'threshold'],
    ['enabled smoothing without its numbers', { rate: 5, per: 1, smoothing: { enabled: true } }, 'smoothing.threshold'],
  ])('refuses %s naming the field', (_label, body, field) => {
    expect(refusal(body)).toContain(field);
  });

  it.each([
    ['throttle_interval', 3_600],
    ['throttle_retry_limit', 1_000],
    ['rate', 2_147_483_647],
    ['per', 31_536_000],
  ])('refuses a %s far beyond its bound naming that bound, not the safe-integer one', (field, max) => {
    const message = refusal({ apply_policies: ['gold'], rate: 1, per: 1, [field]: 1e300 });
    expect(message).toContain(field);
    expect(message).toContain(`<=${max}`);
  });

  it.each([
    ['an empty body', {}],
    ['empty apply_policies and access_rights', { rate: 1, per: 1, apply_policies: [], access_rights: {} }],
  ])('refuses a key that grants no API: %s', (_label, body) => {
    expect(refusal(body)).toBe('Failed to create key, keys must have at least one Access Rights record set.');
  });

  it.each([
    ['a policy', { apply_policies: ['gold'] }],
    ['an access right', { access_rights: { pets: {} } }],
  ])('accepts a key granted by %s alone', (_label, body) => {
    expect(keySpecOf(body, hash)).toEqual({ ...body, key_hash: hash });
  });

  it.each([[[]], [null], ['x'], [3]])('refuses a body that is not an object: %j', (body) => {
    expect(refusal(body)).toContain('expected object');
  });
});
