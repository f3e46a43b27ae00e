/** What ranks one of several resources claiming one id (a product_id, an api_id). */
export interface Claimant {
  namespace: string | undefined;
  name: string;
  /** When it was created, in ms (`metadata.creationTimestamp`); null where there is none (a folder's YAML). */
  createdMs: number | null;
}

/** What finding a PortalProduct by a tag path's `product_id` reads of it. */
export interface ProductAddress extends Claimant {
  /** `spec.id`, when the product gives one. */
  id: string | null;
}

/** `metadata.creationTimestamp` in ms, as an informer (a Date) or a list's JSON (a string) gives it. */
export const createdMsOf = (created: string | Date | undefined): number | null => {
  if (created === undefined) return null;
  const ms = new Date(created).getTime();
  return Number.isNaN(ms) ? null : ms;
};

/**
 * Whether `a` holds an id `b` claims too: the older, then by namespace, then name (code-unit
 * order), as the compile step settles an api_id between ApiDefinitions (`DuplicateApiId`).
 */
export const claimsBefore = (a: Claimant, b: Claimant): boolean => {
  if (a.createdMs !== null && b.createdMs !== null && a.createdMs !== b.createdMs) return a.createdMs < b.createdMs;
  const [an, bn] = [a.namespace ?? '', b.namespace ?? ''];
  return an === bn ? a.name < b.name : an < bn;
};

/**
 * The product a tag path's `product_id` names (README.md#admin-operations, Tags): the one whose
 * `spec.id` it is, else the one of that `metadata.name`, so a product whose id is another's
 * name is still reachable by its id. Ties go to the oldest, then the first by namespace and
 * name, whatever order a list came in (as for `DuplicateApiId` and `DuplicateKeyHash`): every
 * gateway tags the same product, a product applied later never takes an id's tags from the one
 * that had them, and the operator tells the others that they are not reached
 * (`DuplicateProductId`).
 */
export function productNamed<T>(items: readonly T[], productId: string, view: (item: T) => ProductAddress | null): T | undefined {
  let byId: { item: T; address: ProductAddress } | undefined;
  let byName: { item: T; address: ProductAddress } | undefined;
  for (const item of items) {
    const address = view(item);
    if (address === null) continue;
    if (address.id === productId && (byId === undefined || claimsBefore(address, byId.address))) byId = { item, address };
    if (address.name === productId && (byName === undefined || claimsBefore(address, byName.address))) byName = { item, address };
  }
  return (byId ?? byName)?.item;
}
