import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createLogger } from '../common/logger.ts';
import { startSidecar, type RunningSidecar } from '../sidecar/app.ts';
import { parseSidecarArgs, type SidecarOptions } from '../sidecar/cli.ts';
import { splitHostPort } from '../common/listen.ts';
import { startEchoUpstream, type EchoUpstream } from './upstream.ts';

/**
 * `npm start`: the gateway standalone on a copy of examples/ (folder mode, in-memory
 * store) in front of a JSON echo upstream (default 127.0.0.1:9000), and the curl commands that
 * show it working. `--once` (or GW_DEMO_ONCE=1) runs those requests itself, prints the
 * results and exits 0 when each behaved as printed, 1 otherwise. The listeners follow
 * the sidecar's GW_LISTEN / GW_ADMIN_LISTEN / GW_HEALTH_LISTEN and the upstream port
 * GW_DEMO_UPSTREAM_PORT, so the demo can run beside a gateway already on the defaults; the
 * sidecar's other variables (its secrets, bearer tokens, log level) are read as gw-sidecar
 * reads them.
 */

/** The upstream port examples/ names; the copy is rewritten when the demo uses another. */
const EXAMPLES_UPSTREAM_PORT = 9000;

interface DemoAddresses {
  listen: string;
  adminListen: string;
  healthListen: string;
  upstreamPort: number;
}

/** Throws on a malformed address before anything is started or copied. */
function demoAddresses(env: NodeJS.ProcessEnv): DemoAddresses {
  const addresses = {
    listen: env.GW_LISTEN || '127.0.0.1:8080',
    adminListen: env.GW_ADMIN_LISTEN || '127.0.0.1:8081',
    healthListen: env.GW_HEALTH_LISTEN || '127.0.0.1:8082',
    upstreamPort: Number(env.GW_DEMO_UPSTREAM_PORT || EXAMPLES_UPSTREAM_PORT),
  };
  for (const address of [addresses.listen, addresses.adminListen, addresses.healthListen]) splitHostPort(address);
  const port = addresses.upstreamPort;
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`invalid GW_DEMO_UPSTREAM_PORT "${env.GW_DEMO_UPSTREAM_PORT}": expected a port number 1-65535`);
  }
  return addresses;
}

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

function steps(proxy: string, admin: string, adminSecret: string): DemoStep[] {
  const keyless = `${proxy}/keyless/get`;
  const keyBody = JSON.stringify({ alias: 'demo-key', apply_policies: ['policy-limits'] });
  let createdKey = '';
  let createdHash = '';
  const limitsOf = (hash: string): string => `${admin}/gw/keys/${hash}/limits?api_id=auth-token-api&path=/auth/anything/hello`;
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
      title: 'An admin call: create a key (docs/behaviour.md#admin-operations) with the policy of examples/policy-limits.yaml',
      curl: `curl -s -X POST ${admin}/admin/org/keys -H 'Admin-Auth: ${adminSecret}' -H 'Content-Type: application/json' -d '${keyBody}'`,
      run: async () => {
        const init = { method: 'POST', headers: { 'admin-auth': adminSecret, 'content-type': 'application/json' }, body: keyBody };
        const created = (await (await expectStatus(`${admin}/admin/org/keys`, init, 200)).json()) as { key_id: string; key_hash: string };
        createdKey = created.key_id;
        createdHash = created.key_hash;
        return `key_id ${created.key_id.slice(0, 6)}…`;
      },
    },
    {
      title: 'Then call the auth-token API with that key (Authorization: <key_id from the answer above>)',
      curl: `curl -i ${proxy}/auth/anything/hello -H 'Authorization: <key_id>'`,
      run: async () => (await expectStatus(`${proxy}/auth/anything/hello`, { headers: { authorization: createdKey } }, 200)).status.toString(),
    },
    {
      title: "Why was I limited? The limits that key meets there, each level's source and count (key_hash from the create answer)",
      curl: `curl -s '${limitsOf('<key_hash>')}' -H 'X-GW-Authorization: ${adminSecret}'`,
      run: async () => {
        const res = await expectStatus(limitsOf(createdHash), { headers: { 'x-gw-authorization': adminSecret } }, 200);
        const body = (await res.json()) as { outcome: string; limits: { level: string; count: number; limit: number }[] };
        if (body.limits.length === 0) throw new Error('no limits in the answer');
        return `${body.outcome}: ${body.limits.map((l) => `${l.level} ${l.count}/${l.limit}`).join(', ')}`;
      },
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

/** A copy of examples/ (admin writes go to the folder; the repo's stays as shipped) aimed at the demo upstream. */
async function examplesCopy(upstreamPort: number): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-demo-'));
  await cp(new URL('../examples/', import.meta.url), dir, { recursive: true });
  if (upstreamPort === EXAMPLES_UPSTREAM_PORT) return dir;
  const from = `http://127.0.0.1:${EXAMPLES_UPSTREAM_PORT}`;
  for (const name of await readdir(dir)) {
    const file = join(dir, name);
    const text = await readFile(file, 'utf8');
    if (text.includes(from)) await writeFile(file, text.replaceAll(from, `http://127.0.0.1:${upstreamPort}`));
  }
  return dir;
}

