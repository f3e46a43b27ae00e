import type { EventsV1Event } from '@kubernetes/client-node';
import type { z } from 'zod';
import { keyLimitsAnswerSchema, liveGatewaysAnswerSchema, type KeyLimitsAnswer, type LiveGatewaysAnswer } from '../crds/admin-answers.ts';
import { kindNames } from '../crds/kinds.ts';
import { PluginError, type Cluster } from './cluster.ts';
import { age, duration, structured, table, type OutputFormat } from './output.ts';

/** How the plugin reaches the admin gateway. */
export interface AdminAccess {
  /** Unset: through the API server's proxy to the chart's admin Service. */
  adminUrl: string | undefined;
  /** GW_ADMIN_SECRET, else read from the admin gateway's Secret. */
  adminSecret: string | undefined;
}

export interface LimitsRequest extends AdminAccess {
  key: string;
  api: string;
  path: string | undefined;
  method: string | undefined;
}

/**
 * An admin read's JSON answer; anything but 200 is the user's error, with the gateway's message,
 * and an answer of another shape (a gateway of another version) is named by its first problem.
 */
async function adminRead<T>(cluster: Cluster, access: AdminAccess, path: string, schema: z.ZodType<T>): Promise<T> {
  const secret = access.adminSecret || (await cluster.adminSecret());
  // No request header carries a newline, and the gateway compares its secret as it is.
  if (/[\r\n]/.test(secret)) throw new PluginError('the admin secret (GW_ADMIN_SECRET, else the admin gateway\'s Secret) holds a newline, often a trailing one from a file: no request can carry it; set it without');
  const res = await cluster.adminGet(path, secret, access.adminUrl);
  if (res.status !== 200) throw new PluginError(`the admin gateway answered ${res.status}: ${messageOf(res.body)}`);
  let body: unknown;
  try {
    body = JSON.parse(res.body);
  } catch {
    // Not JSON: the schema names it.
  }
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const [issue] = parsed.error.issues;
  throw new PluginError(`the admin gateway's answer to ${path.split('?')[0]} is not one this plugin reads (a gateway of another gw version?): ${issue?.path.join('.') || 'the answer'}: ${issue?.message}`);
}

const sourceName = (source: { kind: string; name: string }): string => `${source.kind}/${source.name}`;
const rate = (r: { rate: number; per: number }): string => `${r.rate}/${r.per}s`;

/** A level's smoothing: in force, or configured where its algorithm does not apply it (docs/behaviour.md#smoothing). */
function smoothingCell({ smoothing, unused_smoothing: unused, algorithm }: KeyLimitsAnswer['limits'][number]): string {
  if (smoothing) return `threshold ${smoothing.threshold}, step ${smoothing.step}`;
  return unused ? `not applied: ${algorithm} does not smooth (sliding log only)` : '-';
}
const plural = (count: number, noun: string): string => `${count} ${noun}${count === 1 ? '' : 's'}`;
const orDash = (value: number | string | null): string => (value === null ? '-' : String(value));
/** RESET: the time until, as kubectl's ages read (59m52s, not 3592s). */
/** The gateway rounds a reset up to its second; the time now is not rounded, or the wait read a second long. */
const untilReset = (reset: number | null, nowMs: number): string => (reset === null || reset === 0 ? '-' : duration(Math.max(0, Math.floor(reset - nowMs / 1000))));

/** `kubectl gw limits KEY --api ID`: the effective-limits read of the Key's hash, as a table. */
export async function limits(cluster: Cluster, req: LimitsRequest, format: OutputFormat): Promise<string> {
  const key = await cluster.getResource('Key', cluster.namespace, req.key);
  if (!key) throw new PluginError(`Key ${cluster.namespace}/${req.key} not found`);
  const hash = key.status?.key_hash ?? (typeof key.spec?.key_hash === 'string' ? key.spec.key_hash : undefined);
  if (!hash) throw new PluginError(`Key ${cluster.namespace}/${req.key} has no hash yet: the operator has not reconciled it (kubectl get gwkey ${req.key} -n ${cluster.namespace})`);
  const query = new URLSearchParams({ api_id: req.api });
  if (req.path) query.set('path', req.path);
  if (req.method) query.set('method', req.method);
  const answer = await adminRead(cluster, req, `/gw/keys/${hash}/limits?${query.toString()}`, keyLimitsAnswerSchema);
  if (format === 'json' || format === 'yaml') return structured(format, answer);
  return limitsTable(`${cluster.namespace}/${req.key}`, answer, format === 'wide', Date.now());
}

/**
 * The gateway's message, else a summary of a body that is not its JSON (a proxy's HTML page:
 * its title), on one line, as an error line and status' "Gateways not read" are.
 */
