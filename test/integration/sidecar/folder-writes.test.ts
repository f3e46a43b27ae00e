import { access, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments } from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../../harness/index.ts';
import { freePort } from '../../harness/ports.ts';
import { call, eventually, spawnSidecar, type SidecarChild } from './helpers.ts';

const PORTAL_SECRET = 'folder-writes-portal-secret';

/** A PortalProduct `prod-shared` sharing its file with a Category whose name the hand edits change. */
const sharedFile = (marker: string): string => `apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata:
  name: shared
spec:
  id: prod-shared
  tags:
    - Name: first
---
apiVersion: gw.dev/v1alpha1
kind: Category
metadata:
  name: ${marker}
`;

interface Gateway {
  child: SidecarChild;
  admin: string;
}

/** A gateway on `dir` (the harness Redis), once its /readyz answers 200. */
async function startGateway(dir: string): Promise<Gateway> {
  const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
  const args = ['--config', dir, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`, '--health-listen', `127.0.0.1:${health}`, '--redis-url', testEnv().redisUrl];
  const child = spawnSidecar(args, { GW_PORTAL_SECRET: PORTAL_SECRET });
  await eventually(async () => (await call(`http://127.0.0.1:${health}/readyz`).catch(() => ({ status: 0 }))).status === 200 || child.proc.exitCode !== null, 30_000, 'ready');
  expect(child.proc.exitCode, child.stderr()).toBeNull();
  return { child, admin: `http://127.0.0.1:${admin}` };
}

async function stopGateway({ child }: Gateway): Promise<void> {
  if (child.proc.exitCode !== null) return;
  child.proc.kill('SIGTERM');
  await child.exited;
}

const postTag = (gateway: Gateway, productId: string, tag: string): Promise<number> =>
  call(`${gateway.admin}/portal-api/products/${productId}/tags`, {
    method: 'POST',
    headers: { authorization: PORTAL_SECRET, 'content-type': 'application/json' },
    body: JSON.stringify({ Name: tag }),
  }).then((res) => res.status);

const tagsIn = (text: string): string[] => (parseAllDocuments(text)[0]!.toJS() as { spec: { tags: { Name: string }[] } }).spec.tags.map((t) => t.Name);

const exists = (path: string): Promise<boolean> =>
  access(path).then(
    () => true,
    () => false,
  );

describe('folder writes racing other writers of the folder', () => {
  let dir: string;
  const gateways: Gateway[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gw-folder-writes-'));
  });

  afterEach(async () => {
    await Promise.all(gateways.splice(0).map(stopGateway));
    await rm(dir, { recursive: true, force: true });
    dir = await mkdtemp(join(tmpdir(), 'gw-folder-writes-'));
  });

  afterAll(async () => {
    await Promise.all(gateways.splice(0).map(stopGateway));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('keeps a hand edit saved while a tag write of the same file is under way', async () => {
    const path = join(dir, 'shared.yaml');
    await writeFile(path, sharedFile('edited-0'));
    const gateway = await startGateway(dir);
    gateways.push(gateway);
    const lost: number[] = [];
    const statuses = new Set<number>();
    for (let round = 1; round <= 30; round++) {
      const tagged = postTag(gateway, 'prod-shared', `r${round}`);
      // An editor's save (a new file renamed over the old one), 0 to 5 ms into the tag write.
      const edited = sleep(round % 6).then(async () => {
        const text = (await readFile(path, 'utf8')).replace(/edited-\d+/, `edited-${round}`);
        await writeFile(`${path}.swp`, text);
        await rename(`${path}.swp`, path);
      });
      const [status] = await Promise.all([tagged, edited]);
      statuses.add(status);
      // Both are done: whichever came last, the hand edit is in the file.
      if (!(await readFile(path, 'utf8')).includes(`edited-${round}`)) lost.push(round);
    }
    // A save landing between the write's last check and its rename can still be lost
    // (README.md#standalone-the-config-folder): up to 2 rounds of 30 have been seen. A write
    // that did not check lost 13 of them.
    expect(lost.length).toBeLessThanOrEqual(3);
    expect([...statuses]).toEqual([200]);
  });

  it('does not bring back a file deleted by hand while a tag write of it is under way', async () => {
    const path = join(dir, 'shared.yaml');
    const gateway = await startGateway(dir);
    gateways.push(gateway);
    const resurrected: number[] = [];
    const statuses = new Set<number>();
    for (let round = 1; round <= 24; round++) {
      await writeFile(path, sharedFile('kept'));
      const tagged = postTag(gateway, 'prod-shared', `r${round}`);
      const removed = sleep(round % 6).then(() => rm(path));
      const [status] = await Promise.all([tagged, removed]);
      statuses.add(status);
      if (await exists(path)) resurrected.push(round);
    }
    // A delete landing between the write's last check and its rename still brings the file
    // back (README.md#standalone-the-config-folder): 1 round of 24 has been seen on a loaded
    // machine, where the process can be paused between the two. A write that did not check
    // brought it back in 8 of them.
    expect(resurrected.length).toBeLessThanOrEqual(2);
    // Tagged before the delete (200), or found gone (404): never a failure.
    expect([...statuses].filter((status) => status !== 200 && status !== 404)).toEqual([]);
  });

  it('keeps every tag write answered 200 by either of two gateways serving one folder, and both see them all', async () => {
    const path = join(dir, 'shared.yaml');
    await writeFile(path, sharedFile('kept'));
    const pair = await Promise.all([startGateway(dir), startGateway(dir)]);
    gateways.push(...pair);
    const tags = Array.from({ length: 20 }, (_, i) => `t${i}`);
    const statuses = await Promise.all(tags.map((tag, i) => postTag(pair[i % 2]!, 'prod-shared', tag)));
    const acknowledged = tags.filter((_, i) => statuses[i] === 200);
    const text = await readFile(path, 'utf8');
    expect(acknowledged.filter((tag) => !tagsIn(text).includes(tag))).toEqual([]);
    expect(statuses).toEqual(tags.map(() => 200));
    // A tag a gateway reads in the file answers 200 and writes nothing: tagged again through
    // both, the file stays as it is.
    for (const gateway of pair) for (const tag of acknowledged) expect(await postTag(gateway, 'prod-shared', tag)).toBe(200);
    expect(await readFile(path, 'utf8')).toBe(text);
    expect(await exists(join(dir, '.gw-write.lock'))).toBe(false);
  });
});
