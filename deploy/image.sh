#!/usr/bin/env bash
# Build presa's container image with podman, from the repository's Dockerfile.
#
# Usage:
#   deploy/image.sh [--tag NAME] [--profile dist|release|dev] [--bases pull|local|auto]
#                   [--target runtime|gateway] [-- EXTRA PODMAN BUILD ARGS...]
#
# The last line printed is the image's name (default localhost/presa:dev), so
#   IMAGE=$(deploy/image.sh | tail -n1)
#
# Base images. The Dockerfile takes its two bases as build arguments
# (RUST_IMAGE for the build, RUNTIME_IMAGE for what ships). With a registry
# (--bases pull) they are the public rust:1.95-slim-bookworm and
# gcr.io/distroless/cc-debian12:nonroot, exactly as `docker build .` uses them.
# Without one (--bases local, or auto when a pull fails) this script assembles
# equivalents from Debian's packages, once per machine:
#   localhost/presa-base-build:bookworm  Debian 12 minbase (debootstrap) with gcc,
#                                        libc6-dev, make, ca-certificates and the
#                                        machine's Rust toolchain (rustc/cargo, no docs)
#   localhost/presa-base-run:bookworm    FROM scratch: the same Debian's glibc, libgcc,
#                                        CA bundle, /etc/passwd with nonroot (65532)
#                                        and a sticky /tmp: what distroless/cc holds
# Both come from the same Debian release, so the binaries find the glibc they
# were linked against. PRESA_IMAGE_WORK (default /var/tmp/presa-image) keeps the
# debootstrap root between runs; `--rebuild-bases` starts over.
#
# Profiles: `dist` (the default; fat LTO, what the figures in docs/performance.md
# were measured with), `release` (several minutes quicker to build) or `dev` (a debug
# build: quicker still, slow binaries; CI checks the image's plumbing with it).
#
# Needs: podman (apt-get install podman runc; on a sandbox that cannot raise rlimits
# or use crun see docs/testing.md, "Containers without Docker", and .ci/podman-redis.sh), and for local bases
# debootstrap and a reachable Debian mirror (PRESA_DEBIAN_MIRROR).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TAG=localhost/presa:dev
PROFILE=dist
BASES=auto
TARGET=runtime
REBUILD_BASES=no
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=${2:?--tag needs a name}; shift 2 ;;
    --profile) PROFILE=${2:?--profile needs dist, release or dev}; shift 2 ;;
    --bases) BASES=${2:?--bases needs pull, local or auto}; shift 2 ;;
    --target) TARGET=${2:?--target needs runtime or gateway}; shift 2 ;;
    --rebuild-bases) REBUILD_BASES=yes; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h | --help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$PROFILE" in dist | release | dev) ;; *) echo "--profile must be dist, release or dev, not $PROFILE" >&2; exit 2 ;; esac
case "$BASES" in pull | local | auto) ;; *) echo "--bases must be pull, local or auto, not $BASES" >&2; exit 2 ;; esac
command -v podman >/dev/null || { echo "podman not found (apt-get install podman runc)" >&2; exit 1; }

