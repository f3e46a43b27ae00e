/**
 * Every Redis key gw writes, in one place. Keys of one limiter share a hash tag
 * (`{...}`) so a limiter's keys live in one Redis Cluster slot and one Lua script can
 * touch all of them.
 */
const prefix = 'gw:';

/** What every session's key starts with: the sidecar asks Redis to report changes under it. */
export const sessionKeyPrefix = `${prefix}session:`;

/** Session of a key, by the hex SHA-256 of the raw key. */
export const sessionKey = (keyHash: string): string => `${sessionKeyPrefix}${keyHash}`;

/** Heartbeat set of live gateways serving one API (members: instance ids, score: expiry ms). */
export const gatewayHeartbeatKey = (apiId: string): string => `${prefix}gateways:${apiId}`;

/**
 * Keys of one rate limiter (sliding log, sentinel, smoothing allowance, fixed-window
 * counters). `limiterId` never holds a raw key: it is built from api ids and hashed
 * identities. The id is the hash tag, so all keys of one limiter share a slot.
 */
export const limiterKey = (limiterId: string, part: string): string => `${prefix}rl:{${limiterId}}:${part}`;

/** Quota state of one rate-limit identity and scope. */
export const quotaKey = (quotaId: string): string => `${prefix}quota:{${quotaId}}`;

/**
 * A gateway's probe while its Redis calls fail (sidecar/limits/store-health.ts): a short-lived
 * write, so a Redis that answers but refuses writes (full under noeviction, a read-only replica)
 * is not taken for one that is back.
 */
export const storeProbeKey = (instanceId: string): string => `${prefix}probe:${instanceId}`;
