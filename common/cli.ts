import { parseArgs } from 'node:util';
import { z } from 'zod';
import { MAX_TIMER_MS } from '../crds/settings.ts';
import { parseRedisUrl, RedisUrlError } from './redis-url.ts';

/**
 * One option of a binary: its flag (none: set by its environment variable only), its
 * environment variable, what it does, and its zod schema, which holds the default. Both
 * binaries (gw-operator, gw-sidecar) describe their options as one table of these; the
 * table drives parsing, validation, the options' type and `--help`.
 */
export interface CliOption {
  flag?: string;
  /** What the flag takes, shown in `--help` (HOST:PORT, URL, …). */
  value?: string;
  env: string;
  help: string;
  schema: z.ZodType;
}

export type CliTable = Record<string, CliOption>;

type CliShape<T extends CliTable> = { [K in keyof T]: T[K]['schema'] };

/** The values a table parses to, keyed as the table is. */
export type CliValues<T extends CliTable> = z.output<z.ZodObject<CliShape<T>>>;

/** The input the table's schema accepts: what a test or an embedding caller may give. */
export type CliInput<T extends CliTable> = z.input<z.ZodObject<CliShape<T>>>;

/** A flag or variable the binary refuses; the message names both and never repeats a URL. */
export class OptionsError extends Error {
  readonly code = 'invalid_options';
}

export const booleanOption = z.enum(['true', 'false']).transform((v) => v === 'true');
export const listenOption = z
  .string()
  .regex(/^(\[[^\]\s]+\]|[^:\s]*):\d{1,5}$/, 'must be HOST:PORT')
  .refine((listen) => !(Number(listen.slice(listen.lastIndexOf(':') + 1)) > 65535), 'the port must be from 0 to 65535');
/**
 * A number of an option, written in decimal digits (`fraction`: with a decimal part too), from
 * `min` to `max`; `what` names it in the refusal. Number() alone, as z.coerce does it, also took
 * `0x10`, `1e3`, `Infinity`, and a blank value as 0. Numbers given as numbers (tests, the demo)
 * are taken as they are.
 */
function decimalOption(what: string, min: number, max: number, fraction: boolean) {
  const message = `must be ${what} from ${min} to ${max.toLocaleString('en-US')}, in decimal digits`;
  const digits = fraction ? /^\d+(\.\d+)?$/ : /^\d+$/;
  const number = z.number({ error: message }).min(min, { error: message }).max(max, { error: message });
  return z.preprocess((value) => (typeof value === 'string' && digits.test(value) ? Number(value) : value), fraction ? number : number.int({ error: message }));
}

export const wholeNumberOption = (min: number, max: number) => decimalOption('a whole number', min, max, false);
/** Longer periods than Node's timers hold would fire at once, and again at once. */
export const MAX_TIMER_SECONDS = Math.floor(MAX_TIMER_MS / 1000);
/** A period of whole or fractional seconds, from one second to what a timer holds. */
export const periodSecondsOption = decimalOption('a number of seconds', 1, MAX_TIMER_SECONDS, true);
/** A namespace's name as the API server allows it (an RFC 1123 label): any other is one no object can be in. */
export const namespaceOption = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be a namespace name: lowercase letters, digits and -, starting and ending with a letter or digit, at most 63');
/** GW_LOG_LEVEL: one of pino's levels, checked at start like any option (an unknown one made pino throw a stack trace). */
export const logLevelOption = z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info');
/** The message of a bad URL never repeats the URL: it may hold a password. */
export const redisUrlOption = z.string().superRefine((url, ctx) => {
  try {
    parseRedisUrl(url);
  } catch (error) {
    if (!(error instanceof RedisUrlError)) throw error;
    ctx.addIssue({ code: 'custom', message: error.message });
  }
});

/** A JSON value given as a string, then checked by `schema`. */
export function jsonOption<S extends z.ZodType>(schema: S, example: string) {
  return z.string().transform((json, ctx) => {
    try {
      return JSON.parse(json) as unknown;
    } catch {
      ctx.addIssue({ code: 'custom', message: `must be JSON such as ${example}` });
      return z.NEVER;
    }
  }).pipe(schema);
}

/** The schema of the whole table, for callers that build options without flags (tests, the demo). */
export function cliSchema<T extends CliTable>(table: T): z.ZodObject<CliShape<T>> {
  const shape = Object.fromEntries(Object.entries(table).map(([key, option]) => [key, option.schema]));
  return z.object(shape) as z.ZodObject<CliShape<T>>;
}

/** How an option is named in a refusal: its flag and its variable. */
export const optionName = (option: CliOption): string => (option.flag ? `--${option.flag} (${option.env})` : option.env);

/**
 * Flags and environment into validated values. A flag wins over its variable, which wins
 * over the schema's default; an empty variable counts as unset. `check` sees the parsed
 * values and names a problem between options. 'help': --help was given.
 */
export function parseCli<T extends CliTable>(
  table: T,
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
  check?: (values: CliValues<T>) => { option: keyof T; message: string } | undefined,
): CliValues<T> | 'help' {
  const flagged = Object.entries(table).filter(([, option]) => option.flag !== undefined);
  let values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  try {
    values = parseArgs({
      args: [...argv],
      options: Object.fromEntries([...flagged.map(([, option]) => [option.flag!, { type: 'string' as const }]), ['help', { type: 'boolean' as const }]]),
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (error) {
    throw new OptionsError((error as Error).message);
  }
  if (values.help === true) return 'help';
  const raw: Record<string, string> = {};
  for (const [key, option] of Object.entries(table)) {
    const fromFlag = option.flag ? values[option.flag] : undefined;
    // An empty variable is unset (a template's empty value); an empty flag is a mistake, which
    // would otherwise also hide the variable.
    if (fromFlag === '') throw new OptionsError(`${optionName(option)}: is empty; leave the flag out for its default`);
    const value = typeof fromFlag === 'string' ? fromFlag : env[option.env];
    if (value !== undefined && value !== '') raw[key] = value;
  }
  const result = cliSchema(table).safeParse(raw);
  if (!result.success) {
    throw new OptionsError(
      result.error.issues
        .map((issue) => {
          const key = String(issue.path[0]);
          const option = table[key];
          // Inside a JSON value, the entry and field at fault too.
          const inside = issue.path.slice(1).join('.');
          const message = raw[key] === undefined && issue.path.length === 1 ? 'is required' : issue.message;
          return option ? `${optionName(option)}: ${inside ? `${inside}: ` : ''}${message}` : message;
        })
        .join('; '),
    );
  }
  const parsed = result.data as CliValues<T>;
  const problem = check?.(parsed);
  if (problem) throw new OptionsError(`${optionName(table[problem.option]!)}: ${problem.message}`);
  return parsed;
}

/** The table's rows of `--help`: flag, variable, what it does. */
export function cliHelpRows(table: CliTable): string[] {
  return Object.values(table).map((option) => {
    const flag = option.flag ? `--${option.flag}${option.value ? ` ${option.value}` : ''}` : '';
    return `  ${flag.padEnd(30)} ${option.env.padEnd(30)} ${option.help}`;
  });
}
