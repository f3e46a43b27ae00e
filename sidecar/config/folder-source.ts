import type { Logger } from '../../common/logger.ts';
import { sessionFromKey } from '../../common/session-from-key.ts';
import type { SessionStore } from '../../common/session-store.ts';
import { compile, type ApiDefinitionInput, type PolicyInput } from '../../crds/compile/index.ts';
import type { CompiledConfig } from '../../crds/compiled.ts';
import { documentsOf, readFolder, type FoundDoc } from '../resources/yaml-folder.ts';
import type { SidecarMetrics } from '../metrics.ts';
import type { ConfigProblem, ConfigSource } from './source.ts';

export interface FolderSourceOptions {
  dir: string;
  /** Namespace of resources that name none. */
  defaultNamespace: string;
  sessions: SessionStore;
  logger: Logger;
  metrics: SidecarMetrics;
}

interface Meta {
  name: string;
  namespace?: string;
  uid?: string;
}

function metaOf(doc: FoundDoc): Meta | null {
  const meta = doc.object.metadata as Partial<Meta> | undefined;
  return typeof meta?.name === 'string' && meta.name.length > 0 ? (meta as Meta) : null;
}

/**
 * Standalone config: a folder of the same resource YAML users apply to a cluster
 * (`--config DIR`), run through the same compile step as the operator. Keys' sessions
 * (their spec carries `key_hash`) go into the store. Re-read on `reload()` (GET /gw/reload,
 * SIGHUP); the admin operations write the folder, so a deleted API stays served until then.
 */
export class FolderConfigSource implements ConfigSource {
  readonly name = 'folder';
  readonly #options: FolderSourceOptions;
  #publish: (config: CompiledConfig) => void = () => undefined;
  #problems: ConfigProblem[] = [];

  constructor(options: FolderSourceOptions) {
    this.#options = options;
  }

  async start(publish: (config: CompiledConfig) => void): Promise<void> {
    this.#publish = publish;
    await this.reload();
  }

  #resources<T>(docs: FoundDoc[], kind: string): T[] {
    const out: T[] = [];
    for (const doc of docs) {
      const metadata = metaOf(doc);
      if (metadata === null) {
        this.#options.logger.warn({ file: doc.file.path, kind }, 'resource without metadata.name skipped');
        continue;
      }
      out.push({ metadata: { ...metadata, namespace: metadata.namespace ?? this.#options.defaultNamespace }, spec: doc.object.spec ?? {} } as T);
    }
    return out;
  }

  async #loadKeys(docs: FoundDoc[]): Promise<void> {
    const { sessions, logger, defaultNamespace } = this.#options;
    for (const doc of docs) {
      const meta = metaOf(doc);
      const spec = doc.object.spec as { key_hash?: unknown } | undefined;
      if (meta === null || typeof spec?.key_hash !== 'string') {
        logger.info({ file: doc.file.path, resource: meta?.name }, 'Key without metadata.name or spec.key_hash skipped: standalone mode cannot generate raw keys');
        continue;
      }
      const existing = await sessions.get(spec.key_hash);
      const outcome = sessionFromKey(spec, meta.name, meta.namespace ?? defaultNamespace, existing, new Date());
      if (outcome.ok) await sessions.put(spec.key_hash, outcome.session);
      else logger.warn({ file: doc.file.path, resource: meta.name, problem: outcome.message }, 'invalid Key skipped');
    }
  }

  async reload(): Promise<void> {
    const { dir, logger, metrics } = this.#options;
    try {
      const files = await readFolder(dir);
      const apiDefinitions = this.#resources<ApiDefinitionInput>(documentsOf(files, 'ApiDefinition'), 'ApiDefinition');
      const policies = this.#resources<PolicyInput>(documentsOf(files, 'Policy'), 'Policy');
      const { config, problems } = compile({ apiDefinitions, policies });
      for (const problem of problems) logger.warn({ problem }, 'config problem');
      this.#problems = problems.map((p) => ({ subject: `${p.ref.kind} ${p.ref.namespace}/${p.ref.name}`, reason: `${p.field}: ${p.message}` }));
      await this.#loadKeys(documentsOf(files, 'Key'));
      this.#publish(config);
    } catch (err) {
      metrics.configReloads.inc({ source: this.name, result: 'error' });
      logger.error({ err, dir }, 'config folder could not be read; keeping the last good config');
      throw err;
    }
  }

  problems(): ConfigProblem[] {
    return this.#problems;
  }

  async stop(): Promise<void> {
    // Nothing watches the folder: reloads are explicit.
  }
}
