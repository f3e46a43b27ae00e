import type { AddressInfo } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import type { OperatorOptions } from '../options.ts';
import { drain, listen } from '../../common/listen.ts';
import { clusterReleaseOwner, releaseOwner } from '../runtime/release-owner.ts';
import { CertStore, type StoredPki } from './cert-store.ts';
import { servingNames } from './certs.ts';
import { releaseNames } from '../runtime/release-names.ts';
import { applyWebhookConfiguration, removeLegacyWebhookConfiguration, type WebhookTarget } from './webhook-configuration.ts';
import { createWebhookServer, type WebhookServer } from './webhook-server.ts';
import type { ReviewResult } from './admission.ts';

/** How often every replica re-reads the certificate Secret (and rotates it when due). */
const CERT_CHECK_MS = 10 * 60 * 1000;

/**
 * The injection webhook of one replica: its certificate from the shared Secret (issued
 * or rotated when due), the HTTPS listener, and the MutatingWebhookConfiguration kept
 * pointing at it with the current CA bundle.
 */
export class WebhookRunner {
  readonly #kc: KubeConfig;
  readonly #options: OperatorOptions;
  readonly #log: Logger;
  readonly #certs: CertStore;
  readonly #count: (result: ReviewResult) => void;
  #server: WebhookServer | undefined;
  #timer: NodeJS.Timeout | undefined;
  #retry: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(kc: KubeConfig, options: OperatorOptions, log: Logger, count: (result: ReviewResult) => void) {
    this.#kc = kc;
    this.#count = count;
    this.#options = options;
    this.#log = log.child({ component: 'webhook' });
    this.#certs = new CertStore(kc, { namespace: options.namespace, name: releaseNames(options.releaseName).webhookSecret }, servingNames(options.webhookService, options.namespace), this.#log,
      () => releaseOwner(kc, options.namespace, options.webhookService));
  }

  serving(): boolean {
    return this.#server?.server.listening ?? false;
  }

  port(): number | undefined {
    return (this.#server?.server.address() as AddressInfo | null)?.port;
  }

  /**
   * Brings the webhook up; when the API server cannot be reached yet (certificate Secret,
   * webhook configuration), keeps retrying in the background with backoff instead of
   * failing the process. /readyz says unready until it serves.
   */
  start(): Promise<void> {
    return this.#attempt(0);
  }

  async #attempt(attempt: number): Promise<void> {
    try {
      await this.#bringUp();
    } catch (error) {
      if (this.#stopped) return;
      const delay = Math.min(30_000, 1_000 * 2 ** attempt);
      this.#log.warn({ err: error, delayMs: delay }, 'webhook not up yet; retrying');
      this.#retry = setTimeout(() => void this.#attempt(attempt + 1), delay);
      this.#retry.unref();
    }
  }

  async #bringUp(): Promise<void> {
    const pki = await this.#certs.ensure();
    const sidecar = {
      image: this.#options.sidecarImage,
      imagePullPolicy: this.#options.sidecarImagePullPolicy,
      resources: this.#options.sidecarResources,
      nodeOptions: this.#options.sidecarNodeOptions,
      warmUpRequests: this.#options.sidecarWarmUpRequests,
      sessionCacheSize: this.#options.sidecarSessionCacheSize,
      redisUrl: this.#options.sidecarRedisUrl ?? this.#options.redisUrl,
      envSecretName: this.#options.sidecarEnvSecret,
      serviceAccountName: this.#options.sidecarServiceAccount,
    };
    const server = this.#server ?? createWebhookServer(pki, sidecar, this.#log, this.#count);
    this.#server = server;
    server.rotate(pki);
    if (!server.server.listening) await listen(server.server, this.#options.webhookListen);
    await this.#register(pki);
    this.#timer = setInterval(() => void this.#refresh(), CERT_CHECK_MS);
    this.#timer.unref();
    this.#log.info({ port: this.port() }, 'injection webhook serving');
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#retry);
    clearInterval(this.#timer);
    if (this.#server) await drain(this.#server.server, 0);
  }

  async #refresh(): Promise<void> {
    try {
      const pki = await this.#certs.ensure();
      this.#server?.rotate(pki);
      await this.#register(pki);
    } catch (error) {
      this.#log.warn({ err: error }, 'webhook certificate refresh failed; will retry');
    }
  }

  /** Writes the release's webhook configuration with the CA bundle of the PKI. */
  async #register(pki: StoredPki): Promise<void> {
    const target = webhookTarget(this.#options);
    const owner = await clusterReleaseOwner(this.#kc, this.#options.webhookOwnerClusterRole);
    await applyWebhookConfiguration(this.#kc, target, [pki.caCert, pki.previousCaCert], owner);
    await removeLegacyWebhookConfiguration(this.#kc, target.name, owner);
  }
}

/** Where the API server sends the pods of the namespaces an operator with these options serves. */
export function webhookTarget(options: OperatorOptions): WebhookTarget {
  const { webhookUrl, webhookService, namespace, webhookFailurePolicy, releaseName, watchNamespaces } = options;
  return {
    name: releaseNames(releaseName).webhookConfiguration,
    watchNamespaces,
    url: webhookUrl,
    service: webhookService ? { name: webhookService, namespace, port: 443 } : undefined,
    failurePolicy: webhookFailurePolicy,
    excludedNamespaces: [...new Set(['kube-system', namespace])],
  };
}
