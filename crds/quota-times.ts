/**
 * How far ahead a quota's times may reach once they count (docs/behaviour.md#evaluation-order).
 * The limit stores count in milliseconds and Redis sets expiries as 64-bit integers: a renewal
 * time plus a period past 2^63 ms wrapped to a negative expiry, which deleted the quota at every
 * request, so a quota_renewal_rate near the schema's bound (2^53 s) was never enforced. The
 * fields keep accepting what they always did (a stored Policy or session is never refused for
 * it); what they say is read within these bounds, which no real period or date reaches, and
 * under which every instant the stores compute stays an exact integer.
 */

/** A thousand years of 365 days: a longer quota period counts as this one. */
export const LONGEST_QUOTA_PERIOD_SECONDS = 1_000 * 31_536_000;

/** 9999-12-31T23:59:59Z: a later quota renewal time counts as this one. */
export const LATEST_QUOTA_RENEWAL_SECONDS = 253_402_300_799;

/** A quota period as it counts, in seconds. */
export const countedQuotaPeriod = (seconds: number): number => Math.min(seconds, LONGEST_QUOTA_PERIOD_SECONDS);

/** A quota renewal time (Unix seconds) as it counts. */
export const countedQuotaRenewal = (seconds: number): number => Math.min(seconds, LATEST_QUOTA_RENEWAL_SECONDS);
