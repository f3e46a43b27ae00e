# syntax=docker/dockerfile:1
# Images of the gw operator, the gw sidecar gateway and the chart's Redis, one target each:
#   docker build --target operator -t gw-operator:0.1.0 .
#   docker build --target sidecar  -t gw-sidecar:0.1.0 .
#   docker build --target redis    -t gw-redis:0.1.0 .
# Without Docker, `npm run images` (scripts/images/build.ts) writes the same images as OCI
# archives; a unit test holds their users, entrypoints and ports together.
# Each program ships as the bundle `npm run build` makes of it (scripts/build/bundle.ts): one
# ES module with the dependencies it uses, so the image holds no node_modules and the process
# loads neither the TypeScript stripper nor the parts of the libraries it never calls.
ARG NODE_IMAGE=node:24-slim
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# All dependencies exactly as locked (the bundler is a dev dependency); none of the production
# ones needs an install script.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY crds ./crds
COPY common ./common
COPY operator ./operator
COPY sidecar ./sidecar
COPY scripts/build ./scripts/build
RUN node scripts/build/bundle.ts --out /out

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
# Both programs' allocator, preloaded: jemalloc gives back within a second the memory a burst
# of work took, where glibc's malloc keeps it (docs/architecture.md#the-images).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libjemalloc2 \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dpkg -L libjemalloc2 | grep '/libjemalloc\.so\.2$')" /usr/local/lib/libjemalloc.so.2
ENV LD_PRELOAD=/usr/local/lib/libjemalloc.so.2
ENV MALLOC_CONF=background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0
WORKDIR /app

FROM runtime AS operator
# The webhook issues its CA and serving certificate with the openssl CLI (node:crypto
# reads X.509 but cannot write it); the slim base ships only the library.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssl \
 && rm -rf /var/lib/apt/lists/*
# The bundle stays owned by root and read-only to the process user.
COPY --from=build /out/operator/ ./
# A numeric user, so Kubernetes can verify runAsNonRoot; the UID the chart runs it as.
USER 65532:65532
# 8082 health and metrics, 9443 the sidecar-injection webhook (HTTPS).
EXPOSE 8082 9443
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8082/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# The operator waits on the API server most of the time: V8 sized for memory rather than speed
# holds 10,000 Keys in about 40 MiB less RSS at the same reconcile rate (docs/benchmarks.md#operator).
ENTRYPOINT ["node", "--optimize-for-size", "gw-operator.mjs"]

FROM runtime AS sidecar
# The bundle stays owned by root and read-only to the process user.
COPY --from=build /out/sidecar/ ./
# The UID the chart and the injected sidecar run as, numeric for runAsNonRoot.
USER 65532:65532
# 8080 proxy, 8081 admin operations, 8082 health and metrics.
EXPOSE 8080 8081 8082
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8082/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Without pretenuring: V8 may otherwise decide early to put every request's objects in the old
# generation, and a sidecar with a small old space (the chart's) then runs ten full collections
# a second for its whole life, at 1.5 to 2 times the CPU per request (docs/benchmarks.md#fresh-starts).
ENTRYPOINT ["node", "--no-allocation-site-pretenuring", "gw-sidecar.mjs"]

# The chart's Redis: Debian's redis-server, as UID 999 (redisPodSecurityContext).
FROM ${DEBIAN_IMAGE} AS redis
RUN groupadd --system --gid 999 redis \
 && useradd --system --uid 999 --gid 999 --home-dir /data --no-create-home redis \
 && apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown 999:999 /data && chmod 750 /data
WORKDIR /data
USER 999:999
EXPOSE 6379
CMD ["redis-server"]
