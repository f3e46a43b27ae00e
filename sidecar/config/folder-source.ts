import { basename } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Logger } from '../../common/logger.ts';
import { sessionFromKey } from '../../common/session-from-key.ts';
import { parseSession, type SessionStore } from '../../common/session-store.ts';
import type { Session } from '../../crds/session.ts';
import { keyHashPattern } from '../../crds/key-hash.ts';
import { apiVersion, group, kindNames } from '../../crds/kinds.ts';
import { ApiCompileCache, compile, type ApiDefinitionInput, type CompileProblem, type PolicyInput } from '../../crds/compile/index.ts';
import type { CompiledApi, CompiledConfig, ResourceRef } from '../../crds/compiled.ts';
import { patternMistake } from '../../crds/rate-limit-pattern.ts';
import { DOCS_PER_TURN, documentsOf, readFolder, UnreadableFileError, type FoundDoc, type YamlFile } from '../resources/yaml-folder.ts';
import type { SidecarMetrics } from '../metrics.ts';
import { watchFolder, type FolderWatch } from './folder-watch.ts';
import type { ConfigProblem, ConfigSource } from './source.ts';

export interface FolderSourceOptions {
  dir: string;
  /** Namespace of resources that name none. */
  defaultNamespace: string;
  sessions: SessionStore;
  logger: Logger;
  metrics: SidecarMetrics;
  /** api_ids deleted through the admin operations: served until an explicit reload, like a cluster's. */
  retainedApis?: () => ReadonlySet<string>;
  /**
   * A worker started again while the other workers retain deleted APIs: their compiled
   * versions, which its first load serves as the others do (the folder no longer has them).
   */
  retainedElsewhere?: readonly CompiledApi[];
  /** Quiet time after a change in the folder before it is applied; null: no watching (reloads are explicit). */
  watchDebounceMs?: number | null;
}

interface Meta {
  name: string;
  namespace?: string;
  uid?: string;
}

/** A Key of the folder that names itself and its session's hash, with the subject its problems are reported under. */
interface FolderKey {
  doc: FoundDoc;
  meta: Meta;
  hash: string;
  spec: object;
  subject: string;
}

/**
 * A Key whose stored session the last load found to be the one its spec derives: while its
 * spec is the same parsed object (its file unchanged), its name and namespace the same, and
 * the store holds the same text, the derivation would find nothing to write again.
 */
interface SettledKey {
  spec: object;
  name: string;
  namespace: string;
  storedJson: string;
}

/** Whether a Key settled at the last load is so still: the same parsed spec, name and namespace, and the store holds the text it held. */
const stillSettled = (last: SettledKey, key: Omit<SettledKey, 'storedJson'>, storedJson: string | null): boolean =>
  last.spec === key.spec && last.name === key.name && last.namespace === key.namespace && last.storedJson === storedJson;

/** A problem as /readyz shows it, plus the kind and reason code `gw_config_problems` counts it by. */
interface FolderProblem extends ConfigProblem {
  kind: string;
  code: string;
}

type KeyDocSpec = { apply_policies?: unknown; access_rights?: unknown; meta_data?: { rate_limit_pattern?: unknown } };

/** What `#reportKeyProblems` reports of one Key's spec, as read from its file. */
function keyProblems(spec: KeyDocSpec | undefined, namespace: string, config: CompiledConfig, apiIds: ReadonlySet<string>): { reason: string; code: string }[] {
  const found: { reason: string; code: string }[] = [];
  const applied = Array.isArray(spec?.apply_policies) ? spec.apply_policies : [];
  const missingPolicies = applied.filter((name): name is string => typeof name === 'string' && !(`${namespace}/${name}` in config.policies));
  if (missingPolicies.length > 0) {
    const reason = `spec.apply_policies: no Policy ${missingPolicies.map((name) => `"${name}"`).join(', ')} in namespace ${namespace}; what it would grant is refused`;
    found.push({ reason, code: 'MissingPolicy' });
  }
  const granted = typeof spec?.access_rights === 'object' && spec.access_rights !== null ? Object.keys(spec.access_rights) : [];
  const missingApis = granted.filter((apiId) => !apiIds.has(apiId)).sort();
  if (missingApis.length > 0) {
    found.push({ reason: `spec.access_rights: no ApiDefinition has api_id ${missingApis.map((id) => `"${id}"`).join(', ')}`, code: 'MissingApi' });
  }
  const mistake = patternMistake(spec?.meta_data?.rate_limit_pattern);
  if (mistake !== null) found.push({ reason: `spec.meta_data.rate_limit_pattern: ${mistake}`, code: 'InvalidRateLimitPattern' });
  return found;
}

