import { portalProductSpecSchema, PRODUCT_MAX_TAGS } from '../../crds/schemas/portal-product.ts';
import { requireSecret } from './auth.ts';
import { AdminError, adminErrors, MAX_BODY_BYTES } from './errors.ts';
import { pathId } from './params.ts';
import { readJsonBody, validBody } from './request.ts';
import type { HandlerContext, Reply } from './types.ts';

/**
 * `{Name}`: the PortalProduct's own tag schema (non-empty, bounded), only that field, and
 * no control characters (a tag is shown to people; unpaired surrogates are refused with any
 * admin body's).
 */
export const tagRequestSchema = portalProductSpecSchema.shape.tags
  .unwrap()
  .element.strict()
  .refine((tag) => !/\p{Cc}/u.test(tag.Name), {
    message: 'must not contain control characters',
    path: ['Name'],
  });

/**
 * POST /portal-api/products/{product_id}/tags (docs/behaviour.md#admin-operations). Adding a tag the product has
 * already answers the same 200 and writes nothing, so retries are safe.
 */
export async function addProductTag(ctx: HandlerContext): Promise<Reply> {
  const { req, res, deps } = ctx;
  requireSecret(req, 'authorization', deps.auth.portalSecret, adminErrors.portalKeyInvalid);
  const productId = pathId(ctx.params.product_id!, 'product_id');
  const tag = validBody(tagRequestSchema, await readJsonBody(req, res, deps.maxBodyBytes ?? MAX_BODY_BYTES)).Name;
  const outcome = await deps.resources.addProductTag(productId, tag);
  if (outcome === null) throw new AdminError(adminErrors.productNotFound);
  if (outcome === 'full') throw new AdminError(adminErrors.productTagsFull, `${PRODUCT_MAX_TAGS} tags`);
  if (outcome === 'added') ctx.log.info({ productId, tag }, 'portal product tagged');
  return { status: 200, body: { Name: tag } };
}
