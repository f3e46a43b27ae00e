import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { AdmissionregistrationV1Api, CoreV1Api, ListWatch, Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import { RestartingInformer } from '../../common/restarting-informer.ts';
import { listenerOptionNames, type OperatorOptions } from '../options.ts';
import { drain, listen, listenNamed } from '../../common/listen.ts';
import { clusterReleaseOwner, releaseOwner } from '../runtime/release-owner.ts';
import { CertStore, type StoredPki } from './cert-store.ts';
import { servingNames } from './certs.ts';
import { releaseNames } from '../runtime/release-names.ts';
import { applyWebhookConfiguration, removeLegacyWebhookConfiguration, type WebhookTarget } from './webhook-configuration.ts';
import { createWebhookServer, type WebhookServer } from './webhook-server.ts';
import type { ReviewResult } from './admission.ts';

/**
 * How often every replica re-reads the certificate Secret (and rotates it when due) and
 * re-applies the webhook configuration, besides doing so on every change their watches see.
 */
const CERT_CHECK_MS = 10 * 60 * 1000;

/**
 * The least time between two syncs. Two replicas that disagree on the configuration (a rolling
 * update that changes the webhook's options) each undo the other's write on its watch event:
 * this bounds how often, until the old replica is gone.
 */
const SYNC_GAP_MS = 2_000;

/** How long stop waits for a sync under way. */
const STOP_WAIT_MS = 5_000;

/** Restart delays of the Secret and configuration watches (common/restarting-informer.ts), of a failed sync and of a failed start. */
const WATCH_RESTART_BASE_MS = 1_000;
const WATCH_RESTART_MAX_MS = 30_000;
const retryDelayMs = (failures: number): number => Math.min(WATCH_RESTART_MAX_MS, WATCH_RESTART_BASE_MS * 2 ** failures);

/**
 * The injection webhook of one replica: its certificate from the shared Secret (issued
 * or rotated when due), the HTTPS listener, and the MutatingWebhookConfiguration kept
 * pointing at it with the current CA bundle. Every replica watches the Secret and the
 * configuration: a Secret another replica rewrote is served within moments, and a
 * configuration deleted or edited by hand is written again.
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
  #watches: RestartingInformer<KubernetesObject>[] = [];
  #syncWanted = false;
  #syncing: Promise<void> | undefined;
  #lastSyncAt = 0;
  #syncFailures = 0;
  readonly #stopping = new AbortController();
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
      const delay = retryDelayMs(attempt);
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
    if (!server.server.listening) await listenNamed(listenerOptionNames.webhook, listen(server.server, this.#options.webhookListen));
    await this.#register(pki);
    this.#lastSyncAt = Date.now();
    this.#timer = setInterval(() => this.#requestSync(), CERT_CHECK_MS);
    this.#timer.unref();
    this.#log.info({ port: this.port() }, 'injection webhook serving');
    await this.#watch();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#stopping.abort();
    clearTimeout(this.#retry);
    clearInterval(this.#timer);
    await Promise.all(this.#watches.map((watch) => watch.stop()));
    // A sync under way could otherwise write the configuration again after the caller removed it;
    // one stuck on an API server that does not answer does not hold the shutdown up for long.
    await Promise.race([this.#syncing, sleep(STOP_WAIT_MS, undefined, { ref: false })]);
    if (this.#server) await drain(this.#server.server, 0);
  }

  /** Watches the Secret and the configuration by name: any change of either asks for a sync. */
  async #watch(): Promise<void> {
    const { namespace, releaseName } = this.#options;
    const names = releaseNames(releaseName);
    const core = this.#kc.makeApiClient(CoreV1Api);
    const admission = this.#kc.makeApiClient(AdmissionregistrationV1Api);
    const secretSelector = `metadata.name=${names.webhookSecret}`;
    const configurationSelector = `metadata.name=${names.webhookConfiguration}`;
    this.#watches = [
      this.#watchOne('webhook certificate Secret', `/api/v1/namespaces/${namespace}/secrets`, secretSelector,
        () => core.listNamespacedSecret({ namespace, fieldSelector: secretSelector })),
      this.#watchOne('webhook configuration', '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations', configurationSelector,
        () => admission.listMutatingWebhookConfiguration({ fieldSelector: configurationSelector })),
    ];
    await Promise.all(this.#watches.map((watch) => watch.start()));
  }

  #watchOne(what: string, path: string, fieldSelector: string, list: () => Promise<KubernetesListObject<KubernetesObject>>): RestartingInformer<KubernetesObject> {
    const informer = new ListWatch<KubernetesObject>(path, new Watch(this.#kc), list, false, undefined, fieldSelector);
    informer.on('change', () => this.#requestSync());
    return new RestartingInformer(informer, { log: this.#log, what, baseMs: WATCH_RESTART_BASE_MS, maxMs: WATCH_RESTART_MAX_MS });
  }

  /** One sync at a time; requests while one runs, or within SYNC_GAP_MS of the last, make one more after it. */
  #requestSync(): void {
    if (this.#stopped) return;
    this.#syncWanted = true;
    this.#syncing ??= this.#syncWhileWanted();
  }

  async #syncWhileWanted(): Promise<void> {
    try {
      while (this.#syncWanted && !this.#stopped) {
        const wait = this.#lastSyncAt + SYNC_GAP_MS - Date.now();
        if (wait > 0) await sleep(wait, undefined, { signal: this.#stopping.signal, ref: false }).catch(() => undefined);
        if (this.#stopped) return;
        this.#syncWanted = false;
        this.#lastSyncAt = Date.now();
        await this.#sync();
      }
    } finally {
      this.#syncing = undefined;
    }
  }

  /**
   * Re-reads the Secret (re-issuing what is missing or unfit), writes the configuration, then
   * serves the pair: in that order, the API server trusts a new CA before this replica serves
   * a certificate of it, and still trusts the old one (certs.ts, trustedCas).
   */
  async #sync(): Promise<void> {
    try {
      const pki = await this.#certs.ensure();
      await this.#register(pki);
      this.#server?.rotate(pki);
      this.#syncFailures = 0;
    } catch (error) {
      const delayMs = retryDelayMs(this.#syncFailures);
      this.#syncFailures += 1;
      this.#log.warn({ err: error, delayMs }, 'webhook certificate or configuration sync failed; retrying');
      clearTimeout(this.#retry);
      this.#retry = setTimeout(() => this.#requestSync(), delayMs);
      this.#retry.unref();
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
