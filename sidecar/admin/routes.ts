import { allCategories, apiCategories } from './categories.ts';
import { createKey } from './create-key.ts';
import { adminErrors } from './errors.ts';
import { deleteApi, reload } from './gateway-apis.ts';
import { liveGatewaysRead } from './gateways.ts';
import { keyLimits } from './key-limits.ts';
import { addProductTag } from './portal-tags.ts';
import { splitPath as segments } from './router.ts';
import type { Route } from './types.ts';

/** The admin listener's operations (docs/behaviour.md#admin-operations) and the gateway reload (docs/behaviour.md#api-states). */
export const adminRoutes: readonly Route[] = [
  {
    method: 'POST',
    segments: segments('/admin/org/keys'),
    operation: 'create_key',
    shape: 'dashboard',
    failure: adminErrors.keySaveFailed,
    handle: createKey,
  },
  {
    method: 'POST',
    segments: segments('/portal-api/products/:product_id/tags'),
    operation: 'add_product_tag',
    shape: 'portal',
    failure: adminErrors.productUpdateFailed,
    handle: addProductTag,
  },
  {
    method: 'GET',
    segments: segments('/api/apis/oas/:apiId/categories'),
    operation: 'api_categories',
    shape: 'dashboard',
    failure: adminErrors.apisUnavailable,
    handle: apiCategories,
  },
  {
    method: 'GET',
    segments: segments('/api/apis/categories'),
    operation: 'all_categories',
    shape: 'dashboard',
    failure: adminErrors.apisUnavailable,
    handle: allCategories,
  },
  {
    method: 'DELETE',
    segments: segments('/gw/apis/:apiID'),
    operation: 'delete_api',
    shape: 'gateway',
    failure: adminErrors.deleteFailed,
    handle: deleteApi,
  },
  {
    method: 'GET',
    segments: segments('/gw/keys/:keyHash/limits'),
    operation: 'key_limits',
    shape: 'gateway',
    failure: adminErrors.limitsUnavailable,
    handle: keyLimits,
  },
  {
    method: 'GET',
    segments: segments('/gw/gateways'),
    operation: 'live_gateways',
    shape: 'gateway',
    failure: adminErrors.gatewaysUnavailable,
    handle: liveGatewaysRead,
  },
  {
    method: 'GET',
    segments: segments('/gw/reload'),
    operation: 'reload',
    shape: 'gateway',
    failure: adminErrors.reloadFailed,
    handle: reload,
    actsOnGet: true,
  },
];
