import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { testEnv } from '../../harness/index.ts';
import { runTool, type ToolResult } from '../../harness/run-tool.ts';

export const CHART_DIR = resolve(import.meta.dirname, '../../../charts/gw');

export type HelmResult = ToolResult;

// Helm's own config, cache and data folders, kept out of the user's home.
const helmHome = mkdtempSync(join(tmpdir(), 'gw-chart-helm-'));

/** The pinned helm against the run's control plane; a non-zero exit throws unless allowFail. */
export function helm(args: string[], opts: { allowFail?: boolean; timeoutMs?: number } = {}): Promise<HelmResult> {
  const env = testEnv();
  return runTool(env.helmBin, ['--kubeconfig', env.kubeconfig, ...args], {
    allowFail: opts.allowFail,
    timeoutMs: opts.timeoutMs ?? 90_000,
    env: {
      ...process.env,
      HELM_CONFIG_HOME: join(helmHome, 'config'),
      HELM_CACHE_HOME: join(helmHome, 'cache'),
      HELM_DATA_HOME: join(helmHome, 'data'),
    },
  });
}

/** A rendered Kubernetes object, loosely typed: tests read the fields they check. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  [field: string]: any;
}

export function parseManifest(text: string): K8sObject[] {
  return parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`rendered YAML does not parse: ${doc.errors[0]?.message}`);
      return doc.toJS() as K8sObject | null;
    })
    .filter((obj): obj is K8sObject => obj !== null && typeof obj === 'object');
}

/** `--set`-style arguments from a flat record (values with commas or lists need --set-json). */
export function setArgs(values: Record<string, unknown>): string[] {
  return Object.entries(values).flatMap(([path, value]) => ['--set-json', `${path}=${JSON.stringify(value)}`]);
}

/** helm template of the chart with the given values, in the given namespace. */
export async function renderChart(namespace: string, values: Record<string, unknown> = {}, release = 'gw'): Promise<K8sObject[]> {
  const { stdout } = await helm(['template', release, CHART_DIR, '--namespace', namespace, ...setArgs(values)]);
  return parseManifest(stdout);
}

export function findObject(objects: K8sObject[], kind: string, name: string): K8sObject {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (!found) throw new Error(`no ${kind} ${name} in [${objects.map((o) => `${o.kind}/${o.metadata.name}`).join(', ')}]`);
  return found;
}

/** Pod specs of every workload, with the workload's kind/name for messages. */
export function podSpecs(objects: K8sObject[]): Array<{ owner: string; spec: K8sObject['spec'] }> {
  return objects
    .filter((o) => ['Deployment', 'StatefulSet', 'DaemonSet', 'Job'].includes(o.kind))
    .map((o) => ({ owner: `${o.kind}/${o.metadata.name}`, spec: o.spec.template.spec }));
}

export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string }; fieldRef?: { fieldPath: string } };
}

export function containerEnv(workload: K8sObject, container = 0): EnvVar[] {
  return (workload.spec.template.spec.containers[container].env ?? []) as EnvVar[];
}

export function envValue(env: EnvVar[], name: string): EnvVar {
  const found = env.find((e) => e.name === name);
  if (!found) throw new Error(`no env ${name} in [${env.map((e) => e.name).join(', ')}]`);
  return found;
}
