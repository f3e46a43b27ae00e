/** The journey's demo app: what a user deploys to put gw in front of an app. */

/**
 * A Deployment of two replicas annotated for injection, running as the `gw-sidecar`
 * ServiceAccount under the restricted Pod Security Standard. The examples' upstream is
 * http://127.0.0.1:9000: a small JSON echo in the same pod, on the gateway image's Node.
 */
export function demoApp(namespace: string, image: string, apis: string, name = 'demo') {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace },
    spec: {
      replicas: 2,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name }, annotations: { 'gw.dev/inject': 'true', 'gw.dev/apis': apis } },
        spec: {
          serviceAccountName: 'gw-sidecar',
          terminationGracePeriodSeconds: 5,
          securityContext: { runAsNonRoot: true, runAsUser: 65532, seccompProfile: { type: 'RuntimeDefault' } },
          containers: [{
            name: 'app',
            image,
            command: ['node', '-e', "require('node:http').createServer((q, s) => { s.setHeader('content-type', 'application/json'); s.end(JSON.stringify({ path: q.url })); }).listen(9000, '127.0.0.1')"],
            resources: { requests: { cpu: '10m', memory: '32Mi' }, limits: { memory: '96Mi' } },
            securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
          }],
        },
      },
    },
  };
}

/** The app's Service, on the gateway's proxy port. */
export function demoService(namespace: string, name = 'demo') {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace },
    spec: { selector: { app: name }, ports: [{ name: 'http', port: 80, targetPort: 'gw-proxy' }] },
  };
}
