#!/usr/bin/env node
import { createLogger } from '../common/logger.ts';
import { SettingsError } from '../common/settings-loader.ts';
import { TlsFilesError } from '../common/tls-files.ts';
import { stopOnSignals } from '../common/stop-on-signals.ts';
import { startSidecar } from './app.ts';
import { helpText, parseSidecarArgs } from './cli.ts';

/** gw-sidecar: the gateway process (flags and environment variables: `gw-sidecar --help`). */
async function main(): Promise<void> {
  let options;
  try {
    options = parseSidecarArgs(process.argv.slice(2), process.env);
  } catch (err) {
    process.stderr.write(`gw-sidecar: ${(err as Error).message}\n\n${helpText()}\n`);
    process.exit(2);
  }
  if (options === 'help') {
    process.stdout.write(`${helpText()}\n`);
    return;
  }
  const logger = createLogger('gw-sidecar');
  let sidecar;
  try {
    sidecar = await startSidecar(options, { logger });
  } catch (err) {
    const message = err instanceof SettingsError || err instanceof TlsFilesError ? err.message : String(err);
    logger.fatal({ err }, `gw-sidecar cannot start: ${message}`);
    process.stderr.write(`gw-sidecar: cannot start: ${message}\n`);
    process.exit(1);
  }
  const running = sidecar;
  stopOnSignals(logger, 'stopping: draining in-flight requests', () => running.close());
  // A promise nobody awaited must not end the gateway in front of production traffic.
  process.on('unhandledRejection', (reason) => logger.error({ err: reason }, 'unhandled rejection'));
  process.on('SIGHUP', () => {
    running.runtime.reload().catch((err: unknown) => logger.error({ err }, 'reload on SIGHUP failed'));
  });
}

await main();