/**
 * The log of a load's config problems: a line the load before logged too is not logged again,
 * so that a reload (any file's edit, a Redis reconnect) logs what changed, not every problem
 * the folder still has. /readyz and gw_config_problems list them all at every load.
 */
class ProblemLog {
  readonly #logger: Logger;
  #lastLoad = new Set<string>();
  #thisLoad = new Set<string>();

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  warn(fields: object, msg: string): void {
    this.#log('warn', fields, msg);
  }

  error(fields: object, msg: string): void {
    this.#log('error', fields, msg);
  }

  /** A load begins: what it logs is compared with what the last complete one logged. */
  begin(): void {
    this.#thisLoad = new Set();
  }

  /** The load is complete: its lines are the ones the next load does not repeat. */
  complete(): void {
    this.#lastLoad = this.#thisLoad;
  }

  #log(level: 'warn' | 'error', fields: object, msg: string): void {
    const line = `${level} ${msg} ${JSON.stringify(fields)}`;
    this.#thisLoad.add(line);
    if (!this.#lastLoad.has(line)) this.#logger[level](fields, msg);
  }
}

/** A problem found in `file`: logged, as every problem is (README.md), and listed for /readyz and the gauge. */
function addProblem(problems: FolderProblem[], log: ProblemLog, file: string, problem: FolderProblem): void {
  log.warn({ file, subject: problem.subject, problem: problem.reason }, 'config problem');
  problems.push({ ...problem, file: basename(file) });
}

const knownKinds: ReadonlySet<string> = new Set(kindNames);

const keyHashFormat = new RegExp(keyHashPattern);
const NOT_A_KEY_HASH = 'spec.key_hash is not a key hash (64 characters 0-9a-f, the SHA-256 of the key; never the key itself); skipped';

/**
 * Documents meant for gw that no reader takes: a kind misspelt (`ApiDefintion`), or a version
 * gw does not serve. Other YAML in the folder (another tool's, whose kinds may share a name
 * with gw's) is left alone.
 */
function reportStrayDocuments(files: readonly YamlFile[], problems: FolderProblem[], log: ProblemLog): void {
  for (const file of files) {
    file.objects.forEach((object, index) => {
      const { apiVersion: version, kind } = object ?? {};
      if (typeof version !== 'string' || !version.startsWith(`${group}/`)) return;
      if (version === apiVersion && typeof kind === 'string' && knownKinds.has(kind)) return;
      const reason = version === apiVersion
        ? `document ${index + 1}: ${apiVersion} has no kind ${String(kind)} (it has ${kindNames.join(', ')}); skipped`
        : `document ${index + 1}: ${version} is not served (gw reads ${apiVersion}); skipped`;
      addProblem(problems, log, file.path, { subject: `file ${basename(file.path)}`, reason, kind: 'File', code: 'UnknownKind' });
    });
  }
}

const DEFAULT_DEBOUNCE_MS = 200;
const WATCH_RETRY_MS = 2_000;
const LAST_GOOD_KEPT = 'its last good version stays in effect';
/**
 * Sessions read, written or removed at once while a folder loads: each batch costs one round
 * trip to Redis, not one per Key, and what its answers cost (a parse each) fits between two
 * turns of the event loop (DOCS_PER_TURN).
 */
const SESSION_BATCH = DOCS_PER_TURN;
/** The wait before Key sessions the store did not take are tried again: doubling from 1 s to 30 s. */
const SESSIONS_RETRY_FIRST_MS = 1_000;
const SESSIONS_RETRY_MAX_MS = 30_000;

/**
 * `work` for every item, `SESSION_BATCH` at a time, in order, with a turn of the event loop
 * between batches (a store in memory answers without one); the results in the items' order.
 */
async function inBatches<T, R>(items: readonly T[], work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += SESSION_BATCH) {
    if (i > 0) await nextTurn();
    results.push(...(await Promise.all(items.slice(i, i + SESSION_BATCH).map(work))));
  }
  return results;
}

/** A resource's own fields and its metadata's: `kubectl apply` refuses any other (strict decoding), as a folder does. */
const RESOURCE_FIELDS = new Set(['apiVersion', 'kind', 'metadata', 'spec', 'status']);
const METADATA_FIELDS = new Set([
  'name', 'generateName', 'namespace', 'uid', 'resourceVersion', 'generation', 'creationTimestamp', 'deletionTimestamp',
  'deletionGracePeriodSeconds', 'labels', 'annotations', 'ownerReferences', 'finalizers', 'managedFields', 'selfLink',
]);

