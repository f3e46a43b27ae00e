#!/usr/bin/env node
import cluster from 'node:cluster';
import { createLogger, type Logger } from '../common/logger.ts';
import { SettingsError } from '../common/settings-loader.ts';
import { TlsFilesError } from '../common/tls-files.ts';
import { stopOnSignals } from '../common/stop-on-signals.ts';
import { helpText, parseSidecarArgs, workerNeeds, type SidecarOptions } from './cli.ts';
import { workerCount } from './workers/count.ts';
import { WORKER_COUNT_ENV, WORKER_INDEX_ENV } from './workers/ipc.ts';

/** A refusal of what the gateway was given (a setting, a file, an address): its message says it all, and a stack trace would only bury it. */
const isOperational = (err: unknown): err is Error =>
  err instanceof SettingsError || err instanceof TlsFilesError || (err instanceof Error && typeof (err as NodeJS.ErrnoException).syscall === 'string');

function cannotStart(logger: Logger, err: unknown): never {
  const message = err instanceof Error ? err.message : String(err);
  if (isOperational(err)) logger.fatal({ code: (err as NodeJS.ErrnoException).code }, `gw-sidecar cannot start: ${message}`);
  else logger.fatal({ err }, `gw-sidecar cannot start: ${message}`);
  process.stderr.write(`gw-sidecar: cannot start: ${message}\n`);
  process.exit(1);
}

/** The primary of several workers (docs/architecture.md#workers): it serves health and metrics and keeps the workers running. */
async function runPrimary(options: SidecarOptions, count: number, logger: Logger): Promise<void> {
  // The settings are checked here too, so a bad one stops the start before any worker is forked.
  const { loadLocalSettings } = await import('../common/settings-loader.ts');
  const { startPrimary } = await import('./workers/primary.ts');
  let close: (() => Promise<void>) | undefined;
  // Before the workers start: a stop while they warm up stops them (and ends a start that has not ended).
  stopOnSignals(logger, 'stopping: draining the workers', () => close?.() ?? Promise.resolve());
  let primary;
  try {
    loadLocalSettings(options.settingsFile, process.env);
    primary = await startPrimary(options, count, logger, (stop) => (close = stop));
  } catch (err) {
    cannotStart(logger, err);
  }
  const running = primary;
  process.on('SIGHUP', () => running.reload());
}

/** Worker `index` of `count`, or the only gateway process (undefined). */
interface WorkerPlace {
  index: number;
  count: number;
}

/** Each worker is a gateway of its own to DRL and in Events, named after the gateway's instance id. */
const workerInstanceId = (gatewayId: string, index: number): string => `${gatewayId}-w${index}`;

/** One gateway process: the only one, or one worker of several. */
async function runGateway(options: SidecarOptions, logger: Logger, place: WorkerPlace | undefined): Promise<void> {
  const { startSidecar } = await import('./app.ts');
  const { linkToPrimary } = await import('./workers/worker.ts');
  const siblings = place ? Array.from({ length: place.count }, (_, i) => i).filter((i) => i !== place.index).map((i) => workerInstanceId(options.instanceId, i)) : [];
  const link = place === undefined ? undefined : linkToPrimary(place.index, siblings, logger);
  const instanceId = place === undefined ? options.instanceId : workerInstanceId(options.instanceId, place.index);
  let sidecar;
  try {
    sidecar = await startSidecar({ ...options, instanceId }, { logger, worker: link?.role });
  } catch (err) {
    cannotStart(logger, err);
  }
  const running = sidecar;
  stopOnSignals(logger, 'stopping: draining in-flight requests', () => running.close());
  link?.onStop(() => process.kill(process.pid, 'SIGTERM'));
  link?.attach(running);
  process.on('SIGHUP', () => {
    running.runtime.reload().catch((err: unknown) => logger.error({ err }, 'reload on SIGHUP failed'));
  });
}

/** gw-sidecar: the gateway (flags and environment variables: `gw-sidecar --help`). */
async function main(): Promise<void> {
  let options;
  try {
    options = parseSidecarArgs(process.argv.slice(2), process.env);
  } catch (err) {
    // The reason alone, last, where `kubectl logs --tail` shows it: the flags are a --help away.
    process.stderr.write(`gw-sidecar: ${(err as Error).message}\n(gw-sidecar --help lists the flags and variables)\n`);
    process.exit(2);
  }
  if (options === 'help') {
    process.stdout.write(`${helpText()}\n`);
    return;
  }
  const logger = createLogger('gw-sidecar', options.logLevel);
  // A promise nobody awaited must not end the gateway in front of production traffic.
  process.on('unhandledRejection', (reason) => logger.error({ err: reason }, 'unhandled rejection'));
  if (cluster.isWorker) {
    const place = { index: Number(process.env[WORKER_INDEX_ENV]), count: Number(process.env[WORKER_COUNT_ENV]) };
    await runGateway(options, logger.child({ worker: place.index }), place);
    return;
  }
  const count = workerCount(options.workers, workerNeeds(options));
  if (count.count > 1) {
    logger.info({ workers: count.count }, `starting ${count.count} workers (${count.reason})`);
    await runPrimary(options, count.count, logger);
  } else {
    await runGateway(options, logger, undefined);
  }
}

await main();
