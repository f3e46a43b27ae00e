/**
 * Contract between the bench runner (test/bench/run.ts) and the suites under
 * test/bench/suites/: each suite module's default export takes a context and returns
 * rows. Figures are compared with a baseline measured in the same run.
 */
import type { Revision } from './revision.ts';

export interface BenchRow {
  suite: string;
  name: string;
  value: number;
  unit: string;
  /** Name of the row in the same suite this one is compared with, if any. */
  baseline?: string;
  /** value / baseline value, filled by the suite or the runner. */
  ratio?: number;
  /** For a ratio taken in each of several rounds (`ratio` is their median): how far the rounds spread. */
  spread?: RoundSpread;
}

/** The lowest and highest of a ratio's per-round values: one run's own noise, beside its median. */
export interface RoundSpread {
  low: number;
  high: number;
  rounds: number;
}

export interface BenchContext {
  /** URL of a Redis started for this run (redis://127.0.0.1:PORT). */
  redisUrl(): Promise<string>;
  /** Path of a kubeconfig for a control plane started for this run. */
  kubeconfig(): Promise<string>;
  /** PIDs of that control plane's etcd and kube-apiserver, to read what CPU they spent. */
  controlPlanePids(): Promise<number[]>;
  /** `--against REV`: the other revision whose sidecars the proxy suite measures beside this tree's. */
  against?: Revision;
  /** Bounded duration for one measurement, in ms (short under BENCH_QUICK=1). */
  durationMs: number;
  log(message: string): void;
}

export type BenchSuite = (ctx: BenchContext) => Promise<BenchRow[]>;
