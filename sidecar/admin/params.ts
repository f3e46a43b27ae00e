import { AdminError, adminErrors } from './errors.ts';

/**
 * Identifiers in paths (api ids, product ids) name resources and, in folder mode, are
 * compared with file contents: a bounded ASCII charset that cannot express a path
 * separator, a parent reference or a control character. Kubernetes names fit in it.
 */
const ID_PATTERN = /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})$/;

export function pathId(raw: string, name: string): string {
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    throw new AdminError(adminErrors.paramInvalid, `${name} is not valid percent-encoding`);
  }
  if (!ID_PATTERN.test(decoded) || decoded.includes('..')) {
    throw new AdminError(
      adminErrors.paramInvalid,
      `${name} must be 1-253 characters of A-Z a-z 0-9 . _ - starting with a letter or digit, without ".."`,
    );
  }
  return decoded;
}
