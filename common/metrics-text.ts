import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Registry } from 'prom-client';

/**
 * How many series a request-path metric writes in one turn of the event loop on a scrape.
 * A series of the histograms is 17 lines; 100 of them take well under a millisecond, where a
 * scrape of a gateway serving 1,000 APIs written in one piece held the loop for about 60 ms
 * (docs/benchmarks.md#scrape).
 */
export const SERIES_PER_TURN = 100;

/** A metric that writes its own exposition text, in pieces, so a scrape does not hold the event loop (the request-path metrics). */
export interface TextInPieces {
  readonly name: string;
  /** `# HELP`, `# TYPE`, then its lines, at most `SERIES_PER_TURN` series per piece; pieces are joined by a newline. */
  textPieces(): Iterable<string>;
}

/** What `get()` gives prom-client of a request-path metric: its registry and its workers' aggregate read these fields. */
export interface MetricValues {
  name: string;
  help: string;
  type: 'counter' | 'histogram';
  aggregator: 'sum';
  values: { labels: Record<string, string | number>; value: number; metricName?: string }[];
}

const isTextInPieces = (metric: object): metric is TextInPieces => typeof (metric as Partial<TextInPieces>).textPieces === 'function';

// The escapes of the Prometheus text format, as prom-client writes them, so both kinds of
// metric read alike.
const escapeText = (text: string): string => text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const escapeLabelValue = (value: string): string => escapeText(value).replace(/"/g, '\\"');

/** `a="x",b="y"`: a series' labels as they go between the braces. */
export function labelText(names: readonly string[], values: readonly string[]): string {
  let text = '';
  for (let i = 0; i < names.length; i++) text += `${i === 0 ? '' : ','}${names[i]}="${escapeLabelValue(values[i]!)}"`;
  return text;
}

/** A sample's value as the text format writes it. */
export function sampleValue(value: number): string {
  if (Number.isNaN(value)) return 'Nan';
  if (!Number.isFinite(value)) return value < 0 ? '-Inf' : '+Inf';
  return `${value}`;
}

/** A request-path metric's text in pieces: `# HELP` and `# TYPE`, then each series' lines, `SERIES_PER_TURN` series per piece. */
export function* textInPieces<S>(name: string, help: string, type: 'counter' | 'histogram', series: Iterable<S>, seriesText: (one: S) => string): Iterable<string> {
  let piece = `# HELP ${name} ${escapeText(help)}\n# TYPE ${name} ${type}`;
  let inPiece = 0;
  for (const one of series) {
    if (inPiece === SERIES_PER_TURN) {
      yield piece;
      piece = '';
      inPiece = 0;
    }
    piece += `${piece === '' ? '' : '\n'}${seriesText(one)}`;
    inPiece++;
  }
  yield piece;
}

/**
 * The registry's exposition text, as `registry.metrics()` writes it, with a turn of the event
 * loop between metrics and between the pieces of a request-path metric: a scrape of a gateway
 * serving many APIs costs the requests in flight no pause longer than one piece.
 */
export async function metricsText(registry: Registry): Promise<string> {
  const metrics: string[] = [];
  for (const metric of registry.getMetricsAsArray()) {
    await nextTurn();
    if (!isTextInPieces(metric)) {
      metrics.push(await registry.getSingleMetricAsString(metric.name));
      continue;
    }
    const pieces: string[] = [];
    for (const piece of metric.textPieces()) {
      if (pieces.length > 0) await nextTurn();
      pieces.push(piece);
    }
    metrics.push(pieces.join('\n'));
  }
  return `${metrics.join('\n\n')}\n`;
}

/** What the health listener serves on /metrics. */
export interface MetricsSource {
  contentType: string;
  text(): Promise<string>;
}

/** A registry's metrics, a scrape in pieces. */
export const metricsOf = (registry: Registry): MetricsSource => ({ contentType: registry.contentType, text: () => metricsText(registry) });
