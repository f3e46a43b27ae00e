import { Redis } from 'ioredis';
import { kindCodes } from '../../sidecar/limits/stores/redis-store.ts';
import type { LimitEngine, LimitRequest } from '../../sidecar/limits/types.ts';

/**
 * Round trips per rate-limit decision as Redis sees them (the integration tests and the
 * bench share this). MONITOR on every data node records each call of limits.lua (FCALL, or
 * EVALSHA where functions are unavailable), with
 * Redis's own timestamp; its `member` argument names the decision, so the calls of one
 * decision are grouped whatever runs concurrently. A decision's calls fall in waves that
 * the gateway cannot send before the previous wave answered: the limit scripts (on a
 * Cluster one per limiter slot, all sent together), then a quota that runs alone (Cluster),
 * then the calls that undo a refused request's admissions (Cluster). On one server a
 * single call carries everything: one wave. Each later wave is checked to reach Redis
 * after every call of the waves before it.
 */

export interface NodeAddress {
  host: string;
  port: number;
  password?: string;
}

interface ScriptCall {
  atUs: number;
  member: string;
  kinds: string[];
}

export interface RoundTrips {
  decisions: number;
  scriptCallsPerDecision: number;
  roundTripsPerDecision: number;
  /** Decisions whose waves did not reach Redis in order (always 0 when they are true waves). */
  outOfOrder: number;
  outcomes: Record<string, number>;
}

/** MONITOR prints `seconds.micros`; whole microseconds fit a double exactly. */
const micros = (time: string): number => {
  const [seconds, fraction = '0'] = time.split('.');
  return Number(seconds) * 1_000_000 + Number(fraction.padEnd(6, '0'));
};

const kindOfCode = new Map<number, string>(Object.entries(kindCodes).map(([kind, code]) => [code, kind]));

/**
 * The bytes MONITOR printed as an escaped string (ioredis has already turned `\"` back into
 * `"`): `\xHH`, the C escapes, and every other character as itself.
 */
function unescapeMonitorArg(text: string): Buffer {
  const bytes: number[] = [];
  const escapes: Record<string, number> = { n: 10, r: 13, t: 9, a: 7, b: 8, '\\': 92, '"': 34 };
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== '\\') {
      bytes.push(text.charCodeAt(i));
    } else if (text[i + 1] === 'x') {
      bytes.push(parseInt(text.slice(i + 2, i + 4), 16));
      i += 3;
    } else {
      bytes.push(escapes[text[i + 1]!] ?? text.charCodeAt(i + 1));
      i += 1;
    }
  }
  return Buffer.from(bytes);
}

/** An op's kind from its packed argument (limits.lua: the kind's code is the first double). */
const kindOf = (packed: string): string => kindOfCode.get(unescapeMonitorArg(packed).readDoubleLE(0)) ?? '?';

/**
 * FCALL function (or EVALSHA sha) numkeys key... clock deadline, then per decision: member refused resets count, then one packed op each.
 * A call that carries several decisions counts once for each of them.
 */
function parseCalls(time: string, args: string[]): ScriptCall[] {
  if (!['fcall', 'evalsha'].includes(args[0]?.toLowerCase() ?? '')) return [];
  const calls: ScriptCall[] = [];
  for (let at = 5 + Number(args[2]); at < args.length; ) {
    const count = Number(args[at + 3]);
    const kinds: string[] = [];
    for (let op = 0; op < count; op++) kinds.push(kindOf(args[at + 4 + op]!));
    calls.push({ atUs: micros(time), member: args[at]!, kinds });
    at += 4 + count;
  }
  return calls;
}

type Wave = 'limits' | 'quota' | 'undo';
const waveOf = (call: ScriptCall): Wave => (call.kinds.some((k) => 'LSF'.includes(k)) ? 'limits' : call.kinds.includes('Q') ? 'quota' : 'undo');
const waveOrder: Wave[] = ['limits', 'quota', 'undo'];

function analyse(calls: readonly ScriptCall[]): Omit<RoundTrips, 'outcomes'> {
  const byDecision = new Map<string, ScriptCall[]>();
  for (const call of calls) byDecision.set(call.member, [...(byDecision.get(call.member) ?? []), call]);
  let waves = 0;
  let outOfOrder = 0;
  for (const decision of byDecision.values()) {
    const present = waveOrder.map((wave) => decision.filter((call) => waveOf(call) === wave)).filter((group) => group.length > 0);
    waves += present.length;
    for (let i = 1; i < present.length; i++) {
      const before = Math.max(...present.slice(0, i).flat().map((call) => call.atUs));
      if (present[i]!.some((call) => call.atUs < before)) outOfOrder += 1;
    }
  }
  const decisions = byDecision.size;
  return { decisions, scriptCallsPerDecision: calls.length / decisions, roundTripsPerDecision: waves / decisions, outOfOrder };
}

/**
 * `decisions` decisions of `request` on `engine` (`inFlight` at a time), watched on
 * `nodes`; only the script calls of `instanceId` (the engine's) are counted.
 */
export async function measureRoundTrips(options: {
  engine: LimitEngine;
  instanceId: string;
  request: LimitRequest;
  decisions: number;
  inFlight: number;
  nodes: readonly NodeAddress[];
}): Promise<RoundTrips> {
  const calls: ScriptCall[] = [];
  const clients = options.nodes.map((node) => new Redis({ host: node.host, port: node.port, password: node.password, lazyConnect: true }));
  const monitors = await Promise.all(clients.map((client) => client.monitor()));
  for (const monitor of monitors) {
    monitor.on('monitor', (time: string, args: string[], source: string) => {
      if (source === 'lua') return;
      for (const call of parseCalls(time, args)) if (call.member.startsWith(`${options.instanceId}:`)) calls.push(call);
    });
  }
  const outcomes: Record<string, number> = {};
  try {
    let next = 0;
    await Promise.all(
      Array.from({ length: options.inFlight }, async () => {
        while (next < options.decisions) {
          next += 1;
          const { outcome } = await options.engine.decide(options.request);
          outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        }
      }),
    );
    // MONITOR lines trail the replies a little.
    await new Promise((resolve) => setTimeout(resolve, 200));
  } finally {
    for (const monitor of monitors) monitor.disconnect();
    for (const client of clients) client.disconnect();
  }
  return { ...analyse(calls), outcomes };
}
