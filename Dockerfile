# syntax=docker/dockerfile:1
# Images of the gw operator and the gw sidecar gateway, one target each:
#   docker build --target operator -t gw-operator:0.1.0 .
#   docker build --target sidecar  -t gw-sidecar:0.1.0 .
# Node 24 runs the TypeScript sources directly (type stripping), so there is no compile
# stage: the stages only keep npm's dev dependencies and caches out of what ships.
ARG NODE_IMAGE=node:24-slim

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only, exactly as locked; none of them needs an install script.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
 && npm cache clean --force

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
# Sources stay owned by root and read-only to the process user.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY crds/ ./crds/
COPY common/ ./common/

FROM runtime AS operator
# The webhook issues its CA and serving certificate with the openssl CLI (node:crypto
# reads X.509 but cannot write it); the slim base ships only the library.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssl \
 && rm -rf /var/lib/apt/lists/*
COPY operator/ ./operator/
# A numeric user, so Kubernetes can verify runAsNonRoot; the UID the chart runs it as.
USER 65532:65532
# 8082 health and metrics, 9443 the sidecar-injection webhook (HTTPS).
EXPOSE 8082 9443
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8082/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "operator/main.ts"]

FROM runtime AS sidecar
COPY sidecar/ ./sidecar/
# The UID the chart and the injected sidecar run as, numeric for runAsNonRoot.
USER 65532:65532
# 8080 proxy, 8081 admin operations, 8082 health and metrics.
EXPOSE 8080 8081 8082
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8082/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "sidecar/main.ts"]
