#!/usr/bin/env node
import { loadKubeConfig } from '../common/kube.ts';
import { createLogger } from '../common/logger.ts';
import { loadLocalSettings, resolveSettings, SettingsError } from '../common/settings-loader.ts';
import { stopOnSignals } from '../common/stop-on-signals.ts';
import { Operator } from './operator.ts';
import { OptionsError } from '../common/cli.ts';
import { helpText, parseOptions } from './options.ts';

/** `gw-operator`: flags/env → options (invalid ones stop the process with a message naming them), then run until SIGTERM/SIGINT. */
async function main(): Promise<number | 'running'> {
  let options;
  let settings;
  try {
    options = parseOptions(process.argv.slice(2), process.env);
    if (options === 'help') {
      process.stdout.write(helpText());
      return 0;
    }
    settings = resolveSettings(undefined, loadLocalSettings(options.settings, process.env));
  } catch (error) {
    if (error instanceof OptionsError || error instanceof SettingsError) {
      process.stderr.write(`gw-operator: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
  const log = createLogger('gw-operator', options.logLevel);
  const operator = new Operator(options, { kc: loadKubeConfig('gw-operator', options.kubeconfig), log, settings });
  stopOnSignals(log, 'shutting down', () => operator.stop());
  process.on('unhandledRejection', (reason) => log.error({ err: reason }, 'unhandled rejection'));
  await operator.start();
  return 'running';
}

main().then(
  (outcome) => {
    if (outcome !== 'running') process.exit(outcome);
  },
  (error: unknown) => {
    process.stderr.write(`gw-operator: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
