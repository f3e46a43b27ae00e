import { runKubectl } from './kubectl.ts';

/** Requests the API server served, by `VERB resource[/subresource]`, from its `apiserver_request_total`. */
export type RequestCounts = Map<string, number>;

/** Whether a `VERB resource` line of these counts is a write. */
export const isWrite = (what: string): boolean => /^(POST|PUT|PATCH|DELETE|APPLY) /.test(what);

/** Reads the counter now; leases (leader election) are left out, they tick on their own. */
export async function apiRequests(kubeconfig: string): Promise<RequestCounts> {
  const { stdout } = await runKubectl(kubeconfig, ['get', '--raw', '/metrics']);
  const counts: RequestCounts = new Map();
  for (const m of stdout.matchAll(/^apiserver_request_total\{([^}]*)\} (\d+)/gm)) {
    const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    if (labels.resource === 'leases') continue;
    const what = `${labels.verb} ${labels.resource}${labels.subresource ? `/${labels.subresource}` : ''}`;
    counts.set(what, (counts.get(what) ?? 0) + Number(m[2]));
  }
  return counts;
}

/** What was served between two readings, largest first, and how many of those were writes. */
export function requestsBetween(before: RequestCounts, after: RequestCounts): { counts: RequestCounts; lines: string[]; writes: number } {
  const diff = [...after].map(([what, n]) => [what, n - (before.get(what) ?? 0)] as const).filter(([, n]) => n > 0);
  diff.sort((a, b) => b[1] - a[1]);
  const writes = diff.filter(([what]) => isWrite(what)).reduce((sum, [, n]) => sum + n, 0);
  return { counts: new Map(diff), lines: diff.map(([what, n]) => `${what} ${n}`), writes };
}
