/**
 * Whether a Policy's limits cover an API: its `access_rights` name it, or it has none, and then
 * covers every API a key applying it may call (docs/behaviour.md#several-policies-on-one-key).
 * Access itself comes from a grant that names the API: the key's own, or such a Policy's.
 */
export const policyCoversApi = (accessRights: Readonly<Record<string, unknown>>, apiId: string): boolean =>
  Object.hasOwn(accessRights, apiId) || Object.keys(accessRights).length === 0;

/** The index value under which Policies without `access_rights` are found: no api_id can be it (crds/schemas/common.ts idPattern). */
export const EVERY_API = '*';
