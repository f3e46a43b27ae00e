import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { OperatorMetrics } from '../../../operator/runtime/metrics.ts';
import { GATEWAY_POD_LABEL, sidecarContainer, SIDECAR_PORTS } from '../../../operator/webhook/injector.ts';
import { gatewayErrors } from '../../../sidecar/http/errors.ts';
import { createLimitMetrics } from '../../../sidecar/limits/metrics.ts';
import { StoreHealth } from '../../../sidecar/limits/store-health.ts';
import { createSidecarMetrics } from '../../../sidecar/metrics.ts';
import { ensurePromtool } from '../../harness/install-promtool.ts';
import { createNamespace, kubectl } from '../../harness/index.ts';
import { runTool } from '../../harness/run-tool.ts';
import { CHART_DIR, findObject, helm, renderChart, setArgs, type K8sObject } from './helm.ts';

/**
 * The monitoring the chart can ship: PodMonitors that find the pods serving /metrics, alert
 * rules that promtool accepts and that fire when they should, and a dashboard whose every
 * query names a metric the code registers.
 */

const ON = { 'monitoring.podMonitors.enabled': true, 'monitoring.podMonitors.labels': { release: 'prom' }, 'monitoring.prometheusRule.enabled': true, 'monitoring.dashboard.enabled': true };

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

let ns: string;
let objects: K8sObject[];
let dir: string;

