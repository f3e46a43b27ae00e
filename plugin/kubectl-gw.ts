import { parseArgs } from 'node:util';
import { ApiException } from '@kubernetes/client-node';
import { Cluster, PluginError, serverRefusal } from './cluster.ts';
import { events, limits, status } from './commands.ts';
import { outputFormats, type OutputFormat } from './output.ts';

const usage = `kubectl gw: gw's view of a cluster (README.md#kubectl-gw)

Commands:
  kubectl gw limits KEY --api API_ID [--path PATH] [--method METHOD] [--admin-url URL] [--admin-namespace NS]
      the limits a request of Key KEY would meet now, each level's source, count and reset,
      read from the admin gateway (through the API server, or at --admin-url; --admin-namespace:
      where gw is installed, when there are several)
  kubectl gw status [-A] [--admin-url URL]
      every gw resource that is not Ready, with its reason, and the gateways seen live
      through their heartbeats (read from the admin gateway, as for limits)
  kubectl gw events [-A]    gw's Events (operator, smoothing), newest first

Flags, as kubectl's: -n/--namespace, -A/--all-namespaces, --context, --kubeconfig,
  -o/--output json|yaml|wide
Environment: GW_ADMIN_SECRET (else read from the admin gateway's Secret)
`;

const options = {
  namespace: { type: 'string', short: 'n' },
  'all-namespaces': { type: 'boolean', short: 'A' },
  context: { type: 'string' },
  kubeconfig: { type: 'string' },
  output: { type: 'string', short: 'o' },
  api: { type: 'string' },
  path: { type: 'string' },
  method: { type: 'string' },
  'admin-url': { type: 'string' },
  'admin-namespace': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** An object's name as the API server allows it (a DNS-1123 subdomain). */
const objectName = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

type OptionName = keyof typeof options;
const isOption = (name: string): name is OptionName => Object.hasOwn(options, name);
const shorthands = new Map(Object.entries(options).flatMap(([name, option]) => ('short' in option ? [[option.short as string, name as OptionName]] : [])));

/** A flag as read so far: parseArgs' form of it, or a string flag whose value is the next argument. */
type Flag = string | { name: OptionName; shown: string };

/** pflag's booleans (strconv.ParseBool): `--all-namespaces=false` turns it off, as a later flag wins. */
function booleanFlag(name: OptionName, value: string): string {
  if (/^(1|t|T|true|TRUE|True)$/.test(value)) return `--${name}`;
  if (/^(0|f|F|false|FALSE|False)$/.test(value)) return `--no-${name}`;
  throw new PluginError(`invalid argument "${value}" for "--${name}" flag: it takes true or false`);
}

function longFlag(arg: string): Flag {
  const [, name = '', value] = /^--([^=]*)(?:=(.*))?$/s.exec(arg) ?? [];
  if (!isOption(name)) throw new PluginError(`unknown flag: --${name}`);
  if (options[name].type === 'boolean') return value === undefined ? arg : booleanFlag(name, value);
  return value === undefined ? { name, shown: arg } : arg;
}

/** `-A`, `-An demo`, `-ndemo`, `-n=demo`, `-ojson`, `-A=false`: a group of shorthands, the last string one taking the rest. */
function shorthandFlags(arg: string): Flag[] {
  const flags: Flag[] = [];
  for (let i = 1; i < arg.length; i++) {
    const name = shorthands.get(arg[i]!);
    if (!name) throw new PluginError(`unknown shorthand flag: '${arg[i]}' in ${arg}`);
    const rest = arg.slice(i + 1);
    if (options[name].type === 'string') return [...flags, rest === '' ? { name, shown: `'${arg[i]}' in ${arg}` } : `--${name}=${rest.replace(/^=/, '')}`];
    if (rest.startsWith('=')) return [...flags, booleanFlag(name, rest.slice(1))];
    flags.push(`--${name}`);
  }
  return flags;
}

/**
 * The command line in the forms parseArgs reads (`--name=value`, `--name`, `--no-name`), from
 * kubectl's (pflag's), which parseArgs reads otherwise or refuses: `-n=demo` would be namespace
 * "=demo", `-A=true` an unknown option. A string flag takes the next argument whatever it is.
 */
function pflagForms(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return [...out, ...argv.slice(i)];
    const flags = arg.startsWith('--') ? [longFlag(arg)] : arg.startsWith('-') && arg !== '-' ? shorthandFlags(arg) : [arg];
    for (const flag of flags) {
      if (typeof flag === 'string') out.push(flag);
      else if (i + 1 < argv.length) out.push(`--${flag.name}=${argv[++i]}`);
      else throw new PluginError(`flag needs an argument: ${flag.shown}`);
    }
  }
  return out;
}

