import { ApiException, AuthenticationV1Api, AuthorizationV1Api, type KubeConfig, type V1UserInfo } from '@kubernetes/client-node';
import { group as gwGroup } from '../../crds/kinds.ts';
import { ADMIN_DEADLINE_MS, deadline } from '../resources/kube-deadline.ts';
import { ReviewNotPermittedError, type AccessCheck, type BearerAuthenticator, type BearerPrincipal } from './bearer.ts';
import { ReviewCache, type ReviewCacheOptions } from './review-cache.ts';

/** A token the API server accepted, with the permission answers already given for it. */
interface Reviewed {
  user: V1UserInfo & { username: string };
  decisions: Map<string, Promise<boolean>>;
}

/** The API server refusing this gateway the review itself (403) is a refusal to explain; anything else is a fault. */
function reviewFailure(error: unknown): unknown {
  return error instanceof ApiException && error.code === 403 ? new ReviewNotPermittedError({ cause: error }) : error;
}

/**
 * In a cluster: the token is whatever the API server accepts (a ServiceAccount token, an
 * OIDC token…), checked with a TokenReview; permissions are the caller's RBAC on gw.dev
 * resources, checked with a SubjectAccessReview for the user the review returned.
 * The sidecar's own account needs `create` on tokenreviews and subjectaccessreviews (the
 * chart gives it to the admin gateway only). Both answers are reused per token for a few
 * seconds (see ReviewCache), so a burst of reads does not become a burst of reviews.
 */
export class KubernetesBearerAuthenticator implements BearerAuthenticator {
  readonly #authn: AuthenticationV1Api;
  readonly #authz: AuthorizationV1Api;
  readonly #reviews: ReviewCache<Reviewed | null>;

  constructor(kc: KubeConfig, cache: ReviewCacheOptions = {}) {
    this.#authn = kc.makeApiClient(AuthenticationV1Api);
    this.#authz = kc.makeApiClient(AuthorizationV1Api);
    this.#reviews = new ReviewCache(cache);
  }

  async authenticate(token: string): Promise<BearerPrincipal | null> {
    const reviewed = await this.#reviews.get(token, () => this.#tokenReview(token));
    if (reviewed === null) return null;
    return { name: reviewed.user.username, can: (check) => this.#can(reviewed, check) };
  }

  async #tokenReview(token: string): Promise<Reviewed | null> {
    const review = await this.#authn
      .createTokenReview({ body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } } }, deadline(ADMIN_DEADLINE_MS))
      .catch((error: unknown) => {
        throw reviewFailure(error);
      });
    const user = review.status?.user;
    if (!review.status?.authenticated || !user?.username) return null;
    return { user: { ...user, username: user.username }, decisions: new Map() };
  }

  /** One SubjectAccessReview per distinct check for as long as the token's review is kept; a failed one is asked again. */
  #can(reviewed: Reviewed, check: AccessCheck): Promise<boolean> {
    const key = `${check.verb} ${check.resource} ${check.namespace ?? '*'} ${check.name ?? '*'}`;
    const kept = reviewed.decisions.get(key);
    if (kept !== undefined) return kept;
    const decision = this.#subjectAccessReview(reviewed.user, check);
    reviewed.decisions.set(key, decision);
    decision.catch(() => {
      if (reviewed.decisions.get(key) === decision) reviewed.decisions.delete(key);
    });
    return decision;
  }

  async #subjectAccessReview(user: V1UserInfo, check: AccessCheck): Promise<boolean> {
    const review = await this.#authz
      .createSubjectAccessReview({
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec: {
            user: user.username,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
            resourceAttributes: { group: gwGroup, resource: check.resource, verb: check.verb, namespace: check.namespace, name: check.name },
          },
        },
      }, deadline(ADMIN_DEADLINE_MS))
      .catch((error: unknown) => {
        throw reviewFailure(error);
      });
    return review.status?.allowed === true;
  }
}
