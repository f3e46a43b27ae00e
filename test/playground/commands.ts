import { quote, type ShellResult } from './shell.ts';

/** One thing to try: the lines printed for the user, and what `--check` expects when it runs them. */
export interface TryStep {
  title: string;
  lines: string[];
  /** null when the result is what the step promises; otherwise why not. */
  verify(result: ShellResult): string | null;
  /** How long `--check` may re-run the step until it verifies (what it shows arrives asynchronously). */
  settleMs?: number;
}

export interface TryContext {
  namespace: string;
  proxyUrl: string;
  adminUrl: string;
  adminSecret: string;
}

const statusLine = (out: string): string => out.split('\n', 1)[0]?.trim() ?? '';

function expectExit(result: ShellResult): string | null {
  return result.code === 0 ? null : `exit ${result.code}: ${result.stderr.trim()}`;
}

function expectHttp(status: number) {
  return (result: ShellResult): string | null => {
    const line = statusLine(result.stdout);
    return expectExit(result) ?? (new RegExp(`^HTTP/\\S+ ${status}\\b`).test(line) ? null : `expected HTTP ${status}, got "${line}"`);
  };
}

/** The kubectl and curl commands the playground prints, in the order a user would try them. */
export function trySteps(c: TryContext): TryStep[] {
  const keyless = `${c.proxyUrl}/keyless/get`;
  const createKey = (variable: string, alias: string, policy: string): string => {
    const body = JSON.stringify({ alias, apply_policies: [policy] });
    const post = `curl -s -X POST -H ${quote(`Admin-Auth: ${c.adminSecret}`)} -H 'Content-Type: application/json' -d ${quote(body)} ${c.adminUrl}/admin/org/keys`;
    return `${variable}=$(${post} | node -pe 'JSON.parse(require("fs").readFileSync(0, "utf8")).key_id')`;
  };
  return [
    {
      title: 'Every gw resource of the examples, with its Ready condition',
      lines: [`kubectl get gw -n ${c.namespace}`],
      verify: (r) => expectExit(r) ?? (r.stdout.includes('keyless-api') ? null : 'keyless-api is not listed'),
    },
    {
      title: 'A request through the sidecar (keyless API, 5 requests per 10 s for everyone)',
      lines: [`curl -si ${keyless}`],
      verify: expectHttp(200),
    },
    {
      title: 'Six more: the last ones get 429 with X-RateLimit-* headers',
      lines: [`for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' ${keyless}; done; echo`],
      verify: (r) => expectExit(r) ?? (/\b429\b/.test(r.stdout) ? null : `no 429 in "${r.stdout.trim()}"`),
    },
    {
      title: 'Create a key with the admin API, then call the auth-token API with it',
      lines: [createKey('KEY', 'playground', 'policy-limits'), `curl -si -H "Authorization: $KEY" ${c.proxyUrl}/auth/get`],
      verify: expectHttp(200),
    },
    {
      title: 'The new Key, as the admin API wrote it (it stores only the key hash)',
      lines: [`kubectl get gwkey -n ${c.namespace}`],
      // The three Keys of the examples and the one just created.
      verify: (r) => expectExit(r) ?? (r.stdout.trim().split('\n').length - 1 >= 4 ? null : `expected 4 Keys:\n${r.stdout}`),
    },
    {
      title: 'Smoothing: a key of the "smoothed" policy sends a burst of 20 requests (its allowance starts at 20 per 10 s)',
      lines: [
        createKey('SKEY', 'smoothing', 'smoothed'),
        `for i in $(seq 20); do curl -s -o /dev/null -w '%{http_code} ' -H "Authorization: $SKEY" ${c.proxyUrl}/auth/get; done; echo`,
      ],
      verify: (r) => expectExit(r) ?? (r.stdout.trim() === Array(20).fill('200').join(' ') ? null : `expected twenty 200s, got "${r.stdout.trim()}"`),
    },
    {
      title: 'The smoothing Events (RateLimitSmoothingDown follows ~10 s after the burst, on the next request)',
      lines: [`kubectl get events -n ${c.namespace} --field-selector reason=RateLimitSmoothingUp`],
      verify: (r) => expectExit(r) ?? (r.stdout.includes('RateLimitSmoothingUp') ? null : 'no RateLimitSmoothingUp event yet'),
      settleMs: 15_000,
    },
  ];
}