beforeAll(async () => {
  ns = await createNamespace('chart-monitoring');
  objects = await renderChart(ns, ON);
  dir = mkdtempSync(join(tmpdir(), 'gw-monitoring-'));
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const rulesOf = (rendered: K8sObject[]): Rule[] =>
  (findObject(rendered, 'PrometheusRule', 'gw').spec.groups as Array<{ rules: Rule[] }>).flatMap((g) => g.rules);
const dashboardOf = (rendered: K8sObject[]): { panels: Array<{ title: string; targets: Array<{ expr: string }> }> } =>
  JSON.parse(findObject(rendered, 'ConfigMap', 'gw-dashboard').data['gw.json'] as string) as { panels: Array<{ title: string; targets: Array<{ expr: string }> }> };

/** Every series name the code can export: each registry's metrics, histograms with their _bucket, _sum and _count. */
async function registeredNames(): Promise<Set<string>> {
  const sidecar = createSidecarMetrics(new Registry());
  createLimitMetrics(sidecar.registry);
  new StoreHealth(pino({ level: 'silent' }), sidecar.registry);
  const operator = new OperatorMetrics(() => ({}));
  const names = new Set<string>();
  for (const registry of [sidecar.registry, operator.registry]) {
    for (const metric of await registry.getMetricsAsJSON()) {
      names.add(metric.name);
      if (String(metric.type) === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(`${metric.name}${suffix}`);
    }
  }
  return names;
}

describe('chart monitoring', () => {
  it('is off by default, and helm lint --strict passes with all of it on', async () => {
    const plain = await renderChart(ns, {});
    expect(plain.filter((o) => ['PodMonitor', 'PrometheusRule'].includes(o.kind) || o.metadata.name === 'gw-dashboard')).toEqual([]);
    const lint = await helm(['lint', '--strict', CHART_DIR, ...setArgs(ON)]);
    expect(lint.stdout).toContain('0 chart(s) failed');
    expect(lint.stdout).not.toMatch(/\[(WARNING|ERROR)\]/);
  });

  it('points each PodMonitor at the pods, and the named port, that serve /metrics', () => {
    const monitors = objects.filter((o) => o.kind === 'PodMonitor');
    expect(monitors.map((m) => m.metadata.name).sort()).toEqual(['gw-admin', 'gw-operator', 'gw-sidecars']);
    for (const monitor of monitors) expect(monitor.metadata.labels).toMatchObject({ release: 'prom' });
    for (const [monitorName, workloadName] of [['gw-operator', 'gw-operator'], ['gw-admin', 'gw-admin']]) {
      const monitor = findObject(objects, 'PodMonitor', monitorName!);
      const workload = findObject(objects, 'Deployment', workloadName!);
      expect(monitor.spec.selector.matchLabels).toEqual(workload.spec.selector.matchLabels);
      expect(workload.spec.template.metadata.labels).toMatchObject(monitor.spec.selector.matchLabels);
      const port = monitor.spec.podMetricsEndpoints[0];
      expect(port).toMatchObject({ path: '/metrics', interval: '30s' });
      const container = workload.spec.template.spec.containers[0];
      expect(container.ports.map((p: { name: string }) => p.name)).toContain(port.port);
      // The port the health server, which serves /metrics, listens on.
      const listen = container.env.find((e: { name: string }) => e.name === 'GW_HEALTH_LISTEN')?.value as string | undefined;
      const containerPort = container.ports.find((p: { name: string }) => p.name === port.port).containerPort as number;
      if (listen) expect(listen.endsWith(`:${containerPort}`)).toBe(true);
    }
    const sidecars = findObject(objects, 'PodMonitor', 'gw-sidecars');
    expect(sidecars.spec.namespaceSelector).toEqual({ any: true });
    expect(sidecars.spec.selector.matchLabels).toEqual({ [GATEWAY_POD_LABEL]: 'true' });
    const injected = sidecarContainer('*', { image: 'gw-sidecar:test', resources: { requests: {}, limits: {} }, redisUrl: undefined, envSecretName: undefined });
    const health = injected.ports?.find((p) => p.name === sidecars.spec.podMetricsEndpoints[0].port);
    expect(health?.containerPort).toBe(SIDECAR_PORTS.health);
  });

  it('queries only metrics the code registers, in the dashboard and in every alert', async () => {
    const names = await registeredNames();
    const dashboard = dashboardOf(objects);
    const queries = [...dashboard.panels.flatMap((p) => p.targets.map((t) => [p.title, t.expr] as const)), ...rulesOf(objects).map((r) => [r.alert, r.expr] as const)];
    expect(queries.length).toBeGreaterThanOrEqual(15);
    for (const [where, expr] of queries) {
      const used = expr.match(/\bgw_[a-z0-9_]+/g) ?? [];
      expect(used.length, `${where}: ${expr}`).toBeGreaterThan(0);
      for (const name of used) expect(names.has(name), `${where} queries ${name}, which nothing registers`).toBe(true);
    }
    // The refusals panel names stable error codes: each is one the gateway answers with 403 or 429.
    const refusals = dashboard.panels.find((p) => p.title === '429s and 403s by API')!.targets[0]!.expr;
    const codes = /code=~"([^"]+)"/.exec(refusals)![1]!.split('|');
    const statusOf = new Map(Object.values(gatewayErrors).map((e) => [e.code, e.status]));
    for (const code of codes) expect([401, 403, 429], code).toContain(statusOf.get(code));
    expect(codes).toEqual(expect.arrayContaining(['key_rate_limited', 'api_rate_limited', 'quota_exceeded']));
  });

  it('has alert rules promtool accepts, which fire when they should and not otherwise', async () => {
    const promtool = await ensurePromtool();
    const rules = join(dir, 'rules.yaml');
    writeFileSync(rules, toYaml({ groups: findObject(objects, 'PrometheusRule', 'gw').spec.groups }));
    const check = await runTool(promtool, ['check', 'rules', rules], { allowFail: true, timeoutMs: 60_000 });
    expect(check.code, check.stdout + check.stderr).toBe(0);
    expect(check.stdout).toContain(`SUCCESS: ${rulesOf(objects).length} rules found`);
    expect(rulesOf(objects).map((r) => r.alert)).toEqual(['GwRedisUnreachable', 'GwLimitsWithoutRedis', 'GwLimitsFailingClosed', 'GwSessionChangesUntracked', 'GwConfigRefused', 'GwConfigProblems',
      'GwWebhookFailures', 'GwServerErrors', 'GwOperatorLeaderMissing']);

    // Synthetic series, one minute apart: which alerts fire at 15 minutes.
    const tests = {
      rule_files: [rules],
      evaluation_interval: '1m',
      tests: [{
        interval: '1m',
        input_series: [
          { series: 'gw_operator_leader{pod="op-a"}', values: '0x20' },
          { series: 'gw_requests_total{api="shop",code_class="2xx"}', values: '0+90x20' },
          { series: 'gw_requests_total{api="shop",code_class="5xx"}', values: '0+10x20' },
          { series: 'gw_requests_total{api="calm",code_class="2xx"}', values: '0+100x20' },
          { series: 'gw_requests_total{api="calm",code_class="5xx"}', values: '0+1x20' },
          { series: 'gw_limit_decisions_total{namespace="app",pod="p1",outcome="store_unavailable",algorithm="sliding_log"}', values: '0+5x20' },
          { series: 'gw_redis_errors_total{namespace="app",pod="p1"}', values: '0+5x20' },
          { series: 'gw_redis_client_errors_total{namespace="app",pod="p1"}', values: '0+1x20' },
          { series: 'gw_operator_webhook_reviews_total{result="injected"}', values: '0+3x20' },
          { series: 'gw_config_problems{namespace="app",pod="p1",kind="Policy",reason="unknown"}', values: '0x20' },
          // p1 never had reports and p2 always had; p3 lost them at its sixth minute, so at 16m it is still pending.
          { series: 'gw_session_changes_tracked{namespace="app",pod="p1"}', values: '0x20' },
          { series: 'gw_session_changes_tracked{namespace="app",pod="p2"}', values: '1x20' },
          { series: 'gw_session_changes_tracked{namespace="app",pod="p3"}', values: '1x5 0x15' },
        ],
        alert_rule_test: [
          { eval_time: '15m', alertname: 'GwOperatorLeaderMissing', exp_alerts: [{ exp_labels: { severity: 'critical' },
            exp_annotations: { summary: 'No gw operator holds the leader lease.', description: 'Resources are not reconciled and new ApiDefinitions are not served until an operator leads again.' } }] },
          // 10% of shop's requests are 5xx (over 5%); calm's 1% is not.
          { eval_time: '15m', alertname: 'GwServerErrors', exp_alerts: [{ exp_labels: { severity: 'warning', api: 'shop' },
            exp_annotations: { summary: 'An API answers too many 5xx through the gateways.', description: 'shop: 10% of requests answered 5xx.' } }] },
          { eval_time: '15m', alertname: 'GwLimitsFailingClosed', exp_alerts: [{ exp_labels: { severity: 'critical', namespace: 'app', pod: 'p1' },
            exp_annotations: { summary: 'Requests are refused with 503 because Redis is unreachable.', description: 'app/p1 answers 503 store_unavailable (redis_failure_mode closed).' } }] },
          { eval_time: '15m', alertname: 'GwLimitsWithoutRedis', exp_alerts: [{ exp_labels: { severity: 'critical', namespace: 'app', pod: 'p1' },
            exp_annotations: { summary: 'Rate-limit decisions are made without Redis.', description: 'app/p1 decides requests without Redis: it admits them (redis_failure_mode open) or refuses them (closed).' } }] },
          { eval_time: '15m', alertname: 'GwRedisUnreachable', exp_alerts: [{ exp_labels: { severity: 'warning', namespace: 'app', pod: 'p1' },
            exp_annotations: { summary: 'A gateway cannot reach Redis.', description: 'app/p1 has seen Redis connection errors for 5 minutes.' } }] },
          { eval_time: '16m', alertname: 'GwSessionChangesUntracked', exp_alerts: [{ exp_labels: { severity: 'info', namespace: 'app', pod: 'p1' },
            exp_annotations: { summary: 'A gateway reads sessions from Redis every 250 ms instead of when they change.',
              description: "app/p1 has had no reports of session changes from Redis for 15 minutes: it reads each key's session again every 250 ms, and refuses a revoked key within 250 ms rather than at once. Its log says why: a Redis before 6, an ACL without the commands the README's Redis section lists, or a report connection that keeps failing." } }] },
          // Only injected reviews, no config problem: quiet.
          { eval_time: '15m', alertname: 'GwWebhookFailures', exp_alerts: [] },
          { eval_time: '15m', alertname: 'GwConfigProblems', exp_alerts: [] },
          { eval_time: '15m', alertname: 'GwConfigRefused', exp_alerts: [] },
        ],
      }],
    };
    const testFile = join(dir, 'rules.test.yaml');
    writeFileSync(testFile, toYaml(tests));
    const result = await runTool(promtool, ['test', 'rules', testFile], { allowFail: true, timeoutMs: 60_000 });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toContain('SUCCESS');
  });

  it("gives a label that commonLabels also sets once, the monitoring value's, and refuses Helm's own labels", async () => {
    const values = { ...ON, commonLabels: { release: 'common', team: 'edge' }, 'monitoring.prometheusRule.labels': { release: 'rules' }, 'monitoring.dashboard.labels': { team: 'dash' } };
    // parseManifest refuses a document with a key twice, so each label is there once.
    const rendered = await renderChart(ns, values);
    for (const monitor of rendered.filter((o) => o.kind === 'PodMonitor')) expect(monitor.metadata.labels).toMatchObject({ release: 'prom', team: 'edge', 'app.kubernetes.io/part-of': 'gw' });
    expect(findObject(rendered, 'PrometheusRule', 'gw').metadata.labels).toMatchObject({ release: 'rules', team: 'edge' });
    expect(findObject(rendered, 'ConfigMap', 'gw-dashboard').metadata.labels).toMatchObject({ release: 'common', team: 'dash', grafana_dashboard: '1' });
    const refused = await helm(['template', 'gw', CHART_DIR, ...setArgs({ ...ON, 'monitoring.podMonitors.labels': { 'app.kubernetes.io/managed-by': 'me' } })], { allowFail: true });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('monitoring.podMonitors.labels must not set app.kubernetes.io/managed-by: Helm sets it');
  });

  it('ships the dashboard in a ConfigMap the API server accepts, labelled for Grafana', async () => {
    const configMap = findObject(objects, 'ConfigMap', 'gw-dashboard');
    expect(configMap.metadata.labels).toMatchObject({ grafana_dashboard: '1' });
    expect(dashboardOf(objects).panels.map((p) => p.title)).toEqual(['Rate-limit decisions by outcome', '429s and 403s by API', 'Latency added by the gateway',
      'Upstream response time', 'Smoothing allowance', 'Redis round trip', 'Requests by status class', 'Operator', 'Session change reports']);
    const result = await kubectl(['apply', '--dry-run=server', '--validate=strict', '-f', '-'], { input: JSON.stringify(configMap), allowFail: true });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
  });
});
