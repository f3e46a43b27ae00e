import { createServer, type Server } from 'node:https';
import type { Logger } from '../../common/logger.ts';
import { admissionHandler, type ReviewResult } from './admission.ts';
import type { SidecarOptions } from './injector.ts';
import type { WebhookPki } from './certs.ts';

/** The HTTPS server of the injection webhook; `rotate` swaps its certificate without a restart. */
export interface WebhookServer {
  server: Server;
  rotate(pki: WebhookPki): void;
}

export function createWebhookServer(pki: WebhookPki, options: SidecarOptions, log: Logger, count: (result: ReviewResult) => void): WebhookServer {
  const server = createServer({ cert: pki.tlsCert, key: pki.tlsKey, minVersion: 'TLSv1.2' }, admissionHandler(options, log, count));
  let current = pki.tlsCert;
  return {
    server,
    rotate(next) {
      if (next.tlsCert === current) return;
      server.setSecureContext({ cert: next.tlsCert, key: next.tlsKey, minVersion: 'TLSv1.2' });
      current = next.tlsCert;
      log.info('webhook serving certificate reloaded');
    },
  };
}
