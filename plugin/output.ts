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

const MINUTE = 60;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const YEAR = 365 * DAY;

/** Two units, the second left out when 0: 5m14s, 3d, 2y17d. */
const twoUnits = (seconds: number, big: number, bigUnit: string, small: number, smallUnit: string): string => {
  const rest = Math.floor((seconds % big) / small);
  return `${Math.floor(seconds / big)}${bigUnit}${rest === 0 ? '' : `${rest}${smallUnit}`}`;
};

/** A duration as kubectl's ages print it (its HumanDuration): 45s, 5m14s, 12m, 7h3m, 20h, 3d5h, 30d, 2y17d. */
export function duration(totalSeconds: number): string {
  const seconds = Math.max(0, Math.floor(totalSeconds));
  if (seconds < 2 * MINUTE) return `${seconds}s`;
  if (seconds < 10 * MINUTE) return twoUnits(seconds, MINUTE, 'm', 1, 's');
  if (seconds < 3 * HOUR) return `${Math.floor(seconds / MINUTE)}m`;
  if (seconds < 8 * HOUR) return twoUnits(seconds, HOUR, 'h', MINUTE, 'm');
  if (seconds < 2 * DAY) return `${Math.floor(seconds / HOUR)}h`;
  if (seconds < 8 * DAY) return twoUnits(seconds, DAY, 'd', HOUR, 'h');
  if (seconds < 2 * YEAR) return `${Math.floor(seconds / DAY)}d`;
  if (seconds < 8 * YEAR) return twoUnits(seconds, YEAR, 'y', DAY, 'd');
  return `${Math.floor(seconds / YEAR)}y`;
}

/** kubectl's AGE and LAST SEEN: the time since. */
export const age = (since: Date, now = new Date()): string => duration((now.getTime() - since.getTime()) / 1000);
