/**
 * `npm run images` and the test-bed images on this machine: each archive is a valid OCI
 * image with the Dockerfile's config, holds exactly what it should, and its program runs
 * from the image alone, as its user, on a read-only root (so no library, file or
 * permission is missing).
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildImages, DEFAULT_OUT, IMAGE_RUNTIME, JEMALLOC, PATH_ENV, PRODUCT_IMAGES, ROOT } from '../../../scripts/images/build.ts';
import { sharedLibraries } from '../../../scripts/images/rootfs.ts';
import { buildImageFromBinary, pauseImage, toolsImage } from '../../../scripts/images/test-bed.ts';
import { ensureDebianPackages } from '../../harness/install-debian.ts';
import { ensureImageHostFiles } from '../../harness/install-image-host-files.ts';
import { freePort } from '../../harness/ports.ts';
import { isAlive } from '../../harness/procs.ts';
import { withContainerd } from './containerd.ts';
import { extractImage, runImage, runImageToEnd, type ExtractedImage } from './image-run.ts';

const TAG = 'images-test';
const sha256 = (data: Buffer): string => `sha256:${createHash('sha256').update(data).digest('hex')}`;

async function waitFor200(url: string, child: ReturnType<typeof runImage>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && child.exitCode === null) {
    const ok = await fetch(url).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`${url} did not answer 200 within ${timeoutMs} ms (exit code ${child.exitCode})`);
}

async function stop(child: ReturnType<typeof runImage>): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const closed = once(child, 'close');
  child.kill('SIGTERM');
  const [code] = (await closed) as [number | null];
  return code;
}

describe('npm run images', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-images-'));
  const images: Record<string, ExtractedImage> = {};
  const archives: string[] = [];
  const image = (name: string): ExtractedImage => images[name] as ExtractedImage;
  const outputOf = (stream: 'stdout' | 'stderr') => (child: ReturnType<typeof runImage>): (() => string) => {
    let text = '';
    child[stream]?.on('data', (chunk: Buffer) => { text += chunk.toString(); });
    return () => text;
  };
  const stderrOf = outputOf('stderr');
  const stdoutOf = outputOf('stdout');

  beforeAll(async () => {
    await ensureImageHostFiles();
    await ensureDebianPackages({ step: 'install-busybox-static', packages: ['busybox-static'], provides: ['/bin/busybox'] });
    await ensureDebianPackages({ step: 'install-containerd', packages: ['containerd'], provides: ['/usr/bin/containerd', '/usr/bin/ctr'] });
    // Archives go to a folder of this test; the stripped Node binary comes from the
    // checkout's own cache, filled once by `npm run images`.
    const out = join(dir, 'out');
    const written = [
      ...await buildImages({ out, tag: TAG, images: PRODUCT_IMAGES, cacheDir: join(DEFAULT_OUT, '.cache') }),
      pauseImage(out),
      toolsImage(out),
      buildImageFromBinary('localhost/openssl:test', '/usr/bin/openssl', { out, entrypoint: ['/openssl'], cmd: ['version'] }),
    ];
    for (const w of written) {
      archives.push(w.path);
      const name = /\/([\w-]+):/.exec(w.name)?.[1] as string;
      images[name] = extractImage(w.path, join(dir, name));
    }
  }, 600_000);

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  describe('archives', () => {
    it.each(['gw-operator', 'gw-sidecar', 'gw-redis', 'pause', 'gw-tools', 'openssl'])('%s: a valid one-layer OCI image named for containerd', (name) => {
      const { archive } = image(name);
      expect(archive.index.manifests).toHaveLength(1);
      expect(archive.index.manifests[0]?.mediaType).toBe('application/vnd.oci.image.manifest.v1+json');
      expect(archive.name).toMatch(new RegExp(`^(docker\\.io/library|localhost)/${name}:[\\w.-]+$`));
      expect(archive.manifest).toMatchObject({ schemaVersion: 2, config: { mediaType: 'application/vnd.oci.image.config.v1+json' } });
      expect(archive.manifest.layers.map((l) => l.mediaType)).toEqual(['application/vnd.oci.image.layer.v1.tar+gzip']);
      expect(archive.config).toMatchObject({ architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: [sha256(gunzipSync(archive.layer))] } });
    });

    it('containerd imports and unpacks every one under its name and digest', async () => {
      await withContainerd(async (containerd) => {
        for (const archive of archives) await containerd.ctr(['images', 'import', archive]);
        const listed = (await containerd.ctr(['images', 'check'])).trim().split('\n').slice(1).map((line) => line.split(/\s+/));
        const expected = Object.values(images).map(({ archive }) => [archive.name, archive.manifestDigest, 'complete', 'true']);
        expect(listed.map(([name, , digest, status, , , , , unpacked]) => [name, digest, status, unpacked])).toEqual(expect.arrayContaining(expected));
        expect(listed).toHaveLength(expected.length);
      });
    }, 300_000);

    it.each(PRODUCT_IMAGES)('gw-%s: the Dockerfile\'s user, entrypoint, command, environment and working directory', (name) => {
      const { archive } = image(`gw-${name}`);
      const runtime = IMAGE_RUNTIME[name];
      expect(archive.name).toBe(`docker.io/library/gw-${name}:${TAG}`);
      expect(archive.config.config).toEqual({
        User: runtime.user,
        Entrypoint: runtime.entrypoint ?? null,
        Cmd: runtime.cmd ?? null,
        Env: [PATH_ENV, ...runtime.env],
        WorkingDir: runtime.workingDir,
        ExposedPorts: Object.fromEntries(runtime.ports.map((p) => [`${p}/tcp`, {}])),
      });
    });
  });

  describe.each(['operator', 'sidecar'])('gw-%s contents', (name) => {
    const paths = (): string[] => image(`gw-${name}`).listing.map((e) => e.path);

    it('Node at /usr/local/bin/node with every library ldd names', () => {
      const libs = sharedLibraries(realpathSync(join(ROOT, 'node_modules', 'node', 'bin', 'node')));
      expect(libs.length).toBeGreaterThan(3);
      expect(paths()).toEqual(expect.arrayContaining(['usr/local/bin/node', ...libs.map((l) => l.slice(1))]));
    });

    it('its bundle in /app and nothing else of the checkout: no sources, no node_modules', () => {
      const app = paths().filter((p) => p.startsWith('app/'));
      const assets = name === 'sidecar' ? ['app/limits.lua'] : [];
      expect(app).toEqual(expect.arrayContaining([`app/gw-${name}.mjs`, `app/gw-${name}.mjs.map`, ...assets]));
      expect(app.filter((p) => p !== 'app/' && !/^app\/[\w-]+\.(mjs|mjs\.map|lua)$/.test(p))).toEqual([]);
      // The libraries are inside the bundle, not loaded from a node_modules the image lacks.
      const code = app.filter((p) => p.endsWith('.mjs')).map((p) => readFileSync(join(image(`gw-${name}`).rootfs, p), 'utf8')).join('\n');
      expect(code.includes('class KubeConfig'), 'KubeConfig of @kubernetes/client-node in the bundle').toBe(true);
      const loaded = [...code.matchAll(/\bfrom\s*"([^"]+)"|\bimport\(\s*"([^"]+)"\)|__require\(`([^`]+)`\)/g)].map((m) => m[1] ?? m[2] ?? m[3] ?? '');
      const outside = [...new Set(loaded)].filter((spec) => !spec.startsWith('./') && !spec.startsWith('node:') && !builtinModules.includes(spec));
      // ws tries these native helpers in a try/catch and runs without them; so does debug
      // (ioredis's) with supports-color, which nothing in the project installs.
      expect(outside.sort()).toEqual(['bufferutil', 'supports-color', 'utf-8-validate']);
    });

    it('everything owned by root and read-only to the process user, but /tmp', () => {
      const writable = image(`gw-${name}`).listing.filter((e) => e.path !== 'tmp/' && !e.mode.startsWith('l') && (e.owner !== '0/0' || e.mode[5] === 'w' || e.mode[8] === 'w'));
      expect(writable).toEqual([]);
    });
  });

  it('gw-sidecar: the entrypoint warms up and serves, as 65532 on a read-only root, the examples as its folder config', async () => {
    const [proxy, admin, health] = [await freePort(), await freePort(), await freePort()];
    const sidecar = runImage(image('gw-sidecar'), {
      tmpFiles: [[join(ROOT, 'examples'), 'config']],
      // A warm-up short enough to end well within its 10 s bound on a busy machine.
      env: { GW_CONFIG_DIR: '/tmp/config', GW_LISTEN: `127.0.0.1:${proxy}`, GW_ADMIN_LISTEN: `127.0.0.1:${admin}`, GW_HEALTH_LISTEN: `127.0.0.1:${health}`, GW_WARM_UP_REQUESTS: '500' },
    });
    const stderr = stderrOf(sidecar);
    const stdout = stdoutOf(sidecar);
    try {
      await waitFor200(`http://127.0.0.1:${health}/readyz`, sidecar).catch((err: Error) => {
        throw new Error(`${err.message}\n${stderr()}`);
      });
      // Ready only after the warm-up: its log line is there, every request of it answered 200.
      const warmed = stdout().split('\n').find((line) => line.includes('request path warmed up'));
      expect(JSON.parse(warmed ?? '{}'), stdout()).toMatchObject({ statuses: { 200: 500 }, failed: 0 });
    } finally {
      expect(await stop(sidecar)).toBe(0);
    }
  });

  it.each(['operator', 'sidecar'])('gw-%s: its Node allocates with the image\'s jemalloc, which gives freed memory back while the process idles', async (name) => {
    expect(image(`gw-${name}`).listing.map((e) => e.path)).toContain(JEMALLOC.path.slice(1));
    // 50 MB in 64 KB buffers (a socket read's size), every eighth kept: glibc's malloc keeps
    // the freed ones (they lie below live ones), jemalloc returns them within its decay time.
    // The buffers live in a function's frame and are collected from a later task, so no stale
    // reference on the stack keeps them.
    const probe = `const rss = () => Number(/VmRSS:\\s+(\\d+)/.exec(require('node:fs').readFileSync('/proc/self/status', 'utf8'))[1]) / 1024;
      const before = rss(); let peak = 0;
      const kept = (() => { const all = Array.from({ length: 800 }, () => Buffer.alloc(65536, 1)); peak = rss(); return all.filter((_, i) => i % 8 === 7); })();
      setTimeout(() => { gc(); setTimeout(() => console.log(JSON.stringify({ kept: kept.length, took: peak - before, givenBack: (peak - rss()) / (peak - before) })), 2500); });`;
    const run = await runImageToEnd(image(`gw-${name}`), { command: ['node'], args: ['--expose-gc', '-e', probe] });
    expect(run.code, run.stderr).toBe(0);
    const { took, givenBack } = JSON.parse(run.stdout) as { took: number; givenBack: number };
    expect(took).toBeGreaterThan(40);
    // 0.8 here; glibc's malloc, or jemalloc without its background thread, gives back none.
    expect(givenBack).toBeGreaterThan(0.5);
  });

  it('gw-operator: the entrypoint starts, and the webhook\'s certificates are issued with the image\'s openssl in /tmp', async () => {
    const help = await runImageToEnd(image('gw-operator'), { args: ['--help'] });
    expect(help, help.stderr).toMatchObject({ code: 0, stdout: expect.stringContaining('--kubeconfig') });
    const issue = [
      "const certs = await import('/tmp/certs.ts');",
      "const pki = await certs.issueServing(await certs.issueCa(), { dns: ['gw-webhook.gw-system.svc'], ips: [] });",
      "console.log(new (await import('node:crypto')).X509Certificate(pki.tlsCert).subjectAltName);",
    ].join(' ');
    const issued = await runImageToEnd(image('gw-operator'), { command: ['node'], args: ['--input-type=module', '-e', issue], tmpFiles: [[join(ROOT, 'operator/webhook/certs.ts'), 'certs.ts']] });
    expect(issued, issued.stderr).toMatchObject({ code: 0, stdout: 'DNS:gw-webhook.gw-system.svc\n' });
  });

  it('gw-redis: the chart\'s command serves as 999 with /data a volume, and its redis-cli probe answers', async () => {
    const port = await freePort();
    const password = 'images-test';
    const redis = runImage(image('gw-redis'), {
      command: ['redis-server'],
      args: ['--port', String(port), '--bind', '127.0.0.1', '--requirepass', password, '--appendonly', 'yes', '--dir', '/data', '--protected-mode', 'no'],
      volumes: ['/data'],
    });
    const stderr = stderrOf(redis);
    try {
      let ping = { code: null as number | null, stdout: '', stderr: '' };
      for (let i = 0; i < 50 && ping.stdout.trim() !== 'PONG'; i += 1) {
        if (i > 0) await new Promise((resolve) => setTimeout(resolve, 200));
        ping = await runImageToEnd(image('gw-redis'), { command: ['redis-cli'], args: ['-p', String(port), 'ping'], env: { REDISCLI_AUTH: password } });
      }
      expect(ping.stdout.trim(), `${ping.stderr}\n${stderr()}`).toBe('PONG');
      const write = await runImageToEnd(image('gw-redis'), { command: ['redis-cli'], args: ['-p', String(port), 'set', 'k', 'v'], env: { REDISCLI_AUTH: password } });
      expect(write.stdout.trim()).toBe('OK');
    } finally {
      expect(await stop(redis)).toBe(0);
    }
    expect(image('gw-redis').listing.find((e) => e.path === 'data/')).toMatchObject({ owner: '999/999', mode: 'drwxr-x---' });
  });

  describe('test-bed images', () => {
    it('pause: holds on as 65535 until SIGTERM, then exits 0', async () => {
      const pause = runImage(image('pause'));
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(pause.exitCode).toBeNull();
      expect(image('pause').archive.config.config).toMatchObject({ User: '65535:65535', Entrypoint: ['/pause'] });
      expect(await stop(pause)).toBe(0);
    });

    it('gw-tools: busybox applets on PATH, as 65532; wget reaches an HTTP server', async () => {
      const server = createServer((_req, res) => res.end('hello from the host'));
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      const { port } = server.address() as { port: number };
      try {
        const script = `id -u; wget -qO- http://127.0.0.1:${port}/; echo; which nc nslookup sleep`;
        const run = await runImageToEnd(image('gw-tools'), { args: ['sh', '-c', script] });
        expect(run, run.stderr).toMatchObject({ code: 0, stdout: '65532\nhello from the host\n/usr/bin/nc\n/usr/bin/nslookup\n/bin/sleep\n' });
      } finally {
        server.close();
      }
    });

    it('a program past its time limit fails the run with what each of its processes waits in, and is killed with them', async () => {
      const run = runImageToEnd(image('gw-tools'), { args: ['sh', '-c', 'sleep 300; echo never'] }, 1500);
      const error = await run.then(() => undefined, (e: unknown) => e as Error);
      expect(error?.message).toMatch(/still running after 1500 ms\n/);
      // The shell waits for its child (61 is wait4), the child sleeps (230 is clock_nanosleep).
      expect(error?.message).toMatch(/^pid \d+ \(ppid \d+\) S sh -c sleep 300; echo never\n {2}tid \d+ sh S wchan=do_wait syscall=61\n/m);
      expect(error?.message).toMatch(/^pid \d+ \(ppid \d+\) S sleep 300\n {2}tid \d+ sleep S wchan=hrtimer_nanosleep syscall=230\n/m);
      const pids = [...(error?.message ?? '').matchAll(/^pid (\d+) /gm)].map((m) => Number(m[1]));
      expect(pids).toHaveLength(2);
      // SIGKILL reached both; the grandchild's exit may still be under way.
      for (let i = 0; i < 20 && pids.some(isAlive); i += 1) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(pids.filter(isAlive)).toEqual([]);
    });

    it('a dynamically linked binary on its own runs with the libraries ldd names', async () => {
      const run = await runImageToEnd(image('openssl'));
      expect(run, run.stderr).toMatchObject({ code: 0, stdout: expect.stringMatching(/^OpenSSL 3/) });
      expect(image('openssl').listing.map((e) => e.path)).toEqual(expect.arrayContaining(['openssl', 'etc/passwd', 'lib64/ld-linux-x86-64.so.2']));
    });
  });
});
