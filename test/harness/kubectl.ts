import { findKubectl } from './bins.ts';
import { runTool, type ToolResult } from './run-tool.ts';

export type KubectlResult = ToolResult;

export interface KubectlOptions {
  input?: string;
  allowFail?: boolean;
  timeoutMs?: number;
}

/** kubectl against the given kubeconfig; a non-zero exit throws unless allowFail. */
export function runKubectl(kubeconfig: string, args: string[], opts: KubectlOptions = {}): Promise<KubectlResult> {
  return runTool(findKubectl(), ['--kubeconfig', kubeconfig, ...args], { ...opts, timeoutMs: opts.timeoutMs ?? 60_000 });
}