PUBLIC_RUST=rust:1.95-slim-bookworm
PUBLIC_RUNTIME=gcr.io/distroless/cc-debian12:nonroot
LOCAL_RUST=localhost/presa-base-build:bookworm
LOCAL_RUNTIME=localhost/presa-base-run:bookworm
WORK=${PRESA_IMAGE_WORK:-/var/tmp/presa-image}
MIRROR=${PRESA_DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { echo "[image] $*" >&2; }

have_public_bases() {
  local image
  for image in "$PUBLIC_RUST" "$PUBLIC_RUNTIME"; do
    podman image exists "$image" && continue
    timeout 60 podman pull -q "$image" >/dev/null 2>&1 || return 1
  done
}

# Debian 12 minbase with a C toolchain, shared by both local bases.
debian_root() {
  local root=$WORK/rootfs
  if [ $REBUILD_BASES = yes ]; then rm -rf "$root"; fi
  if [ ! -f "$root/.presa-complete" ]; then
    command -v debootstrap >/dev/null || { echo "debootstrap not found (apt-get install debootstrap)" >&2; exit 1; }
    rm -rf "$root"
    mkdir -p "$WORK"
    log "debootstrap bookworm into $root (about a minute)..."
    debootstrap --variant=minbase --include=gcc,libc6-dev,make,ca-certificates \
      bookworm "$root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
      { tail -n 20 "$WORK/debootstrap.log" >&2; echo "debootstrap failed (log: $WORK/debootstrap.log)" >&2; exit 1; }
    rm -rf "$root/var/cache/apt/archives"/*.deb "$root/var/lib/apt/lists"/*
    touch "$root/.presa-complete"
  fi
  echo "$root"
}

build_local_bases() {
  local root
  root=$(debian_root)
  if [ $REBUILD_BASES = no ] && podman image exists "$LOCAL_RUST"; then
    log "build base present: $LOCAL_RUST"
  else
    build_base "$root"
  fi
  if [ $REBUILD_BASES = no ] && podman image exists "$LOCAL_RUNTIME"; then
    log "runtime base present: $LOCAL_RUNTIME"
  else
    runtime_base "$root"
  fi
}

build_base() {
  local root=$1 ctx toolchain

  # The build base: the Debian root plus the Rust toolchain this machine has (no docs).
  toolchain=$(rustc --print sysroot)
  log "build base $LOCAL_RUST: Debian + $(rustc --version)"
  ctx=$WORK/build-base
  rm -rf "$ctx" && mkdir -p "$ctx/rust"
  cp -a "$toolchain/bin" "$toolchain/lib" "$ctx/rust/"
  [ -d "$toolchain/libexec" ] && cp -a "$toolchain/libexec" "$ctx/rust/"
  tar -C "$root" --exclude=./.presa-complete -cf "$ctx/rootfs.tar" .
  # The machine's own CAs (e.g. a TLS-inspecting proxy it trusts), so cargo reaches crates.io
  # from inside the build exactly as it does outside.
  mkdir -p "$ctx/local-ca"
  cp /usr/local/share/ca-certificates/*.crt "$ctx/local-ca/" 2>/dev/null || true
  cat >"$ctx/Containerfile" <<'IMG'
FROM scratch
ADD rootfs.tar /
COPY rust/ /usr/local/rust/
COPY local-ca/ /usr/local/share/ca-certificates/
ENV PATH=/usr/local/rust/bin:/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CARGO_HOME=/usr/local/cargo
RUN update-ca-certificates >/dev/null && cargo --version && cc --version | head -n1
IMG
  podman build -q -t "$LOCAL_RUST" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# The runtime base: glibc, libgcc and the CA bundle from the same Debian, as distroless/cc.
runtime_base() {
  local root=$1 ctx
  log "runtime base $LOCAL_RUNTIME: FROM scratch + Debian's libc6, libgcc-s1, CA bundle"
  ctx=$WORK/run-base
  rm -rf "$ctx" && mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp" "$ctx/rootfs/home/nonroot"
  # Debian 12 is merged-/usr: /lib and /lib64 are links into /usr (dpkg still lists /lib/…).
  mkdir -p "$ctx/rootfs/usr/lib" "$ctx/rootfs/usr/lib64" "$ctx/rootfs/usr/bin" "$ctx/rootfs/usr/sbin"
  for l in lib lib64 bin sbin; do [ -L "$root/$l" ] && cp -a "$root/$l" "$ctx/rootfs/$l"; done
  chroot "$root" dpkg-query -L libc6 libgcc-s1 | while read -r f; do
    case "$f" in /usr/share/* | /etc/*) continue ;; esac
    if [ -f "$root$f" ] || [ -L "$root$f" ]; then
      mkdir -p "$ctx/rootfs$(dirname "$f")"
      cp -a "$root$f" "$ctx/rootfs$f"
    fi
  done
  cp -L "$root/etc/ssl/certs/ca-certificates.crt" "$ctx/rootfs/etc/ssl/certs/"
  cp "$root/etc/nsswitch.conf" "$ctx/rootfs/etc/" 2>/dev/null || true
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
  chmod 1777 "$ctx/rootfs/tmp"
  cat >"$ctx/Containerfile" <<'IMG'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 65532:65532
WORKDIR /home/nonroot
IMG
  podman build -q -t "$LOCAL_RUNTIME" "$ctx" >/dev/null
  rm -rf "$ctx"
}

case "$BASES" in
  pull) RUST_IMAGE=$PUBLIC_RUST RUNTIME_IMAGE=$PUBLIC_RUNTIME ;;
  local) build_local_bases; RUST_IMAGE=$LOCAL_RUST RUNTIME_IMAGE=$LOCAL_RUNTIME ;;
  auto)
    if have_public_bases; then
      RUST_IMAGE=$PUBLIC_RUST RUNTIME_IMAGE=$PUBLIC_RUNTIME
    else
      log "public base images cannot be pulled here: assembling local ones"
      build_local_bases; RUST_IMAGE=$LOCAL_RUST RUNTIME_IMAGE=$LOCAL_RUNTIME
    fi ;;
esac

REVISION=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n1)
log "podman build $TAG (target $TARGET, profile $PROFILE, bases $RUST_IMAGE / $RUNTIME_IMAGE)"
start=$SECONDS
podman build \
  --layers \
  --target "$TARGET" \
  --build-arg RUST_IMAGE="$RUST_IMAGE" \
  --build-arg RUNTIME_IMAGE="$RUNTIME_IMAGE" \
  --build-arg PROFILE="$PROFILE" \
  --build-arg VERSION="$VERSION" \
  --build-arg REVISION="$REVISION" \
  --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  -t "$TAG" "${EXTRA[@]}" -f "$REPO/Dockerfile" "$REPO" >&2
log "built $TAG in $((SECONDS - start)) s: $(podman image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.1f MB", $1/1e6}')"
echo "$TAG"
