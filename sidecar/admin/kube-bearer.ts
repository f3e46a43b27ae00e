import { AuthenticationV1Api, AuthorizationV1Api, type KubeConfig, type V1UserInfo } from '@kubernetes/client-node';
import { GW_GROUP } from '../../common/kube.ts';
import type { AccessCheck, BearerAuthenticator, BearerPrincipal } from './bearer.ts';

/**
 * In a cluster: the token is whatever the API server accepts (a ServiceAccount token, an
 * OIDC token…), checked with a TokenReview; permissions are the caller's RBAC on gw.dev
 * resources, checked with a SubjectAccessReview for the user the review returned.
 * The sidecar's own account needs `create` on tokenreviews and subjectaccessreviews.
 */
export class KubernetesBearerAuthenticator implements BearerAuthenticator {
  readonly #authn: AuthenticationV1Api;
  readonly #authz: AuthorizationV1Api;

  constructor(kc: KubeConfig) {
    this.#authn = kc.makeApiClient(AuthenticationV1Api);
    this.#authz = kc.makeApiClient(AuthorizationV1Api);
  }

  async authenticate(token: string): Promise<BearerPrincipal | null> {
    const review = await this.#authn.createTokenReview({
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } },
    });
    const user = review.status?.user;
    if (!review.status?.authenticated || !user?.username) return null;
    return { name: user.username, can: (check) => this.#can(user, check) };
  }

  async #can(user: V1UserInfo, check: AccessCheck): Promise<boolean> {
    const review = await this.#authz.createSubjectAccessReview({
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: {
          user: user.username,
          uid: user.uid,
          groups: user.groups,
          extra: user.extra,
          resourceAttributes: { group: GW_GROUP, resource: check.resource, verb: check.verb, namespace: check.namespace },
        },
      },
    });
    return review.status?.allowed === true;
  }
}
