import { ApiException, CoreV1Api, type KubeConfig, type V1OwnerReference, type V1Secret } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import { issueCa, issueServing, rotationNeeded, type WebhookPki } from './certs.ts';

const decode = (secret: V1Secret, key: string): string => Buffer.from(secret.data?.[key] ?? '', 'base64').toString('utf8');
const encode = (value: string): string => Buffer.from(value).toString('base64');

/** The PKI plus the CA it replaced, kept in the bundle while certificates it signed may still be served. */
export interface StoredPki extends WebhookPki {
  previousCaCert: string;
}

/**
 * The webhook's CA and serving certificate, kept in a Secret of the operator's namespace
 * so every replica serves the same certificate and a restart keeps it. Whoever finds it
 * missing or due for rotation issues a new one; writes carry the resourceVersion read,
 * so racing replicas converge on one (409 → read the winner's).
 */
export class CertStore {
  readonly #api: CoreV1Api;
  readonly #namespace: string;
  readonly #secretName: string;
  readonly #names: { dns: string[]; ips: string[] };
  readonly #log: Logger;
  readonly #owner: () => Promise<V1OwnerReference[] | undefined>;

  constructor(kc: KubeConfig, secret: { namespace: string; name: string }, names: { dns: string[]; ips: string[] }, log: Logger,
    owner: () => Promise<V1OwnerReference[] | undefined> = async () => undefined) {
    this.#api = kc.makeApiClient(CoreV1Api);
    this.#namespace = secret.namespace;
    this.#secretName = secret.name;
    this.#names = names;
    this.#log = log;
    this.#owner = owner;
  }

  async ensure(): Promise<StoredPki> {
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const current = await this.#read();
      const pki = current ? fromSecret(current) : undefined;
      const needed = rotationNeeded(pki, this.#names);
      if (pki && needed === 'none') return pki;
      const next = await this.#issue(pki, needed);
      if (await this.#write(current, next)) {
        this.#log.info({ rotated: needed }, 'webhook certificate issued');
        return next;
      }
    }
    throw new Error(`could not store the webhook certificate in Secret ${this.#namespace}/${this.#secretName}`);
  }

  async #issue(pki: StoredPki | undefined, needed: 'ca' | 'serving' | 'none'): Promise<StoredPki> {
    if (pki && needed === 'serving') return { ...(await issueServing(pki, this.#names)), previousCaCert: pki.previousCaCert };
    const ca = await issueCa();
    return { ...(await issueServing(ca, this.#names)), previousCaCert: pki?.caCert ?? '' };
  }

  async #read(): Promise<V1Secret | undefined> {
    try {
      return await this.#api.readNamespacedSecret({ name: this.#secretName, namespace: this.#namespace });
    } catch (error) {
      if (error instanceof ApiException && error.code === 404) return undefined;
      throw error;
    }
  }

  async #write(current: V1Secret | undefined, pki: StoredPki): Promise<boolean> {
    const body: V1Secret = {
      metadata: {
        name: this.#secretName,
        namespace: this.#namespace,
        resourceVersion: current?.metadata?.resourceVersion,
        labels: { 'app.kubernetes.io/managed-by': 'gw-operator' },
        ownerReferences: await this.#owner(),
      },
      type: 'Opaque',
      data: {
        'ca.crt': encode(pki.caCert),
        'ca.key': encode(pki.caKey),
        'tls.crt': encode(pki.tlsCert),
        'tls.key': encode(pki.tlsKey),
        'ca-previous.crt': encode(pki.previousCaCert),
      },
    };
    try {
      if (current) await this.#api.replaceNamespacedSecret({ name: this.#secretName, namespace: this.#namespace, body });
      else await this.#api.createNamespacedSecret({ namespace: this.#namespace, body });
      return true;
    } catch (error) {
      if (error instanceof ApiException && error.code === 409) return false;
      throw error;
    }
  }
}

function fromSecret(secret: V1Secret): StoredPki {
  return {
    caCert: decode(secret, 'ca.crt'),
    caKey: decode(secret, 'ca.key'),
    tlsCert: decode(secret, 'tls.crt'),
    tlsKey: decode(secret, 'tls.key'),
    previousCaCert: decode(secret, 'ca-previous.crt'),
  };
}