/**
 * The fields of a document outside its spec that its kind does not have: a spec field indented
 * one level too little (`global_rate_limit` beside `spec`) would otherwise be dropped unseen, and
 * the API served without its limit. The spec's own are the compile step's (`UnknownField`).
 */
function strayFields(object: Record<string, unknown>): string[] {
  const stray = Object.keys(object).filter((field) => !RESOURCE_FIELDS.has(field));
  const metadata = object.metadata;
  if (typeof metadata === 'object' && metadata !== null) stray.push(...Object.keys(metadata).filter((field) => !METADATA_FIELDS.has(field)).map((field) => `metadata.${field}`));
  return stray;
}

const strayMessage = (kind: string, stray: readonly string[]): string =>
  `${kind} has no field ${stray.map((field) => `"${field}"`).join(', ')} (misspelt, or indented outside spec?); kubectl apply refuses it too`;

function metaOf(doc: FoundDoc): Meta | null {
  const meta = doc.object.metadata as Partial<Meta> | undefined;
  return typeof meta?.name === 'string' && meta.name.length > 0 ? (meta as Meta) : null;
}

const refName = (ref: Pick<ResourceRef, 'kind' | 'namespace' | 'name'>): string => `${ref.kind} ${ref.namespace}/${ref.name}`;

/** What a folder holds, to tell a real change from an editor touching files. */
const sameContent = (files: readonly YamlFile[], loaded: readonly YamlFile[] | null): boolean =>
  loaded !== null && files.length === loaded.length && files.every((file, i) => file.path === loaded[i]!.path && (file === loaded[i] || file.text === loaded[i]!.text));

/**
 * Standalone config: a folder of the same resource YAML users apply to a cluster
 * (`--config DIR`), run through the same compile step as the operator. Keys' sessions
 * (their spec carries `key_hash`) go into the store. The folder is watched: hand edits
 * apply on their own once it has been quiet for a moment, and `reload()` (GET /gw/reload,
 * SIGHUP) applies it at once.
 *
 * A bad edit keeps what was good: a file that no longer parses is read as its last good
 * version, and an API or a policy the compile step now refuses keeps its last good
 * compiled version; each is reported (log, `/readyz`, `gw_config_reload_errors_total` for
 * APIs, `gw_config_problems`). An API deleted through the admin operations stays served
 * until an explicit reload, as in a cluster, even when the folder is re-read meanwhile.
 *
 * A session store that fails (Redis down, or a command timed out) does not stop the rest: the
 * APIs and policies are published, the failure is reported, and the folder is loaded again
 * with a growing wait until the store has taken every Key's session, so a gateway started
 * before its Redis, or a Key edited during an outage, needs no restart and no reload.
 */
export class FolderConfigSource implements ConfigSource {
  readonly name = 'folder';
  readonly #options: FolderSourceOptions;
  #publish: (config: CompiledConfig) => void = () => undefined;
  #problems: FolderProblem[] = [];
  /** The file each resource of the published config was found in, by `Kind namespace/name`. */
  #files = new Map<string, string>();
  readonly #problemLog: ProblemLog;
  /** The `gw_config_problems` series the last report set, by kind/reason. */
  #gaugeSeries = new Map<string, { kind: string; reason: string }>();
  /** The last version of each file that parsed, by path. */
  #lastGoodFiles = new Map<string, YamlFile>();
  #published: CompiledConfig | null = null;
  /** The folder's APIs as last compiled: a reload compiles only those whose file changed. */
  readonly #compiledApis = new ApiCompileCache();
  /** Hashes of the Keys the folder held at the last load: a Key that leaves it loses its session. */
  #keyHashes = new Set<string>();
  /**
   * Keys the admin operations wrote, their sessions stored, that no load has found yet, each
   * with the number of folder reads begun before it was written: a read begun after it that
   * does not find it (its file removed, or its hash edited, within the watch's quiet time)
   * revokes its session, which no load would otherwise have known of.
   */
  readonly #createdKeys = new Map<string, number>();
  /** Folder reads begun, the one of the load under way included. */
  #reads = 0;
  /** By key hash, the Keys the last load found settled (`#storeKeys`). */
  #settledKeys = new Map<string, SettledKey>();
  /** By key hash, the Key (`namespace/name`) that held it at the last load: a copy added since does not take it. */
  #keyHolders = new Map<string, string>();
  /** The files of the last load that the store took every session of: the same again is not loaded again. */
  #loadedFiles: readonly YamlFile[] | null = null;
  /** Loads run one at a time, in order. */
  #queue: Promise<unknown> = Promise.resolve();
  #watch: FolderWatch | undefined;
  /** The next load after the session store failed, and the wait before the one after it. */
  #sessionsRetry: NodeJS.Timeout | undefined;
  #sessionsRetryMs = SESSIONS_RETRY_FIRST_MS;
  /** A check of every Key's session queued by `sessionLost`, until it has run. */
  #lostSessionsCheck = false;
  #stopped = false;

