import { idPattern } from '../../crds/schemas/common.ts';
import { AdminError, adminErrors } from './errors.ts';

/**
 * Identifiers in paths (api ids, product ids) name resources: the resources' own id pattern
 * (crds/schemas/common.ts), so every id a resource may have can be reached, and none that
 * holds a path separator, a leading dot or a control character. A product is also reached by
 * its Kubernetes name, hence up to 253 characters.
 */
const ID_PATTERN = new RegExp(idPattern);
const MAX_ID_LENGTH = 253;

export function pathId(raw: string, name: string): string {
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    throw new AdminError(adminErrors.paramInvalid, `${name} is not valid percent-encoding`);
  }
  if (decoded.length > MAX_ID_LENGTH || !ID_PATTERN.test(decoded)) {
    throw new AdminError(adminErrors.paramInvalid, `${name} must be 1-${MAX_ID_LENGTH} characters of A-Z a-z 0-9 . _ - starting with a letter or digit`);
  }
  return decoded;
}
