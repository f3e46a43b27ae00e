import { stringify } from 'yaml';

/** `-o`: kubectl's own output names; the default is a table. */
export const outputFormats = ['table', 'wide', 'json', 'yaml'] as const;
export type OutputFormat = (typeof outputFormats)[number];

/** A cell's first line, `...` marking the rest, as kubectl prints a message of several: a row stays one line. */
const firstLine = (cell: string): string => cell.replace(/\r?\n[^]*$/, '...');

/** Columns padded to their widest cell and three spaces apart, as kubectl prints. */
export function table(header: readonly string[], cells: readonly (readonly string[])[]): string {
  const rows = cells.map((row) => row.map(firstLine));
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i]?.length ?? 0)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join('   ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}

/** The machine-readable forms print the data itself. */
export function structured(format: 'json' | 'yaml', data: unknown): string {
  return format === 'json' ? `${JSON.stringify(data, null, 2)}\n` : stringify(data);
}

/** kubectl's ages: 45s, 12m, 3h, 2d. */
export function age(since: Date, now = new Date()): string {
  const seconds = Math.max(0, Math.floor((now.getTime() - since.getTime()) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86_400)}d`;
}