  constructor(options: FolderSourceOptions) {
    this.#options = options;
    this.#problemLog = new ProblemLog(options.logger);
  }

  async start(publish: (config: CompiledConfig) => void): Promise<void> {
    this.#publish = publish;
    await this.reload();
    const debounceMs = this.#options.watchDebounceMs === undefined ? DEFAULT_DEBOUNCE_MS : this.#options.watchDebounceMs;
    if (debounceMs === null) return;
    this.#watch = watchFolder({
      dir: this.#options.dir,
      debounceMs,
      retryMs: WATCH_RETRY_MS,
      onChange: () => {
        this.#enqueue(false).catch((err: unknown) => {
          this.#options.logger.error({ err, dir: this.#options.dir }, 'config folder change could not be applied; keeping the last good config');
        });
      },
      onError: (err) => this.#options.logger.warn({ err, dir: this.#options.dir }, 'config folder watch failed; watching again shortly'),
    });
  }

  /** Re-reads the folder and publishes it, even when nothing changed (deleted APIs are released by then). */
  reload(): Promise<void> {
    return this.#enqueue(true);
  }

  /**
   * The session store is back after an outage, and may have come back empty (a Redis restarted
   * without persistence): the next load checks every Key's session again, as a load does, and
   * writes the missing ones. Without it, the Keys were refused until the folder changed.
   */
  storeReturned(): Promise<void> {
    this.#loadedFiles = null;
    return this.#enqueue(false);
  }

  /**
   * The session store answers for the first time. A gateway started while it was away failed
   * to store the Keys' sessions, and loads again now rather than at its retry's next turn (up
   * to SESSIONS_RETRY_MAX_MS away), meanwhile refusing the folder's Keys as unknown; otherwise
   * the first load stored them, and nothing is to do.
   */
  storeReached(): Promise<void> {
    // The retry's wait grows from its first only while loads fail on the store.
    const lastLoadFailed = this.#sessionsRetryMs > SESSIONS_RETRY_FIRST_MS;
    return lastLoadFailed ? this.storeReturned() : Promise.resolve();
  }

  /**
   * The session the last load stored for a folder Key whose session the store no longer holds
   * (a Redis flushed, or restarted without persistence, before the check `storeReturned` runs):
   * the key is answered from it rather than refused as unknown, and every Key's session is
   * checked again, which writes the missing ones back. Null for a key the folder does not hold.
   */
  sessionLost(keyHash: string): string | null {
    const settled = this.#settledKeys.get(keyHash);
    if (settled === undefined) return null;
    if (!this.#lostSessionsCheck) {
      this.#lostSessionsCheck = true;
      this.storeReturned()
        .catch((err: unknown) => this.#options.logger.error({ err }, "Keys' sessions could not be written back"))
        .finally(() => (this.#lostSessionsCheck = false));
    }
    return settled.storedJson;
  }

  #enqueue(always: boolean): Promise<void> {
    const run = this.#queue.then(() => this.#load(always));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #load(always: boolean): Promise<void> {
    const { dir, logger, metrics } = this.#options;
    let files: YamlFile[];
    try {
      // Files that parsed last time and have not changed since are not parsed again.
      this.#reads += 1;
      files = await readFolder(dir, this.#lastGoodFiles);
    } catch (err) {
      // The next read that works reports afresh, even if it finds what was loaded before.
      this.#loadedFiles = null;
      metrics.configReloads.inc({ source: this.name, result: 'error' });
      logger.error({ err, dir }, 'config folder could not be read; keeping the last good config');
      this.#report([{ subject: `folder ${dir}`, reason: `${(err as Error).message}; the last good config stays in effect`, kind: 'Folder', code: 'Unreadable' }]);
      throw err;
    }
    if (!always && sameContent(files, this.#loadedFiles)) {
      // The same Keys as the last load: one created and removed since, within the quiet time, is gone.
      await this.#revokeCreatedGone(this.#keyHashes);
      return;
    }

    const problems: FolderProblem[] = [];
    this.#problemLog.begin();
    const usable = this.#usableFiles(files, problems);
    reportStrayDocuments(usable, problems, this.#problemLog);
    // The file each resource is in, by `Kind namespace/name`: the compile step's problems name the resource only.
    const fileOf = new Map<string, string>();
    const refused: CompileProblem[] = [];
    const apiDefinitions = this.#resources<ApiDefinitionInput>(documentsOf(usable, 'ApiDefinition'), 'ApiDefinition', problems, fileOf, refused);
    const policies = this.#resources<PolicyInput>(documentsOf(usable, 'Policy'), 'Policy', problems, fileOf, refused);
    // The steps of a load each take a few milliseconds at 5,000 APIs: a turn of the event
    // loop between them keeps requests answered (docs/architecture.md#performance).
    await nextTurn();
    const compiled = compile({ apiDefinitions, policies, cache: this.#compiledApis, retainedApis: this.#retainedApis(), lastGoodApis: this.#lastApis() });
    const compileProblems = [...refused, ...compiled.problems];
    const keptAtLastGood = this.#keepLastGood(compiled.config, compileProblems);
    await nextTurn();
    for (const problem of compileProblems) {
      const subject = refName(problem.ref);
      const kept = keptAtLastGood.has(subject);
      const file = fileOf.get(subject);
      this.#problemLog.warn({ problem, file, lastGoodKept: kept }, 'config problem');
      const reason = `${problem.field}: ${problem.message}${kept ? `; ${LAST_GOOD_KEPT}` : ''}`;
      problems.push({ subject, reason, kind: problem.ref.kind, code: problem.reason, ...(file === undefined ? {} : { file }) });
    }
    const keyDocs = documentsOf(usable, 'Key');
    const sessionsStored = await this.#loadKeys(keyDocs, problems);
    await this.#reportKeyProblems(keyDocs, compiled.config, problems);
    await nextTurn();
    this.#report(problems);
    this.#problemLog.complete();
    this.#published = compiled.config;
    this.#files = fileOf;
    this.#publish(compiled.config);
    // Until the store has taken every session, the same content is loaded again (#retrySessions).
    this.#loadedFiles = sessionsStored ? files : null;
  }

  /** The store failed: the folder is loaded again after a wait that doubles up to its cap while it keeps failing. */
  #retrySessions(err: unknown, problems: FolderProblem[]): void {
    const waitMs = this.#sessionsRetryMs;
    this.#sessionsRetryMs = Math.min(waitMs * 2, SESSIONS_RETRY_MAX_MS);
    const reason = `the session store failed (${(err as Error).message}); Keys' sessions may be out of date; trying again in ${waitMs / 1000} s`;
    this.#options.logger.error({ err }, `Keys' sessions could not be read or written; trying again in ${waitMs / 1000} s`);
    problems.push({ subject: 'Key sessions', reason, kind: 'Key', code: 'SessionStoreFailed' });
    clearTimeout(this.#sessionsRetry);
    if (this.#stopped) return;
    this.#sessionsRetry = setTimeout(() => {
      this.#enqueue(false).catch((retryErr: unknown) => this.#options.logger.error({ err: retryErr, dir: this.#options.dir }, 'config folder could not be loaded again'));
    }, waitMs);
  }

  /** Files as they can be used: one that does not parse is replaced by its last good version, if any. */
  #usableFiles(files: readonly YamlFile[], problems: FolderProblem[]): YamlFile[] {
    const usable: YamlFile[] = [];
    const present = new Set(files.map((f) => f.path));
    for (const path of this.#lastGoodFiles.keys()) {
      if (!present.has(path)) this.#lastGoodFiles.delete(path);
    }
    for (const file of files) {
      const error = file.errors[0];
      if (error === undefined) {
        this.#lastGoodFiles.set(file.path, file);
        usable.push(file);
        continue;
      }
      const lastGood = this.#lastGoodFiles.get(file.path);
      if (lastGood) usable.push(lastGood);
      const outcome = lastGood ? LAST_GOOD_KEPT : 'none of it is in effect';
      const unreadable = error instanceof UnreadableFileError;
      this.#problemLog.error({ file: file.path, error: error.message }, `config file ${unreadable ? 'cannot be used' : 'does not parse'}; ${outcome}`);
      problems.push({ subject: `file ${basename(file.path)}`, reason: `${error.message}; ${outcome}`, kind: 'File', code: unreadable ? 'Unreadable' : 'YamlError', file: basename(file.path) });
    }
    return usable;
  }

  /**
   * The documents of one kind as the compile step takes them. One with a field its kind does
   * not have is left out, with a problem in `refused` (kept at its last good version, as a spec
   * the compile step refuses is).
   */
  #resources<T>(docs: FoundDoc[], kind: string, problems: FolderProblem[], fileOf: Map<string, string>, refused: CompileProblem[]): T[] {
    const out: T[] = [];
    for (const doc of docs) {
      const metadata = metaOf(doc);
      if (metadata === null) {
        this.#problemLog.warn({ file: doc.file.path, kind }, 'resource without metadata.name skipped');
        problems.push({ subject: `${kind} in ${basename(doc.file.path)}`, reason: 'no metadata.name; skipped', kind, code: 'MissingName', file: basename(doc.file.path) });
        continue;
      }
      const namespace = metadata.namespace ?? this.#options.defaultNamespace;
      fileOf.set(refName({ kind, namespace, name: metadata.name }), basename(doc.file.path));
      const stray = strayFields(doc.object);
      if (stray.length > 0) {
        refused.push({ ref: { kind, namespace, name: metadata.name }, field: stray[0]!, reason: 'UnknownField', message: strayMessage(kind, stray) });
        continue;
      }
      out.push({ metadata: { ...metadata, namespace }, spec: doc.object.spec ?? {} } as T);
    }
    return out;
  }

  /**
   * Puts back, from the last published config, what the compile step now leaves out
   * although its resource is still there: APIs and policies refused after a bad edit,
   * and APIs deleted through the admin operations and not yet released by a reload (before
   * the first publish, those the other workers retain). Returns the resources
   * (`Kind ns/name`) kept at their last good version.
   */
  #keepLastGood(config: CompiledConfig, problems: readonly CompileProblem[]): Set<string> {
    const refused = new Set(problems.map((p) => refName(p.ref)));
    const retained = this.#options.retainedApis?.() ?? new Set<string>();
    const kept = new Set<string>();
    const served = new Set(config.apis.map((api) => api.api_id));
    for (const api of this.#lastApis()) {
      if (served.has(api.api_id)) continue;
      const badEdit = refused.has(refName(api.source));
      if (!badEdit && !retained.has(api.api_id)) continue;
      config.apis.push(api);
      served.add(api.api_id);
      if (!badEdit) continue;
      kept.add(refName(api.source));
      this.#options.metrics.configReloadErrors.inc({ api_id: api.api_id });
    }
    for (const [id, policy] of Object.entries(this.#published?.policies ?? {})) {
      if (id in config.policies || !refused.has(refName(policy.source))) continue;
      config.policies[id] = policy;
      kept.add(refName(policy.source));
    }
    return kept;
  }

  /** The APIs deleted through the admin operations and served until a reload, as last published. */
  #retainedApis(): CompiledApi[] {
    const retained = this.#options.retainedApis?.();
    if (retained === undefined || retained.size === 0) return [];
    return this.#lastApis().filter((api) => retained.has(api.api_id));
  }

  /** The APIs of the last published config; before the first, those the other workers retain. */
  #lastApis(): readonly CompiledApi[] {
    return this.#published?.apis ?? this.#options.retainedElsewhere ?? [];
  }

  /** The Keys' sessions stored (`#storeKeys`): true when the store took them all; if it failed, that is reported and a load scheduled. */
  async #loadKeys(docs: FoundDoc[], problems: FolderProblem[]): Promise<boolean> {
    try {
      await this.#storeKeys(docs, problems);
    } catch (err) {
      this.#retrySessions(err, problems);
      return false;
    }
    clearTimeout(this.#sessionsRetry);
    this.#sessionsRetryMs = SESSIONS_RETRY_FIRST_MS;
    return true;
  }

  /**
   * Sessions for the folder's Keys. A Key without `key_hash` cannot be served here: the raw
   * key the operator would generate has nowhere to go. A Key that left the folder (or
   * changed its hash) since the last load loses its session; one whose spec is now invalid
   * keeps the session it had. The stored sessions are read, and the changed ones written, in
   * batches: a folder of 5,000 Keys took 5,000 round trips one after another. A Key settled
   * at the last load whose file and stored text have not changed since is not derived again:
   * the admin operations write one file per key and each write reloads the folder, which
   * parsed every stored session and derived every Key's anew. The stored text is compared,
   * so a session changed or deleted in the store since is still put right.
   */
  async #storeKeys(docs: FoundDoc[], problems: FolderProblem[]): Promise<void> {
    const { sessions, defaultNamespace } = this.#options;
    const keys = this.#heldKeys(this.#servableKeys(docs, problems), problems);
    const present = new Set(keys.map((key) => key.hash));
    const hashes = [...present];
    const found = await inBatches(hashes, (hash) => sessions.getJson(hash));
    const storedJson = new Map<string, string | null>(hashes.map((hash, i) => [hash, found[i] ?? null]));
    const writes = new Map<string, { session: Session; key: Omit<SettledKey, 'storedJson'> }>();
    const settled = new Map<string, SettledKey>();
    for (const [i, { doc, meta, hash, spec, subject }] of keys.entries()) {
      // Requests are answered between pieces of a large folder's Keys (DOCS_PER_TURN).
      if (i > 0 && i % DOCS_PER_TURN === 0) await nextTurn();
      const namespace = meta.namespace ?? defaultNamespace;
      const json = storedJson.get(hash) ?? null;
      const key = { spec, name: meta.name, namespace };
      const last = this.#settledKeys.get(hash);
      const stray = strayFields(doc.object);
      if (stray.length === 0 && last !== undefined && stillSettled(last, key, json)) {
        settled.set(hash, last);
        continue;
      }
      const existing = parseSession(json);
      const outcome = stray.length > 0 ? { ok: false as const, message: strayMessage('Key', stray) } : sessionFromKey(spec, { name: meta.name, namespace }, existing, new Date());
      if (outcome.ok) {
        // An unchanged session is not written again: every write is reported to each gateway
        // that read the session, which then reads it again (docs/architecture.md#sessions).
        if (outcome.changed) writes.set(hash, { session: outcome.session, key });
        else if (json !== null) settled.set(hash, { ...key, storedJson: json });
        continue;
      }
      this.#refuseKey({ doc, name: meta.name, subject }, { message: outcome.message, code: stray.length > 0 ? 'UnknownField' : 'InvalidSpec' }, existing !== null, problems);
    }
    await inBatches([...writes], async ([hash, { session, key }]) => {
      settled.set(hash, { ...key, storedJson: await sessions.put(hash, session) });
    });
    // Before the sessions of Keys gone are deleted: `sessionLost` must not answer for them then.
    this.#settledKeys = settled;
    await this.#revokeKeysGone(present);
  }

  /** A Key that gives no session: reported, and served by the session it had if it had one. */
  #refuseKey(key: { doc: FoundDoc; name: string; subject: string }, problem: { message: string; code: string }, hadSession: boolean, problems: FolderProblem[]): void {
    const file = key.doc.file.path;
    this.#problemLog.warn({ file, resource: key.name, problem: problem.message }, hadSession ? 'invalid Key: its last good session stays in effect' : 'invalid Key skipped');
    problems.push({ subject: key.subject, reason: `${problem.message}; ${hadSession ? LAST_GOOD_KEPT : 'skipped'}`, kind: 'Key', code: problem.code, file: basename(file) });
  }

  /**
   * Keys applying a policy, or granted an API, that the config does not have: served without
   * it (what the policy would grant is refused), and reported, as the operator reports them
   * `MissingPolicy` and `MissingApi` in a cluster; and a Key's own rate_limit_pattern with a
   * mistake, served as written (`InvalidRateLimitPattern`, docs/behaviour.md#custom-rate-limit-keys).
   */
  async #reportKeyProblems(docs: FoundDoc[], config: CompiledConfig, problems: FolderProblem[]): Promise<void> {
    const apiIds = new Set(config.apis.map((api) => api.api_id));
    for (const [i, doc] of docs.entries()) {
      // Requests are answered between pieces of a large folder's Keys (DOCS_PER_TURN).
      if (i > 0 && i % DOCS_PER_TURN === 0) await nextTurn();
      const meta = metaOf(doc);
      if (meta === null) continue;
      const namespace = meta.namespace ?? this.#options.defaultNamespace;
      const subject = `Key ${namespace}/${meta.name}`;
      for (const { reason, code } of keyProblems(doc.object.spec as KeyDocSpec | undefined, namespace, config, apiIds)) {
        addProblem(problems, this.#problemLog, doc.file.path, { subject, reason, kind: 'Key', code });
      }
    }
  }

  /**
   * One Key per key hash: of several naming one (a copied file), the one that held it at the
   * last load keeps it, else the first by namespace/name; the others are reported
   * `DuplicateKeyHash` and write nothing, as the operator does in a cluster.
   */
  #heldKeys(keys: FolderKey[], problems: FolderProblem[]): FolderKey[] {
    const { defaultNamespace } = this.#options;
    const refOf = (key: FolderKey): string => `${key.meta.namespace ?? defaultNamespace}/${key.meta.name}`;
    const claimants = new Map<string, FolderKey[]>();
    for (const key of keys) {
      const same = claimants.get(key.hash);
      if (same) same.push(key);
      else claimants.set(key.hash, [key]);
    }
    const holders = new Map<string, string>();
    const held: FolderKey[] = [];
    for (const [hash, same] of claimants) {
      if (same.length === 1) {
        holders.set(hash, refOf(same[0]!));
        held.push(same[0]!);
        continue;
      }
      const last = this.#keyHolders.get(hash);
      const holder = same.find((key) => refOf(key) === last) ?? same.reduce((first, key) => (refOf(key) < refOf(first) ? key : first));
      holders.set(hash, refOf(holder));
      held.push(holder);
      for (const other of same) {
        if (other === holder) continue;
        const reason = `spec.key_hash is also that of Key ${refOf(holder)}, which holds its session: this Key is not in force`;
        addProblem(problems, this.#problemLog, other.doc.file.path, { subject: other.subject, reason, kind: 'Key', code: 'DuplicateKeyHash' });
      }
    }
    this.#keyHolders = holders;
    return held;
  }

  /** The Keys that name themselves and their hash; the others are reported. */
  #servableKeys(docs: FoundDoc[], problems: FolderProblem[]): FolderKey[] {
    const keys: FolderKey[] = [];
    for (const doc of docs) {
      const meta = metaOf(doc);
      const spec = doc.object.spec as { key_hash?: unknown } | undefined;
      const subject = `Key ${meta?.namespace ?? this.#options.defaultNamespace}/${meta?.name ?? `in ${basename(doc.file.path)}`}`;
      if (meta === null || typeof spec?.key_hash !== 'string') problems.push(this.#unservableKey(doc, meta, subject));
      // Not a hash: most likely the raw key pasted in its place. It names no session (nothing is
      // read, written or logged under it), and the problem does not repeat it.
      else if (!keyHashFormat.test(spec.key_hash)) addProblem(problems, this.#problemLog, doc.file.path, { subject, reason: NOT_A_KEY_HASH, kind: 'Key', code: 'InvalidSpec' });
      else keys.push({ doc, meta, hash: spec.key_hash, spec, subject });
    }
    return keys;
  }

  #unservableKey(doc: FoundDoc, meta: Meta | null, subject: string): FolderProblem {
    const missing = meta === null ? 'metadata.name' : 'spec.key_hash';
    this.#problemLog.warn({ file: doc.file.path, resource: meta?.name }, `Key without ${missing} skipped: a standalone gateway cannot generate raw keys`);
    const file = basename(doc.file.path);
    if (meta === null) return { subject, reason: 'no metadata.name; skipped', kind: 'Key', code: 'MissingName', file };
    const reason =
      'no spec.key_hash; skipped: a standalone gateway cannot generate raw keys (create keys with the admin API, or set key_hash to the SHA-256 of a key you choose)';
    return { subject, reason, kind: 'Key', code: 'MissingKeyHash', file };
  }

  async #revokeKeysGone(present: Set<string>): Promise<void> {
    await this.#revoke([...this.#keyHashes].filter((hash) => !present.has(hash)));
    this.#keyHashes = present;
    await this.#revokeCreatedGone(present);
  }

  async #revoke(hashes: readonly string[]): Promise<void> {
    await inBatches(hashes, async (hash) => {
      await this.#options.sessions.delete(hash);
      // A Key the admin API created is forgotten once its session is gone, not before: a failed delete is tried again.
      this.#createdKeys.delete(hash);
      this.#options.logger.info({ keyHash: hash.slice(0, 12) }, 'Key gone from the config folder; its session removed');
    });
  }

  /** A Key file the admin operations wrote (FolderResourceStore), its session stored: see #createdKeys. */
  keyCreated(hash: string): void {
    this.#createdKeys.set(hash, this.#reads);
  }

  /** Revokes the Keys created here that this load's read, begun after they were written, did not find. */
  async #revokeCreatedGone(present: ReadonlySet<string>): Promise<void> {
    const gone: string[] = [];
    for (const [hash, readsBefore] of this.#createdKeys) {
      if (present.has(hash)) this.#createdKeys.delete(hash);
      else if (readsBefore < this.#reads) gone.push(hash);
    }
    await this.#revoke(gone);
  }

  #report(problems: FolderProblem[]): void {
    this.#problems = problems;
    const gauge = this.#options.metrics.configProblems;
    // Only the series this source set: the config runtime sets its own (ListenPathTaken) in the same gauge.
    for (const labels of this.#gaugeSeries.values()) gauge.remove(labels);
    this.#gaugeSeries = new Map(problems.map(({ kind, code }) => [`${kind}/${code}`, { kind, reason: code }]));
    for (const { kind, code } of problems) gauge.inc({ kind, reason: code });
  }

  fileOf(resource: ResourceRef): string | undefined {
    return this.#files.get(refName(resource));
  }

  problems(): ConfigProblem[] {
    return this.#problems.map(({ subject, reason, file }) => (file === undefined ? { subject, reason } : { subject, reason, file }));
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#sessionsRetry);
    this.#watch?.close();
    await this.#queue;
  }
}
