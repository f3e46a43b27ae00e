import { Counter, type Registry } from 'prom-client';

export interface LimitMetrics {
  decisions: Counter<'algorithm' | 'outcome'>;
  smoothingEvents: Counter<'reason'>;
}

/** Without a registry the counters still count (tests read them) but are exported nowhere. */
export function createLimitMetrics(registry?: Registry): LimitMetrics {
  const registers = registry ? [registry] : [];
  return {
    decisions: new Counter({
      name: 'gw_limit_decisions_total',
      help: 'Rate-limit decisions by the algorithm of the limit that applied and by outcome.',
      labelNames: ['algorithm', 'outcome'],
      registers,
    }),
    smoothingEvents: new Counter({
      name: 'gw_smoothing_events_total',
      help: 'Rate-limit smoothing allowance changes.',
      labelNames: ['reason'],
      registers,
    }),
  };
}
