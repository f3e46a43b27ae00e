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

/** Runs one command line; returns what to print. Throws PluginError for a user's mistake. */
export async function run(argv: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const { values, positionals } = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  const [command, ...rest] = positionals;
  if (values.help || command === undefined || command === 'help') return usage;
  const format = formatOf(values.output);
  const cluster = new Cluster({
    kubeconfig: values.kubeconfig ?? env.KUBECONFIG?.split(':')[0],
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
      // As `kubectl get KIND NAME -A` answers: a name names one object of one namespace.
      if (allNamespaces) throw new PluginError('a Key cannot be looked up by name across all namespaces: give its namespace with -n');
      return limits(cluster, { key: rest[0]!, api: values.api, path: values.path, method: values.method, ...access }, format);
    }
    case 'status':
      return status(cluster, allNamespaces, access, format);
    case 'events':
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
  try {
    process.stdout.write(await run(process.argv.slice(2), process.env));
  } catch (error) {
    process.stderr.write(`error: ${error instanceof ApiException ? serverRefusal(error.code, error.body) : oneLine(error)}\n`);
    process.exitCode = 1;
  }
}

if (import.meta.main) await main();
