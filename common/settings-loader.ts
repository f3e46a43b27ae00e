import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { gatewaySettingsSchema, type GatewaySettings } from '../crds/settings.ts';

/**
 * Gateway settings in layers (docs/architecture.md#settings): defaults < compiled config settings < settings
 * file < `GW_<OPTION>` environment variables. Every layer is validated by the one zod
 * schema of crds/settings.ts; an invalid value fails with a message naming the option
 * and where it came from, so a process can refuse to start on it.
 */

export class SettingsError extends Error {
  readonly code = 'invalid_settings';
}

type SettingsLayer = Record<string, unknown>;

const optionNames = Object.keys(gatewaySettingsSchema.shape);

export const envVarOf = (option: string): string => `GW_${option.toUpperCase()}`;

/** Env values are strings; JSON literals (true, 5) get their type so the schema can check them. */
function coerceEnvValue(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

function settingsFromEnv(env: NodeJS.ProcessEnv): SettingsLayer {
  const layer: SettingsLayer = {};
  for (const option of optionNames) {
    const raw = env[envVarOf(option)];
    if (raw !== undefined && raw !== '') layer[option] = coerceEnvValue(raw);
  }
  return layer;
}

function settingsFromFile(path: string): SettingsLayer {
  let parsed: unknown;
  try {
    parsed = parseYaml(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new SettingsError(`settings file ${path}: ${(err as Error).message}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new SettingsError(`settings file ${path}: expected a mapping of option: value`);
  }
  return parsed as SettingsLayer;
}

export interface LocalSettings {
  /** The settings file layer (already read). */
  file: SettingsLayer;
  filePath?: string;
  env: SettingsLayer;
}

function describeOrigin(option: string, local: LocalSettings): string {
  if (option in local.env) return ` (from ${envVarOf(option)})`;
  if (option in local.file) return ` (from ${local.filePath ?? 'the settings file'})`;
  return '';
}

/** Read the sidecar's own layers once at start; validates them on their own so a bad value stops the process early. */
export function loadLocalSettings(filePath: string | undefined, env: NodeJS.ProcessEnv): LocalSettings {
  const local: LocalSettings = { file: filePath ? settingsFromFile(filePath) : {}, filePath, env: settingsFromEnv(env) };
  resolveSettings(undefined, local);
  return local;
}

/** Merge the layers over the compiled config's settings and validate the result. */
export function resolveSettings(compiled: Partial<GatewaySettings> | undefined, local: LocalSettings): GatewaySettings {
  const merged = { ...compiled, ...local.file, ...local.env };
  const result = gatewaySettingsSchema.safeParse(merged);
  if (result.success) return result.data;
  const messages = result.error.issues.map((issue) => {
    const option = issue.path.length > 0 ? String(issue.path[0]) : (issue as { keys?: string[] }).keys?.join(', ') ?? '';
    return `invalid setting ${option}${describeOrigin(option, local)}: ${issue.message}`;
  });
  throw new SettingsError(messages.join('; '));
}
