import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createLogger } from '../common/logger.ts';
import { startSidecar, type RunningSidecar } from './app.ts';
import { startEchoUpstream, type EchoUpstream } from './demo-upstream.ts';

/**
 * `npm start`: the gateway standalone on a copy of examples/ (folder mode, in-memory
 * store) in front of a JSON echo upstream on 127.0.0.1:9000, and the curl commands that
 * show it working. `--once` (or GW_DEMO_ONCE=1) runs those requests itself, prints the
 * results and exits 0 when each behaved as printed, 1 otherwise.
 */

const proxy = 'http://127.0.0.1:8080';
const admin = 'http://127.0.0.1:8081';

interface DemoStep {
  title: string;
  curl: string;
  run(): Promise<string | null>;
}

async function expectStatus(url: string, init: RequestInit, status: number): Promise<Response> {
  const res = await fetch(url, init);
  if (res.status !== status) throw new Error(`${url}: expected ${status}, got ${res.status} ${await res.text()}`);
  return res;
}

function steps(adminSecret: string): DemoStep[] {
  const keyless = `${proxy}/keyless/get`;
  const keyBody = JSON.stringify({ alias: 'demo-key', apply_policies: ['policy-limits'] });
  let createdKey = '';
  return [
    {
      title: 'A proxied request (keyless API → demo upstream): 200 and the echoed request',
      curl: `curl -i ${keyless}`,
      run: async () => (await expectStatus(keyless, {}, 200)).status.toString(),
    },
    {
      title: 'The X-RateLimit-* headers (the demo sets rate_limit_response_headers: rate_limits)',
      curl: `curl -s -D - -o /dev/null ${keyless}`,
      run: async () => {
        const res = await expectStatus(keyless, {}, 200);
        const limit = res.headers.get('x-ratelimit-limit');
        if (limit === null) throw new Error('no X-RateLimit-Limit header');
        return `limit ${limit}, remaining ${res.headers.get('x-ratelimit-remaining')}, reset ${res.headers.get('x-ratelimit-reset')}`;
      },
    },
    {
      title: 'A 429: the keyless API allows 5 requests per 10 s for all callers together',
      curl: `for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code}\\n' ${keyless}; done`,
      run: async () => {
        for (;;) {
          const res = await fetch(keyless);
          const body = await res.text();
          if (res.status === 429) return body;
          if (res.status !== 200) throw new Error(`unexpected ${res.status}`);
        }
      },
    },
    {
      title: 'An admin call: create a key (SPEC §4.1) with the policy of examples/policy-limits.yaml',
      curl: `curl -s -X POST ${admin}/admin/org/keys -H 'Admin-Auth: ${adminSecret}' -H 'Content-Type: application/json' -d '${keyBody}'`,
      run: async () => {
        const init = { method: 'POST', headers: { 'admin-auth': adminSecret, 'content-type': 'application/json' }, body: keyBody };
        const created = (await (await expectStatus(`${admin}/admin/org/keys`, init, 200)).json()) as { key_id: string };
        createdKey = created.key_id;
        return `key_id ${created.key_id.slice(0, 6)}…`;
      },
    },
    {
      title: 'Then call the auth-token API with that key (Authorization: <key_id from the answer above>)',
      curl: `curl -i ${proxy}/auth/anything/hello -H 'Authorization: <key_id>'`,
      run: async () => (await expectStatus(`${proxy}/auth/anything/hello`, { headers: { authorization: createdKey } }, 200)).status.toString(),
    },
  ];
}

async function selfCheck(demoSteps: DemoStep[]): Promise<boolean> {
  let ok = true;
  for (const step of demoSteps) {
    try {
      process.stdout.write(`ok   ${step.title}: ${await step.run()}\n`);
    } catch (err) {
      ok = false;
      process.stdout.write(`FAIL ${step.title}: ${(err as Error).message}\n`);
    }
  }
  return ok;
}

async function start(adminSecret: string): Promise<{ upstream: EchoUpstream; sidecar: RunningSidecar; dir: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-demo-'));
  // Admin writes go to the folder: a copy keeps examples/ as shipped.
  await cp(new URL('../examples/', import.meta.url), dir, { recursive: true });
  const upstream = await startEchoUpstream(9000);
  const sidecar = await startSidecar(
    {
      configDir: dir,
      listen: '127.0.0.1:8080',
      adminListen: '127.0.0.1:8081',
      healthListen: '127.0.0.1:8082',
      redisUrl: undefined,
      settingsFile: undefined,
      apis: '*',
      namespace: 'default',
      instanceId: 'gw-demo',
      adminSecret,
      portalSecret: randomBytes(12).toString('hex'),
      kubeconfig: undefined,
    },
    {
      env: { ...process.env, GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' },
      logger: createLogger('gw-demo', process.env.GW_LOG_LEVEL ?? 'warn'),
      drainMs: 2000,
    },
  );
  return { upstream, sidecar, dir };
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { once: { type: 'boolean' } } });
  const once = values.once === true || process.env.GW_DEMO_ONCE === '1';
  const adminSecret = process.env.GW_ADMIN_SECRET || `demo-${randomBytes(9).toString('hex')}`;
  const { upstream, sidecar, dir } = await start(adminSecret);
  const stop = async (code: number): Promise<never> => {
    await sidecar.close();
    await upstream.close();
    await rm(dir, { recursive: true, force: true });
    process.exit(code);
  };
  const demoSteps = steps(adminSecret);
  process.stdout.write(
    `gw demo: gateway ${proxy} (admin ${admin}, health http://127.0.0.1:8082), upstream ${upstream.url}\n` +
      `config: a copy of examples/ in ${dir}; in-memory store; admin secret: ${adminSecret}\n\n`,
  );
  for (const step of demoSteps) process.stdout.write(`# ${step.title}\n${step.curl}\n\n`);
  if (once) await stop((await selfCheck(demoSteps)) ? 0 : 1);
  process.stdout.write('Press Ctrl-C to stop.\n');
  process.on('SIGINT', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));
}

await main();
