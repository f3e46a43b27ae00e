import type { Redis, Cluster } from 'ioredis';
import { sessionSchema, type Session } from '../crds/session.ts';
import { sessionKey } from './redis-keys.ts';

/**
 * Where key sessions live, by key hash. The operator writes sessions for Key resources,
 * the admin create-key operation writes new ones, the sidecar reads them to authenticate.
 */
export interface SessionStore {
  get(keyHash: string): Promise<Session | null>;
  /**
   * The stored JSON as it is, unparsed (null: no such key): for a reader that keeps what it
   * parsed last and parses again only what changed (sidecar/auth/session-cache.ts).
   */
  getJson(keyHash: string): Promise<string | null>;
  /** Stores the session; resolves to the text stored, as `getJson` will give it back. */
  put(keyHash: string, session: Session): Promise<string>;
  delete(keyHash: string): Promise<void>;
}

/** What a reader of stored sessions needs: the session cache (sidecar/auth/session-cache.ts). */
export interface SessionReads {
  /**
   * `SessionStore.getJson`. `seen`: the reader found this key's session before and was told of
   * no change to it since, so it most likely exists (tracked reads take the hint:
   * sidecar/auth/session-changes.ts).
   */
  getJson(keyHash: string, seen?: boolean): Promise<string | null>;
}

/** A stored value that no longer parses is treated as absent: the key is refused, not crashed on. */
export function parseSession(raw: string | null): Session | null {
  if (raw === null) return null;
  try {
    const parsed = sessionSchema.safeParse(JSON.parse(raw));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

export class RedisSessionStore implements SessionStore {
  readonly #redis: Redis | Cluster;

  constructor(redis: Redis | Cluster) {
    this.#redis = redis;
  }

  async get(keyHash: string): Promise<Session | null> {
    return parseSession(await this.getJson(keyHash));
  }

  getJson(keyHash: string): Promise<string | null> {
    return this.#redis.get(sessionKey(keyHash));
  }

  async put(keyHash: string, session: Session): Promise<string> {
    const json = JSON.stringify(session);
    await this.#redis.set(sessionKey(keyHash), json);
    return json;
  }

  async delete(keyHash: string): Promise<void> {
    await this.#redis.del(sessionKey(keyHash));
  }
}

/** The standalone store: one process, no Redis. Values are copied so callers cannot alias them. */
export class MemorySessionStore implements SessionStore {
  readonly #sessions = new Map<string, string>();

  async get(keyHash: string): Promise<Session | null> {
    return parseSession(await this.getJson(keyHash));
  }

  async getJson(keyHash: string): Promise<string | null> {
    return this.#sessions.get(keyHash) ?? null;
  }

  async put(keyHash: string, session: Session): Promise<string> {
    const json = JSON.stringify(session);
    this.#sessions.set(keyHash, json);
    return json;
  }

  async delete(keyHash: string): Promise<void> {
    this.#sessions.delete(keyHash);
  }
}
