import type { Logger } from './logger.ts';

/**
 * SIGTERM (the kubelet) or SIGINT runs `stop` once and exits with 0 when it finished, 1
 * when it failed; signals arriving while it runs are ignored, so a second Ctrl-C does not
 * cut a drain short.
 */
export function stopOnSignals(logger: Logger, message: string, stop: () => Promise<void>): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, message);
    stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'unclean stop');
        process.exit(1);
      },
    );
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => onSignal(signal));
}