function messageOf(body: string): string {
  let message = body;
  try {
    // The /gw reads' shape, the admin operations' (`Message`), the proxy listener's (`error`).
    const parsed = JSON.parse(body) as { message?: unknown; Message?: unknown; error?: unknown };
    const found = [parsed.message, parsed.Message, parsed.error].find((value) => typeof value === 'string');
    if (typeof found === 'string') message = found;
  } catch {
    // Not JSON: the body itself, summarised.
  }
  const title = /<title>([^<]*)<\/title>/i.exec(message)?.[1];
  const text = (title ?? message.replace(/<[^>]*>/g, ' ')).replace(/\s+/g, ' ').trim();
  if (text === '') return '(no message)';
  return text.length > 200 ? `${text.slice(0, 200)}...` : text;
}

/**
 * What a request now gets. A throttled key's request that a rate limit refuses is held in the
 * gateway and admitted if a retry finds room (docs/behaviour.md#throttling): refused only then.
 */
function verdictOf(answer: KeyLimitsAnswer): string {
  if (!answer.answer) return 'is allowed';
  const refusal = `refused by ${answer.refused_by ?? (answer.outcome === 'api_inactive' ? 'the API (not active)' : `access (${answer.access})`)}: ${answer.answer.status} ${answer.answer.code}`;
  const t = answer.throttle;
  const rateLimited = answer.outcome === 'key_rate_limited' || answer.outcome === 'api_rate_limited';
  if (!t || !rateLimited) return `is ${refusal}`;
  return `waits in the gateway (throttled: up to ${t.retries} retries every ${t.interval} s, at most ${t.max_wait} s), and is ${refusal} only if no retry finds room`;
}

export function limitsTable(key: string, answer: KeyLimitsAnswer, wide: boolean, nowMs: number): string {
  const lines = [`Key ${key} on API ${answer.api_id}, ${answer.method} ${answer.path}: a request now ${verdictOf(answer)}`, ''];
  const header = ['LEVEL', 'SOURCE', 'RULE', 'ALGORITHM', 'COUNT', 'LIMIT', 'REMAINING', 'RESET', ...(wide ? ['RATE', 'DRL SHARE', 'SMOOTHING'] : [])];
  const rows = answer.limits.map((l) => [
    l.level,
    sourceName(l.source),
    l.rule ?? '-',
    l.algorithm,
    orDash(l.count),
    orDash(l.limit),
    orDash(l.remaining),
    untilReset(l.reset, nowMs),
    ...(wide ? [rate(l), l.drl ? `${l.drl.share} (${plural(l.drl.gateways, 'gateway')})` : '-', smoothingCell(l)] : []),
  ]);
  const q = answer.quota;
  if (q) rows.push(['quota', sourceName(q.source), '-', '-', String(q.used), String(q.max), String(q.remaining), untilReset(q.reset, nowMs), ...(wide ? [`${q.max}/${q.renewal}s`, '-', '-'] : [])]);
  if (rows.length > 0) lines.push(table(header, rows).trimEnd());
  else if (answer.outcome === 'api_inactive') lines.push('The API is not active: the gateway refuses every request to it before any key or limit.');
  else lines.push(answer.access === 'granted' ? 'No limit applies.' : `The key may not call this API (${answer.access}).`);
  const t = answer.throttle;
  if (t) lines.push('', `Throttled: a request its rate limits refuse waits in the gateway, looking again every ${t.interval} s up to ${t.retries} times (at most ${t.max_wait} s), and is refused only if none finds room.`);
  for (const [title, list] of [['passed over (a more specific limit applies)', answer.passed_over], ['chosen over (lower effective rate)', answer.chosen_over]] as const) {
    if (list.length > 0) lines.push('', `${title}:`, ...list.map((a) => `  ${a.level}  ${sourceName(a.source)}${a.rule ? ` ${a.rule}` : ''}  ${rate(a)}`));
  }
  const unused = answer.unused_smoothing;
  if (unused.length > 0) lines.push('', 'smoothing not applied:', ...unused.map((u) => `  ${u.level}  ${sourceName(u.source)}  ${u.reason}`));
  return `${lines.join('\n')}\n`;
}

interface NotReady {
  namespace: string;
  kind: string;
  name: string;
  ready: string;
  reason: string;
  message: string;
  since: string | undefined;
}

/** The live gateways, or why they could not be read: status shows the resources either way. */
async function gatewaysOf(cluster: Cluster, access: AdminAccess): Promise<{ gateways: LiveGatewaysAnswer | null; gatewaysError?: string }> {
  try {
    return { gateways: await adminRead(cluster, access, '/gw/gateways', liveGatewaysAnswerSchema) };
  } catch (error) {
    return { gateways: null, gatewaysError: (error as Error).message };
  }
}

export function gatewaysTable({ gateways, gatewaysError }: { gateways: LiveGatewaysAnswer | null; gatewaysError?: string }): string {
  if (!gateways) return `Gateways not read: ${gatewaysError ?? 'no answer'}\n`;
  if (!gateways.heartbeats) return 'Gateways are not seen: they beat only while the Distributed Rate Limiter is in use (another algorithm is set).\n';
  if (gateways.apis.length === 0) return 'Gateways seen live: none to list (the gateway read has loaded no API, and gateways are counted per API).\n';
  const rows = gateways.apis.map((api) => [api.api_id, String(api.gateways.length), api.gateways.join(', ') || '-']);
  return `Gateways seen live (their DRL heartbeats):\n${table(['API', 'LIVE', 'GATEWAYS'], rows)}`;
}

