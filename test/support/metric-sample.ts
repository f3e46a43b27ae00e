/**
 * The value of one series in a Prometheus text exposition (`name`, or `name{labels}` exactly as
 * the exposition prints it), or undefined when the text has none.
 */
export function sampleValue(text: string, series: string): number | undefined {
  const prefix = `${series} `;
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  return line === undefined ? undefined : Number(line.slice(prefix.length));
}