interface Demo {
  upstream: EchoUpstream;
  sidecar: RunningSidecar;
  close(): Promise<void>;
}

/** The demo's secrets: the ones the environment gives, else made up for this run (and printed). */
interface DemoSecrets {
  admin: string;
  portal: string;
}

/**
 * The gateway's options as gw-sidecar reads them from the environment, on the demo's folder
 * and addresses: one process, and the in-memory store whatever GW_REDIS_URL says.
 */
function demoOptions(addresses: DemoAddresses, dir: string, secrets: DemoSecrets, env: NodeJS.ProcessEnv): SidecarOptions {
  const { GW_REDIS_URL: _redisUrl, GW_WORKERS: _workers, ...rest } = env;
  const flags = ['--config', dir, '--listen', addresses.listen, '--admin-listen', addresses.adminListen, '--health-listen', addresses.healthListen, '--workers', '1'];
  const options = parseSidecarArgs(flags, { GW_INSTANCE_ID: 'gw-demo', GW_LOG_LEVEL: 'warn', ...rest, GW_ADMIN_SECRET: secrets.admin, GW_PORTAL_SECRET: secrets.portal });
  if (options === 'help') throw new Error('unexpected --help');
  return options;
}

async function start(options: SidecarOptions, upstreamPort: number): Promise<Demo> {
  const upstream = await startEchoUpstream(upstreamPort);
  try {
    const sidecar = await startSidecar(options, {
      env: { ...process.env, GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' },
      logger: createLogger('gw-demo', options.logLevel),
      drainMs: 2000,
    });
    const close = async (): Promise<void> => {
      await sidecar.close();
      await upstream.close();
    };
    return { upstream, sidecar, close };
  } catch (err) {
    await upstream.close();
    throw err;
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { once: { type: 'boolean' } } });
  const once = values.once === true || process.env.GW_DEMO_ONCE === '1';
  const secrets = {
    admin: process.env.GW_ADMIN_SECRET || `demo-${randomBytes(9).toString('hex')}`,
    portal: process.env.GW_PORTAL_SECRET || `demo-portal-${randomBytes(9).toString('hex')}`,
  };
  let addresses: DemoAddresses;
  try {
    addresses = demoAddresses(process.env);
  } catch (err) {
    process.stderr.write(`gw demo: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const dir = await examplesCopy(addresses.upstreamPort);
  let options: SidecarOptions;
  try {
    options = demoOptions(addresses, dir, secrets, process.env);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    process.stderr.write(`gw demo: ${(err as Error).message}\n`);
    process.exit(2);
  }
  let demo: Demo;
  try {
    demo = await start(options, addresses.upstreamPort);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  const { upstream, sidecar } = demo;
  let stopping = false;
  const stop = async (code: number): Promise<void> => {
    if (stopping) return;
    stopping = true;
    await demo.close();
    await rm(dir, { recursive: true, force: true });
    process.exit(code);
  };
  const demoSteps = steps(sidecar.proxyUrl, sidecar.adminUrl, secrets.admin);
  process.stdout.write(
    `gw demo: gateway ${sidecar.proxyUrl} (admin ${sidecar.adminUrl}, health ${sidecar.healthUrl}), upstream ${upstream.url}\n` +
      `config: a copy of examples/ in ${dir}; in-memory store; admin secret: ${secrets.admin}; portal secret: ${secrets.portal}\n\n`,
  );
  for (const step of demoSteps) process.stdout.write(`# ${step.title}\n${step.curl}\n\n`);
  if (once) return stop((await selfCheck(demoSteps)) ? 0 : 1);
  process.stdout.write('Press Ctrl-C to stop.\n');
  process.on('SIGINT', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));
}

try {
  await main();
} catch (err) {
  process.stderr.write(`gw demo: cannot start: ${(err as Error).message}\n`);
  process.exit(1);
}
