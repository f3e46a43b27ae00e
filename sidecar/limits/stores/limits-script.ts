import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ReplyError, type Cluster, type Redis } from 'ioredis';

const source = readFileSync(new URL('./limits.lua', import.meta.url), 'utf8');
/**
 * The library and its one function are named after the text, so the gateways of two releases
 * (a rolling upgrade) each call their own and never replace each other's.
 */
export const limitsFunction = `gw_limits_${createHash('sha1').update(source).digest('hex').slice(0, 16)}`;
/** limits.lua as a Redis Function library: its helpers are defined once per load, not once per call. */
export const limitsLibrary = `#!lua name=${limitsFunction}\n${source}\nredis.register_function('${limitsFunction}', limits)\n`;
/** limits.lua as a script for EVALSHA, where the server offers no functions. */
const limitsScript = `${source}\nreturn limits(KEYS, ARGV)\n`;
/**
 * The script's command name on the client (ioredis `defineCommand`: EVALSHA, and EVAL once on
 * NOSCRIPT). The sidecar's client sends it and FCALL outside ioredis's auto-pipelining on one
 * server or a Sentinel set (sidecar/redis.ts): the limit store batches its own calls already.
 */
export const limitsCommand = 'gwLimits';
/** The script's command as ioredis defines it, in the variant that leaves the reply's strings as Buffers. */
const limitsCommandBuffer = `${limitsCommand}Buffer` as const;

/** limits.lua's reply as sent: its numbers packed, then the error messages they refer to. */
export type PackedReply = [Buffer, ...Buffer[]];
export type ScriptArgument = string | number | Buffer;
type ScriptClient = Record<typeof limitsCommandBuffer, (...args: ScriptArgument[]) => Promise<PackedReply>>;

/** Where the script tells how it runs: its function loaded, or functions refused (sidecar/limits/store-health.ts). */
export interface LimitScriptReporter {
  functionLoaded(name: string, primaries: number): void;
  /** Once per process: from now on the script runs by EVALSHA. `reason` is the server's refusal. */
  functionsRefused(reason: string): void;
}

const isReplyError = (error: unknown): error is Error => error instanceof ReplyError;
/**
 * The server has no functions for this client: a Redis before 7 (no FCALL or FUNCTION), a
 * command renamed away, or an ACL user without `+fcall` or `+function|load`.
 */
const functionsUnavailable = (error: Error): boolean => /^ERR unknown command|^NOPERM .*'(fcall|function)/i.test(error.message);
const functionMissing = (error: Error): boolean => error.message.startsWith('ERR Function not found');

/**
 * Runs limits.lua: as the Redis Function `limitsFunction` (FCALL), loaded on first use and
 * again whenever a server lacks it (a restart without persistence, FUNCTION FLUSH, a Cluster's
 * new primary); by EVALSHA from the first time a server refuses functions, for as long as the
 * process lives. Either way one call is one command, with the same keys, arguments and reply
 * (docs/architecture.md#performance).
 */
export class LimitsScript {
  readonly #redis: Redis | Cluster;
  readonly #reporter: LimitScriptReporter;
  readonly #script: ScriptClient;
  #usesFunction = true;
  /** The load in flight: calls that found the function missing meanwhile wait for this one. */
  #loading: Promise<void> | undefined;

  constructor(redis: Redis | Cluster, reporter: LimitScriptReporter, keysPerCallOnCluster: number) {
    this.#redis = redis;
    this.#reporter = reporter;
    // ioredis auto-pipelining routes a defined command on a Cluster by its first argument:
    // the key count, unless the command declares a fixed one. So on a Cluster (one op per
    // call) it is declared, and the first argument is the op's first key. FCALL needs no
    // such help: ioredis knows where its keys are.
    if (!(limitsCommand in redis)) redis.defineCommand(limitsCommand, { lua: limitsScript, numberOfKeys: redis.isCluster ? keysPerCallOnCluster : undefined });
    this.#script = redis as unknown as ScriptClient;
  }

  call(keys: readonly string[], args: readonly ScriptArgument[]): Promise<PackedReply> {
    if (!this.#usesFunction) return this.#evalsha(keys, args);
    return this.#fcall(keys, args).catch((error: unknown) => this.#recover(error, keys, args));
  }

  #fcall(keys: readonly string[], args: readonly ScriptArgument[]): Promise<PackedReply> {
    return this.#redis.callBuffer('fcall', limitsFunction, keys.length, ...keys, ...args) as Promise<PackedReply>;
  }

  #evalsha(keys: readonly string[], args: readonly ScriptArgument[]): Promise<PackedReply> {
    return this.#redis.isCluster ? this.#script[limitsCommandBuffer](...keys, ...args) : this.#script[limitsCommandBuffer](keys.length, ...keys, ...args);
  }

  /**
   * A call that Redis refused before running anything: with functions unavailable it goes
   * by EVALSHA; with the function missing it is loaded and the call sent once more (a second
   * refusal is the caller's error, so a server that keeps losing it costs no loop).
   */
  async #recover(error: unknown, keys: readonly string[], args: readonly ScriptArgument[]): Promise<PackedReply> {
    if (!isReplyError(error)) throw error;
    if (functionsUnavailable(error)) {
      this.#fallBack(error);
      return this.#evalsha(keys, args);
    }
    if (!functionMissing(error)) throw error;
    await (this.#loading ??= this.#load().finally(() => (this.#loading = undefined)));
    return this.#usesFunction ? this.#fcall(keys, args) : this.#evalsha(keys, args);
  }

  /**
   * FUNCTION LOAD on every primary (each of a Cluster's; replicas receive it from theirs).
   * REPLACE makes a load that races another gateway's harmless: the name is the text's.
   */
  async #load(): Promise<void> {
    const primaries = this.#redis.isCluster ? (this.#redis as Cluster).nodes('master') : [this.#redis as Redis];
    try {
      await Promise.all(primaries.map((primary) => primary.call('FUNCTION', 'LOAD', 'REPLACE', limitsLibrary)));
      this.#reporter.functionLoaded(limitsFunction, primaries.length);
    } catch (error) {
      // Anything else (a timeout, a lost connection, LOADING, READONLY) passes: the next call
      // that finds the function missing loads it again.
      if (!(isReplyError(error) && functionsUnavailable(error))) throw error;
      this.#fallBack(error);
    }
  }

  #fallBack(error: Error): void {
    if (!this.#usesFunction) return;
    this.#usesFunction = false;
    this.#reporter.functionsRefused(error.message);
  }
}
