/**
 * A Map key made of several parts, as one flat string. A template literal joining them is,
 * past 13 characters, a chain of V8 cons strings (one 32-byte object per join) that lives as
 * long as the key: the operator's 31,000 keys at 10,000 Keys held 3.9 MiB of them
 * (docs/benchmarks.md#operator). Array.prototype.join builds the string flat.
 */
export const flatKey = (...parts: string[]): string => parts.join('/');
