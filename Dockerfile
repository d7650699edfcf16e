# presa: one image with presa-api (the default command), presa-worker,
# presa-gateway and the presa CLI, non-root, no shell.
#
#   docker build -t presa:dev .              # or: podman build -t presa:dev .
#   docker run -p 8080:8080 presa:dev        # presa-api, embedded (no Redis), on 0.0.0.0:8080
#   docker run presa:dev presa-worker        # a worker (set PRESA_REDIS_URL)
#   docker run presa:dev presa --help        # the CLI
#
# On a machine that reaches no registry, deploy/image.sh assembles both bases
# from Debian's packages and builds this same file with podman.
#
# Build arguments:
#   RUST_IMAGE      the build base: cargo/rustc >= 1.89, a C compiler and make (jemalloc
#                   is built from C), Debian 12 so the binaries' glibc matches the runtime's
#   RUNTIME_IMAGE   the base that ships: glibc + libgcc (distroless/cc or equivalent)
#   GATEWAY_BASE    the `gateway` target's base: an upstream server's runtime (see below)
#   PROFILE         dist (fat LTO, the default), release (quicker to build) or dev (a debug
#                   build, quickest, slow binaries: what CI checks the image's plumbing with)
#
# Dependency caching without cargo-chef: the `skeleton` stage reduces the
# workspace to its manifests, Cargo.lock and stub target roots
# (deploy/skeleton.sh; generic over the workspace's members). Its output
# changes only when a manifest or a binary does, so the `cargo build` of every
# dependency in `builder` stays a cached layer while presa's sources change.

ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG GATEWAY_BASE=${RUNTIME_IMAGE}

FROM ${RUST_IMAGE} AS skeleton
WORKDIR /src
COPY . .
RUN sh deploy/skeleton.sh . /skeleton

FROM ${RUST_IMAGE} AS builder
ARG PROFILE=dist
WORKDIR /src
# Packed relative relocations (DT_RELR; glibc >= 2.36, as the runtime bases have):
# start-up does not read through a large .rela.dyn, so a pod's idle RSS is smaller.
ENV CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0 RUSTFLAGS="-C link-arg=-Wl,-z,pack-relative-relocs"
# make: jemalloc (the binaries' allocator, tikv-jemalloc-sys) is built from C sources.
RUN command -v make >/dev/null || { apt-get update && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*; }
# 1. Every dependency, against stub sources (cached until a manifest changes).
#    One cargo invocation for the four binaries: their dependencies' features
#    unify once (two invocations compile most dependencies twice).
COPY --from=skeleton /skeleton/ ./
RUN cargo build --profile "$PROFILE" --locked -p presa-api -p presa-worker -p presa-gateway -p presa-cli
# 2. presa itself. COPY keeps the files' own mtimes, which can be older than
#    the stub build: touch them so cargo rebuilds the workspace's crates.
COPY . .
#    (cargo puts the dev profile's output in target/debug.)
RUN find . -path ./target -prune -o -type f -name '*.rs' -exec touch {} + \
 && cargo build --profile "$PROFILE" --locked -p presa-api -p presa-worker -p presa-gateway -p presa-cli \
 && dir="target/$PROFILE" && if [ "$PROFILE" = dev ]; then dir=target/debug; fi \
 && mkdir -p /out \
 && cp "$dir/presa-api" "$dir/presa-worker" "$dir/presa-gateway" "$dir/presa" /out/

# A gateway beside an upstream's runtime: presa-gateway alone on GATEWAY_BASE, e.g.
#   docker build --target gateway --build-arg GATEWAY_BASE=node:22-bookworm-slim -t presa-gateway-node .
# then a Dockerfile of your own adds the upstream server (npm install / pip install) and runs
#   presa-gateway --upstream-command "node /app/server.js stdio"
# GATEWAY_BASE must be glibc-based Debian 12 (bookworm) or newer (not Alpine/musl).
FROM ${GATEWAY_BASE} AS gateway
COPY --from=builder /out/presa-gateway /usr/local/bin/presa-gateway
ENV PRESA_LISTEN=0.0.0.0:8080 \
    PRESA_WORKER_LISTEN=0.0.0.0:9090 \
    PRESA_LOG_FORMAT=json
USER 65532:65532
EXPOSE 8080 9090
CMD ["/usr/local/bin/presa-gateway"]

# What ships: glibc + libgcc only, no shell, uid/gid 65532 ("nonroot").
# No HEALTHCHECK: orchestrators probe /healthz (alive) and /readyz (ready) on
# 8080 (API) or 9090 (worker) over HTTP, which a shell-less image cannot run itself.
FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=builder /out/ /usr/local/bin/
# The binaries default to loopback; in a container they must listen on all interfaces.
ENV PRESA_LISTEN=0.0.0.0:8080 \
    PRESA_WORKER_LISTEN=0.0.0.0:9090 \
    PRESA_LOG_FORMAT=json
USER 65532:65532
# 8080: presa-api (/mcp, /healthz, /readyz, /metrics); 9090: presa-worker (/healthz, /readyz, /metrics).
EXPOSE 8080 9090
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="presa" \
      org.opencontainers.image.description="MCP server that runs long tool calls as durable tasks (presa-api, presa-worker, presa-gateway, presa CLI)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://example.invalid/presa"
# The default command serves presa-api embedded (in memory; PRESA_REDIS_URL makes it an
# API pod) to anonymous callers, so `docker run -p 127.0.0.1:8080:8080 presa` works as a
# trial: presa refuses `--auth none` on 0.0.0.0 unless told, and a container listens
# there. PRESA_AUTH=jwt|tokens turns that off (the flag only applies to `--auth none`);
# any other command (`presa-api --auth jwt …`, `presa-worker`, `presa-gateway`, `presa`)
# gets presa's secure defaults. The admin API stays off here: without authentication every
# caller would be an admin (PRESA_ADMIN=on with PRESA_AUTH=jwt|tokens turns it on).
CMD ["/usr/local/bin/presa-api", "--allow-anonymous", "--admin", "off"]