function formatOf(output: string | undefined): OutputFormat {
  if (output === undefined) return 'table';
  if ((outputFormats as readonly string[]).includes(output) && output !== 'table') return output as OutputFormat;
  throw new PluginError(`unable to match a printer suitable for the output format "${output}", allowed formats are: json,wide,yaml`);
}

/** --admin-url checked before anything is read: a mistyped one is the user's mistake, not a gateway's failure. */
function adminUrlOf(adminUrl: string | undefined): string | undefined {
  if (adminUrl === undefined) return undefined;
  if (!URL.canParse(adminUrl) || !/^https?:$/.test(new URL(adminUrl).protocol)) {
    throw new PluginError(`--admin-url must be an http:// or https:// URL, such as http://127.0.0.1:8081, got "${adminUrl.slice(0, 100)}"`);
  }
  return adminUrl;
}

/** As kubectl refuses them: an argument a command would not read is a mistake, such as flags after `--`. */
function noArguments(command: string, rest: string[]): void {
  if (rest.length > 0) throw new PluginError(`unexpected arguments: ${rest.join(' ')} (kubectl gw ${command} takes none)`);
}

/** Runs one command line; returns what to print. Throws PluginError for a user's mistake. */
export async function run(argv: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const { values, positionals } = parseArgs({ args: pflagForms(argv), options, allowPositionals: true, allowNegative: true, strict: true });
  const [command, ...rest] = positionals;
  if (values.help || command === undefined || command === 'help') return usage;
  const format = formatOf(values.output);
  const cluster = new Cluster({
    kubeconfig: values.kubeconfig,
    kubeconfigList: env.KUBECONFIG,
    context: values.context,
    namespace: values.namespace,
    adminNamespace: values['admin-namespace'],
  });
  const allNamespaces = values['all-namespaces'] ?? false;
  const access = { adminUrl: adminUrlOf(values['admin-url']), adminSecret: env.GW_ADMIN_SECRET };
  switch (command) {
    case 'limits': {
      if (rest.length !== 1) throw new PluginError('limits takes one Key name: kubectl gw limits KEY --api API_ID');
      if (!values.api) throw new PluginError('limits needs --api API_ID');
      // As kubectl refuses them: an empty name would read the list, one with a / a subresource.
      if (rest[0] === '') throw new PluginError('resource name may not be empty');
      if (!objectName.test(rest[0]!)) throw new PluginError(`"${rest[0]}" is not a Key's name: lowercase letters, digits, - and ., at most 253`);
      // As `kubectl get KIND NAME -A` answers: a name names one object of one namespace.
      if (allNamespaces) throw new PluginError('a Key cannot be looked up by name across all namespaces: give its namespace with -n');
      return limits(cluster, { key: rest[0]!, api: values.api, path: values.path, method: values.method, ...access }, format);
    }
    case 'status':
      noArguments(command, rest);
      return status(cluster, allNamespaces, access, format);
    case 'events':
      noArguments(command, rest);
      return events(cluster, allNamespaces, format);
    default:
      throw new PluginError(`unknown command "${command}" for "kubectl gw": see kubectl gw --help`);
  }
}

/**
 * An error as one line, with what caused it: a fetch that failed says why only in its cause
 * (`fetch failed: connect ECONNREFUSED 127.0.0.1:6443`).
 */
function oneLine(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${oneLine(error.cause)}` : '';
  return `${error.message}${cause}`.replace(/\s*\n\s*/g, ' ');
}

/** The executable: prints the result, or `error: …` on stderr and exits 1, as kubectl does. */
export async function main(): Promise<void> {
  // A reader that stopped reading (`kubectl gw events -o yaml | head`) wants no more: no error.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') process.stderr.write(`error: ${oneLine(error)}\n`);
    process.exit(error.code === 'EPIPE' ? undefined : 1);
  });
  try {
    process.stdout.write(await run(process.argv.slice(2), process.env));
  } catch (error) {
    process.stderr.write(`error: ${error instanceof ApiException ? serverRefusal(error.code, error.body) : oneLine(error)}\n`);
    process.exitCode = 1;
  }
}

if (import.meta.main) await main();
