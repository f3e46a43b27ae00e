import type { CompiledSmoothing } from '../../../crds/compiled.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';

/**
 * One store interface, two implementations (Redis, in-memory). A decision hands the
 * store every shared-state operation it needs, in evaluation order; the store runs them
 * in that order and stops at the first refusal, so a refused request consumes nothing
 * after it (its quota included).
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

export interface LimitStore {
  /** Results for the ops run: all of them, or up to and including the first refusal. */
  run(ops: readonly StoreOp[], nowMs: number): Promise<StoreResult[]>;
  configure(settings: GatewaySettings): void;
  close(): Promise<void>;
}

/** Smoothing thresholds never exceed the rate they smooth. */
export function clampSmoothing(smoothing: CompiledSmoothing, rate: number): CompiledSmoothing {
  return { ...smoothing, threshold: Math.min(smoothing.threshold, rate) };
}
