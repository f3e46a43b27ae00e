import type { CompiledConfig } from '../../crds/compiled.ts';
import type { ConfigSource } from '../../sidecar/config/source.ts';

/** A config source the test publishes to by hand: a swap lands exactly when the test says. */
export class HandSource implements ConfigSource {
  readonly name = 'hand';
  #config: CompiledConfig;
  #publish: ((config: CompiledConfig) => void) | null = null;

  constructor(initial: CompiledConfig) {
    this.#config = initial;
  }

  start(publish: (config: CompiledConfig) => void): Promise<void> {
    this.#publish = publish;
    publish(this.#config);
    return Promise.resolve();
  }

  publish(config: CompiledConfig): void {
    this.#config = config;
    this.#publish?.(config);
  }

  reload(): Promise<void> {
    this.#publish?.(this.#config);
    return Promise.resolve();
  }

  stop(): Promise<void> {
    this.#publish = null;
    return Promise.resolve();
  }

  problems(): [] {
    return [];
  }
}
