import type { CompiledSmoothing } from '../../../crds/compiled.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';

/**
 * One store interface, two implementations (Redis, in-memory). A decision hands the
 * store every shared-state operation it needs, in evaluation order; the store runs them
 * in that order and stops at the first refusal. A refused request consumes nothing: the
 * admissions it got from earlier ops are undone in the same call (so a request that one
 * key's limit refuses takes nothing from the API's allowance), and nothing after the
 * refusal runs (its quota included). The refusing op keeps what its algorithm records
 * for refusals: the sliding log logs them (spike arrest).
 */

export type StoreOp =
  | { kind: 'sliding_log'; limiterId: string; rate: number; perMs: number; smoothing: CompiledSmoothing | null }
  | { kind: 'sentinel'; limiterId: string; rate: number; perMs: number }
  | { kind: 'fixed_window'; limiterId: string; rate: number; perMs: number }
  | { kind: 'quota'; quotaId: string; max: number; renewalMs: number; initRemaining: number; initRenewsMs: number };

export interface StoreResult {
  allowed: boolean;
  /** The allowance in force (the smoothed allowance under smoothing). */
  limit: number;
  remaining: number;
  /** Unix ms when the allowance is next restored; 0 for a quota that never renews. */
  resetMs: number;
  /** Set when smoothing changed the allowance during this operation. */
  smoothing: { oldAllowance: number; newAllowance: number } | null;
}

/**
 * What one op's limiter holds at a moment, read without counting (the effective-limits
 * read, docs/behaviour.md#why-was-a-request-limited). `limit`, `remaining` and `resetMs`
 * are what a request's rate headers would show if it arrived now and found this; 0 remaining
 * means that request would be refused here.
 */
export interface PeekResult {
  /** Requests in the window (refused ones too where the algorithm logs them); a quota's: used this period. */
  count: number;
  limit: number;
  remaining: number;
  resetMs: number;
}

export interface LimitStore {
  /**
   * Results for the ops run: all of them, or up to and including the first refusal.
   * `refused`: a limit outside the store (the DRL) already refused the request, so the
   * ops run for their refusal records and the verdict of the earlier levels, and every
   * admission is undone.
   */
  run(ops: readonly StoreOp[], refused: boolean): Promise<StoreResult[]>;
  /** What every op's limiter holds now, in order; nothing is counted, logged or expired. */
  peek(ops: readonly StoreOp[]): Promise<PeekResult[]>;
  configure(settings: GatewaySettings): void;
  close(): Promise<void>;
}

/** Smoothing thresholds never exceed the rate they smooth. */
export function clampSmoothing(smoothing: CompiledSmoothing, rate: number): CompiledSmoothing {
  return { ...smoothing, threshold: Math.min(smoothing.threshold, rate) };
}
