import { Counter, type Registry } from 'prom-client';

interface Tally<L extends string> {
  labels: Record<L, string>;
  count: number;
}

export interface LabelPairCounterConfiguration<A extends string, B extends string> {
  name: string;
  help: string;
  labelNames: readonly [A, B];
  registers: Registry[];
}

/**
 * A Prometheus counter with two labels, for the request path. prom-client's labelled `inc`
 * builds a label-hash string and a result object on every call: garbage the young collector
 * pays for, twice a request (README.md#benchmarks). Here a label pair's count is a number
 * found by two Map lookups on the label values (strings the caller already holds), and the
 * counter gets the totals when prom-client collects it: on a scrape, or when the primary
 * gathers its workers' metrics.
 */
export class LabelPairCounter<A extends string, B extends string> {
  readonly counter: Counter<A | B>;
  readonly #tallies = new Map<string, Map<string, Tally<A | B>>>();
  readonly #names: readonly [A, B];

  constructor({ name, help, labelNames, registers }: LabelPairCounterConfiguration<A, B>) {
    this.#names = labelNames;
    const tallies = this.#tallies;
    this.counter = new Counter({
      name,
      help,
      labelNames,
      registers,
      collect(this: Counter<A | B>) {
        this.reset();
        for (const byB of tallies.values()) for (const { labels, count } of byB.values()) this.inc(labels, count);
      },
    });
  }

  inc(a: string, b: string): void {
    let byB = this.#tallies.get(a);
    if (byB === undefined) this.#tallies.set(a, (byB = new Map()));
    const tally = byB.get(b);
    if (tally !== undefined) {
      tally.count++;
      return;
    }
    const [nameA, nameB] = this.#names;
    byB.set(b, { labels: { [nameA]: a, [nameB]: b } as Record<A | B, string>, count: 1 });
  }
}