/** `kubectl gw status`: every gw resource whose Ready condition is not True, then the gateways seen live. */
export async function status(cluster: Cluster, allNamespaces: boolean, access: AdminAccess, format: OutputFormat): Promise<string> {
  const namespace = allNamespaces ? null : cluster.namespace;
  const resources = (await Promise.all(kindNames.map((kind) => cluster.listResources(kind, namespace)))).flat();
  const notReady = resources.flatMap((r): NotReady[] => {
    const ready = r.status?.conditions?.find((c) => c.type === 'Ready');
    if (ready?.status === 'True') return [];
    return [{ namespace: r.metadata.namespace, kind: r.kind, name: r.metadata.name, ready: ready?.status ?? 'Unknown', reason: ready?.reason ?? 'NotReconciled', message: ready?.message ?? 'the operator has not reported on it yet', since: ready?.lastTransitionTime ?? r.metadata.creationTimestamp }];
  });
  const live = await gatewaysOf(cluster, access);
  if (format === 'json' || format === 'yaml') return structured(format, { not_ready: notReady, gateways: live.gateways, ...(live.gatewaysError ? { gateways_error: live.gatewaysError } : {}) });
  const header = [...(allNamespaces ? ['NAMESPACE'] : []), 'KIND', 'NAME', 'READY', 'REASON', 'AGE', ...(format === 'wide' ? ['MESSAGE'] : [])];
  const rows = notReady.map((r) => [...(allNamespaces ? [r.namespace] : []), r.kind, r.name, r.ready, r.reason, r.since ? age(new Date(r.since)) : '-', ...(format === 'wide' ? [r.message] : [])]);
  const where = namespace ? ` in namespace ${namespace}` : '';
  // As kubectl says of an empty list, rather than "all 0 are Ready".
  const allReady = resources.length === 0 ? `No gw resources found${where}.\n` : `All ${resources.length} gw resources${where} are Ready.\n`;
  const resourcesPart = notReady.length === 0 ? allReady : table(header, rows);
  return `${resourcesPart}\n${gatewaysTable(live)}`;
}

const whenOf = (e: EventsV1Event): Date =>
  new Date(e.series?.lastObservedTime ?? e.eventTime ?? e.deprecatedLastTimestamp ?? e.metadata?.creationTimestamp ?? 0);

/** gw's own Events (the operator's, the sidecars' smoothing) and any Event about a gw resource. */
const isGwEvent = (e: EventsV1Event): boolean => (e.reportingController ?? '').startsWith('gw.dev/') || (e.regarding?.apiVersion ?? '').startsWith('gw.dev/');

/**
 * The Events as `kubectl get events.events.k8s.io -o json` prints them: a v1 List whose items say
 * their apiVersion and kind (a list's items come without), less the server's managedFields.
 */
function eventList(found: EventsV1Event[]) {
  const items = found.map(({ metadata, ...event }) => {
    const { managedFields: _managedFields, ...meta } = metadata ?? {};
    return { apiVersion: 'events.k8s.io/v1', kind: 'Event', metadata: meta, ...event };
  });
  return { apiVersion: 'v1', kind: 'List', items };
}

/** COUNT and REPORTER: a core/v1 Event, as the events.k8s.io API shows it, keeps them in its deprecated fields. */
const countAndReporter = (e: EventsV1Event): string[] => [String(e.series?.count ?? e.deprecatedCount ?? 1), e.reportingController || e.deprecatedSource?.component || ''];

/** `kubectl gw events`: gw's Events, newest first. */
export async function events(cluster: Cluster, allNamespaces: boolean, format: OutputFormat): Promise<string> {
  const list = await cluster.events(allNamespaces ? null : cluster.namespace);
  const found = list.items.filter(isGwEvent).sort((a, b) => whenOf(b).getTime() - whenOf(a).getTime());
  if (format === 'json' || format === 'yaml') return structured(format, eventList(found));
  if (found.length === 0) return `No gw Events${allNamespaces ? '' : ` in namespace ${cluster.namespace}`}.\n`;
  const wide = format === 'wide';
  const header = [...(allNamespaces ? ['NAMESPACE'] : []), 'LAST SEEN', 'TYPE', 'REASON', 'OBJECT', ...(wide ? ['COUNT', 'REPORTER'] : []), 'MESSAGE'];
  const rows = found.map((e) => [
    ...(allNamespaces ? [e.metadata?.namespace ?? ''] : []),
    age(whenOf(e)),
    e.type ?? '',
    e.reason ?? '',
    `${e.regarding?.kind ?? ''}/${e.regarding?.name ?? ''}`,
    ...(wide ? countAndReporter(e) : []),
    e.note ?? '',
  ]);
  return table(header, rows);
}
