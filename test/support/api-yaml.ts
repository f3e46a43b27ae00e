/** A keyless ApiDefinition as a standalone folder holds it: one YAML document, written the way people write it by hand. */
export function keylessApiYaml(apiId: string, listenPath: string, targetUrl: string, limit?: { rate: number; per: number }): string {
  const globalLimit = limit ? `  global_rate_limit: { rate: ${limit.rate}, per: ${limit.per} }\n` : '';
  return `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: ${apiId} }   # written by hand
spec:
  api_id: ${apiId}
  use_keyless: true
${globalLimit}  proxy: { listen_path: ${listenPath}, target_url: '${targetUrl}' }
`;
}
