import type { Metric, Registry } from 'prom-client';
import { labelText, sampleValue, textInPieces, type MetricValues, type TextInPieces } from './metrics-text.ts';

interface Tally<L extends string> {
  labels: Record<L, string>;
  /** The labels as they go between the braces, escaped once when the pair is first counted. */
  labelText: string;
  count: number;
}

/** A counter's configuration and counts as plain data: what a worker gives the primary to sum (sidecar/workers/metrics.ts). */
export interface CounterSnapshot {
  kind: 'counter';
  name: string;
  help: string;
  labelNames: readonly [string, string];
  /** Each series' two label values, one series after another. */
  labelValues: string[];
  counts: number[];
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
 * pays for, twice a request (docs/benchmarks.md#measured-away-and-measured-and-not-kept). Here a label pair's count is a number
 * found by two Map lookups on the label values (strings the caller already holds). It sits in
 * the registry beside prom-client's metrics: `get()` gives prom-client its values (for the
 * primary's sum of its workers), and it writes its own text for a scrape, a piece at a time
 * (common/metrics-text.ts).
 */
export class LabelPairCounter<A extends string, B extends string> implements TextInPieces {
  readonly name: string;
  readonly help: string;
  readonly type = 'counter';
  readonly aggregator = 'sum';
  readonly #tallies = new Map<string, Map<string, Tally<A | B>>>();
  /** The tallies as first counted: the order prom-client's counters show their series in. */
  readonly #inOrder: Tally<A | B>[] = [];
  readonly #names: readonly [A, B];

  constructor({ name, help, labelNames, registers }: LabelPairCounterConfiguration<A, B>) {
    this.name = name;
    this.help = help;
    this.#names = labelNames;
    // prom-client's registry takes any object with its metrics' name and get(); its types
    // name only its own classes.
    for (const registry of registers) registry.registerMetric(this as unknown as Metric);
  }

  inc(a: string, b: string): void {
    this.#tallyOf(a, b).count++;
  }

  /** A counter of the same configuration, at zero, in `registers`: the primary sums its workers' snapshots into it. */
  static like(snapshot: CounterSnapshot, registers: Registry[]): LabelPairCounter<string, string> {
    const { name, help, labelNames } = snapshot;
    return new LabelPairCounter({ name, help, labelNames, registers });
  }

  snapshot(): CounterSnapshot {
    const [nameA, nameB] = this.#names;
    const labelValues: string[] = [];
    const counts: number[] = [];
    for (const { labels, count } of this.#inOrder) {
      labelValues.push(labels[nameA], labels[nameB]);
      counts.push(count);
    }
    return { kind: 'counter', name: this.name, help: this.help, labelNames: this.#names, labelValues, counts };
  }

  /** Adds a snapshot's counts of a counter of the same configuration. */
  add({ labelValues, counts }: CounterSnapshot): void {
    for (let at = 0; at < counts.length; at++) this.#tallyOf(labelValues[2 * at]!, labelValues[2 * at + 1]!).count += counts[at]!;
  }

  /** Drops every series whose first label value `keep` refuses (sidecar/metrics.ts: an API no longer loaded). */
  retainFirst(keep: (a: string) => boolean): void {
    let dropped = false;
    for (const a of this.#tallies.keys()) {
      if (keep(a)) continue;
      this.#tallies.delete(a);
      dropped = true;
    }
    if (!dropped) return;
    const [nameA] = this.#names;
    let at = 0;
    for (const tally of this.#inOrder) if (keep(tally.labels[nameA])) this.#inOrder[at++] = tally;
    this.#inOrder.length = at;
  }

  #tallyOf(a: string, b: string): Tally<A | B> {
    let byB = this.#tallies.get(a);
    if (byB === undefined) this.#tallies.set(a, (byB = new Map()));
    let tally = byB.get(b);
    if (tally === undefined) {
      const [nameA, nameB] = this.#names;
      tally = { labels: { [nameA]: a, [nameB]: b } as Record<A | B, string>, labelText: labelText(this.#names, [a, b]), count: 0 };
      byB.set(b, tally);
      this.#inOrder.push(tally);
    }
    return tally;
  }

  /** Its values as prom-client's metrics give theirs. */
  get(): Promise<MetricValues> {
    const values: MetricValues['values'] = [];
    for (const tally of this.#inOrder) values.push({ labels: { ...tally.labels }, value: tally.count });
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values });
  }

  textPieces(): Iterable<string> {
    return textInPieces(this.name, this.help, this.type, this.#inOrder, (tally) => `${this.name}{${tally.labelText}} ${sampleValue(tally.count)}`);
  }
}
