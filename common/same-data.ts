import { isDeepStrictEqual } from 'node:util';

const asJson = (value: unknown): unknown => (value === undefined ? undefined : JSON.parse(JSON.stringify(value)));

/**
 * Whether two values are the same JSON document. Key order and undefined fields do not
 * count: the API server answers with every object's keys sorted, so comparing the
 * serialised text would find a status the operator wrote "changed" on every reconcile.
 */
export const sameData = (a: unknown, b: unknown): boolean => isDeepStrictEqual(asJson(a), asJson(b));
