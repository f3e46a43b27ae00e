import { z } from 'zod';
import { digestMatches, secretDigest } from './secret.ts';

/**
 * Bearer-token auth of the category reads (docs/behaviour.md#authentication, docs/architecture.md#security): authentication first
 * (401 when it fails), then one permission check per access (403). Both implementations
 * speak in Kubernetes RBAC terms so a token means the same thing in a cluster and standalone.
 */
export interface AccessCheck {
  verb: 'get' | 'list';
  resource: 'apidefinitions' | 'categories';
  /** Undefined: across all namespaces. */
  namespace?: string;
  /** The one resource read, which RBAC may grant by name (a Role's resourceNames); undefined: any. */
  name?: string;
}

export interface BearerPrincipal {
  readonly name: string;
  /** Throws when the decision could not be made (API server unreachable), never answers false for that. */
  can(check: AccessCheck): Promise<boolean>;
}

export interface BearerAuthenticator {
  /** null: the token is not valid. Throws when validity could not be established. */
  authenticate(token: string): Promise<BearerPrincipal | null>;
}

/**
 * Thrown when this gateway's own identity may not check tokens or permissions (an
 * injected sidecar's least-privilege ServiceAccount): no caller can be served here, which
 * is a refusal to explain, not a fault of the gateway.
 */
export class ReviewNotPermittedError extends Error {
  constructor(options?: { cause?: unknown }) {
    super('this gateway may not review tokens or permissions', options);
    this.name = 'ReviewNotPermittedError';
  }
}

export const staticPermissionSchema = z.enum([
  'get:apidefinitions',
  'list:apidefinitions',
  'get:categories',
  'list:categories',
  '*',
]);

export const staticTokenSchema = z
  .object({
    name: z.string().min(1).max(253),
    // What `Authorization: Bearer <token>` can carry (sidecar/cli.ts secretOption); the token is the header's last word.
    token: z
      .string()
      .min(16)
      .max(4096)
      .regex(/^[\x21-\x7e]*$/, 'must be visible ASCII characters without spaces, or no Authorization header can carry it and every call with it is refused'),
    permissions: z.array(staticPermissionSchema),
  })
  .strict();
export type StaticToken = z.infer<typeof staticTokenSchema>;

export const staticTokensSchema = z.array(staticTokenSchema);

interface TokenEntry {
  name: string;
  digest: Buffer;
  permissions: ReadonlySet<string>;
}

/**
 * Standalone mode: tokens from a file or variable of the sidecar, each with the
 * permissions it grants in every namespace. Tokens are kept only as digests.
 */
export class StaticBearerAuthenticator implements BearerAuthenticator {
  readonly #tokens: TokenEntry[];

  constructor(tokens: readonly StaticToken[]) {
    this.#tokens = tokens.map((t) => ({ name: t.name, digest: secretDigest(t.token), permissions: new Set(t.permissions) }));
  }

  async authenticate(token: string): Promise<BearerPrincipal | null> {
    // Every entry is compared so the time taken does not depend on which one matches.
    let found: TokenEntry | null = null;
    for (const entry of this.#tokens) {
      if (digestMatches(token, entry.digest)) found = entry;
    }
    if (!found) return null;
    const { name, permissions } = found;
    return {
      name,
      can: async (check) => permissions.has('*') || permissions.has(`${check.verb}:${check.resource}`),
    };
  }
}
