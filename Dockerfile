# presa: one image with both binaries, presa-api (default) and presa-worker.
#
#   docker build -t presa:dev .                      # ENTRYPOINT presa-api
#   docker build -t presa-worker:dev --target worker .  # ENTRYPOINT presa-worker
#   docker run presa:dev ...  /  docker run --entrypoint /usr/local/bin/presa-worker presa:dev
#
# Dependency caching without cargo-chef: the `skeleton` stage reduces the
# workspace to its manifests, Cargo.lock and stub target files. Its output
# only changes when a manifest does, so the `cargo build` of every dependency
# in `builder` stays a cached layer while presa's own sources change.

ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS skeleton
WORKDIR /src
COPY . .
RUN set -eu; \
    mkdir -p /skeleton; \
    cp Cargo.toml Cargo.lock /skeleton/; \
    find crates services -name Cargo.toml | while read -r f; do \
        mkdir -p "/skeleton/$(dirname "$f")"; cp "$f" "/skeleton/$f"; \
    done; \
    find crates services -type f \( -path '*/src/lib.rs' -o -path '*/src/main.rs' -o -path '*/src/bin/*.rs' \
        -o -path '*/tests/*.rs' -o -path '*/benches/*.rs' -o -path '*/examples/*.rs' -o -name build.rs \) \
    | while read -r f; do \
        mkdir -p "/skeleton/$(dirname "$f")"; \
        case "$f" in */src/lib.rs) : > "/skeleton/$f" ;; *) echo 'fn main() {}' > "/skeleton/$f" ;; esac; \
    done

FROM ${RUST_IMAGE} AS builder
WORKDIR /src
ENV CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0
# make: jemalloc (the binaries' allocator, tikv-jemalloc-sys) is built from C sources.
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
# 1. Every dependency, against stub sources (cached until a manifest changes).
COPY --from=skeleton /skeleton/ ./
RUN cargo build --profile dist --locked -p presa-api -p presa-worker
# 2. presa itself. COPY keeps the files' own mtimes, which can be older than
#    the stub build: touch them so cargo rebuilds the workspace crates.
COPY . .
RUN find crates services -type f -exec touch {} + \
 && cargo build --profile dist --locked -p presa-api -p presa-worker \
 && mkdir -p /out \
 && cp target/dist/presa-api target/dist/presa-worker /out/

# Runtime: glibc + libgcc only, no shell, uid/gid 65532 ("nonroot").
FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=builder /out/presa-api /out/presa-worker /usr/local/bin/
# The binaries default to loopback; in a container they must listen on all interfaces.
ENV PRESA_LISTEN=0.0.0.0:8080 \
    PRESA_WORKER_LISTEN=0.0.0.0:9090 \
    PRESA_LOG_FORMAT=json
USER 65532:65532
# 8080: presa-api (/mcp, /healthz, /readyz, /metrics); 9090: presa-worker (/healthz, /readyz, /metrics).
EXPOSE 8080 9090

FROM runtime AS worker
ENTRYPOINT ["/usr/local/bin/presa-worker"]

# Last stage = the default target.
FROM runtime AS api
ENTRYPOINT ["/usr/local/bin/presa-api"]
