/**
 * What the journey needs of a cluster: kubectl and helm on PATH (KUBECONFIG chooses the
 * cluster), a client pod inside the cluster that sends HTTP requests, and bounded waiting.
 */
import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';

const exec = promisify(execFile);

export class JourneyError extends Error {}

export function check(ok: boolean, message: string): asserts ok {
  if (!ok) throw new JourneyError(message);
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a tool to completion; a non-zero exit throws unless `allowFail`. */
export async function run(
  command: string,
  args: string[],
  opts: { input?: string; allowFail?: boolean; timeoutMs?: number; cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<RunResult> {
  const child = exec(command, args, { timeout: opts.timeoutMs ?? 120_000, maxBuffer: 64 * 1024 * 1024, cwd: opts.cwd, env: opts.env ?? process.env });
  if (opts.input !== undefined) child.child.stdin?.end(opts.input);
  try {
    const { stdout, stderr } = await child;
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string; message: string };
    const result = { code: typeof e.code === 'number' ? e.code : 1, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message };
    if (opts.allowFail) return result;
    throw new JourneyError(`${command} ${args.join(' ')} exited with ${result.code}: ${result.stderr.trim().slice(0, 2000)}`);
  }
}

export async function kubectl(args: string[], opts: { input?: string; allowFail?: boolean; timeoutMs?: number } = {}): Promise<string> {
  return (await run('kubectl', args, opts)).stdout;
}

export async function kubectlJson<T>(args: string[]): Promise<T> {
  return JSON.parse(await kubectl([...args, '-o', 'json'])) as T;
}

/** Retries `attempt` until it returns a value other than undefined, for at most `timeoutMs`. */
export async function eventually<T>(what: string, timeoutMs: number, attempt: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await attempt();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new JourneyError(`${what}: not within ${timeoutMs / 1000} s${last ? ` (last error: ${(last as Error).message})` : ''}`);
    }
    await sleep(1_000);
  }
}

export interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface HttpRequest {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  /** How many times to send it. */
  count?: number;
  /** Send them all at once instead of one after another. */
  parallel?: boolean;
}

// Runs in the client pod on the gateway image's Node: one JSON line of answers.
const CLIENT_SCRIPT = `
const r = JSON.parse(process.argv[1]);
const one = async () => {
  try {
    const res = await fetch(r.url, { method: r.method ?? 'GET', headers: r.headers ?? {}, body: r.body, signal: AbortSignal.timeout(20000) });
    return { status: res.status, headers: Object.fromEntries(res.headers), body: (await res.text()).slice(0, 2000) };
  } catch (err) {
    return { status: 0, headers: {}, body: String(err && err.cause ? err.cause.code || err.cause : err) };
  }
};
(async () => {
  const n = r.count ?? 1;
  const out = [];
  if (r.parallel) out.push(...(await Promise.all(Array.from({ length: n }, one))));
  else for (let i = 0; i < n; i++) out.push(await one());
  console.log(JSON.stringify(out));
})();
`;

/** A pod inside the cluster that sends the journey's requests, as an app in the cluster would. */
export class ClientPod {
  readonly namespace: string;
  readonly name = 'journey-client';

  constructor(namespace: string) {
    this.namespace = namespace;
  }

  async start(image: string): Promise<void> {
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: this.name, namespace: this.namespace, labels: { app: 'journey-client' } },
      spec: {
        automountServiceAccountToken: false,
        terminationGracePeriodSeconds: 1,
        securityContext: { runAsNonRoot: true, runAsUser: 65532, seccompProfile: { type: 'RuntimeDefault' } },
        containers: [{
          name: 'client',
          image,
          command: ['node', '-e', 'setInterval(() => {}, 1 << 30)'],
          resources: { requests: { cpu: '10m', memory: '32Mi' }, limits: { memory: '128Mi' } },
          securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
        }],
      },
    };
    await kubectl(['apply', '-f', '-'], { input: JSON.stringify(pod) });
    await kubectl(['-n', this.namespace, 'wait', '--for=condition=Ready', `pod/${this.name}`, '--timeout=120s'], { timeoutMs: 130_000 });
  }

  async send(request: HttpRequest): Promise<HttpAnswer[]> {
    const out = await kubectl(['-n', this.namespace, 'exec', this.name, '--', 'node', '-e', CLIENT_SCRIPT, JSON.stringify(request)], { timeoutMs: 120_000 });
    return JSON.parse(out.trim().split('\n').pop() ?? '[]') as HttpAnswer[];
  }

  async one(request: Omit<HttpRequest, 'count' | 'parallel'>): Promise<HttpAnswer> {
    const [answer] = await this.send(request);
    check(answer !== undefined, `no answer from ${request.url}`);
    return answer;
  }
}

export function statuses(answers: HttpAnswer[]): string {
  return answers.map((a) => a.status).join(' ');
}
