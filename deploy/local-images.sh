#!/usr/bin/env bash
# Usage: deploy/local-images.sh redis|nginx ...
#
# The third-party images deploy/compose.yaml runs beside presa's, built on a
# machine that reaches no container registry: `FROM scratch` images holding
# this machine's own Debian binaries and the shared libraries `ldd` lists for
# them (as docs/testing.md, "Containers without Docker", describes for Redis).
# Prints each image's name.
#
#   redis  localhost/redis-local:7    redis-server and redis-cli (apt-get install redis-server),
#                                     also tagged docker.io/library/redis:7.2, the name
#                                     testcontainers asks for, so nothing is pulled
#   nginx  localhost/nginx-local:1    nginx (apt-get install nginx-light); runs as root like
#                                     the official image's master, config at /etc/nginx/nginx.conf
#
# With a registry, use the public images instead (compose's defaults): redis:7.2, nginx:1.28-alpine.
set -euo pipefail

WORK=$(mktemp -d /tmp/presa-local-images.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# scratch_image NAME CMD_JSON BINARY... : a FROM scratch image of BINARY and its libraries.
scratch_image() {
  local name=$1 cmd=$2 ctx=$WORK/$1 bin lib
  shift 2
  rm -rf "$ctx"
  mkdir -p "$ctx/rootfs/etc" "$ctx/rootfs/tmp" "$ctx/rootfs/data" "$ctx/rootfs/usr/lib" "$ctx/rootfs/usr/lib64"
  # Debian 12 is merged-/usr: keep /lib and /lib64 as links, so ldd's paths land in /usr.
  ln -s usr/lib "$ctx/rootfs/lib"
  ln -s usr/lib64 "$ctx/rootfs/lib64"
  for bin in "$@"; do
    mkdir -p "$ctx/rootfs$(dirname "$bin")"
    cp -L "$bin" "$ctx/rootfs$bin"
    for lib in $(ldd "$bin" | grep -oE '/[^ ]+'); do
      mkdir -p "$ctx/rootfs$(dirname "$lib")"
      cp -L "$lib" "$ctx/rootfs$lib"
    done
  done
  chmod 1777 "$ctx/rootfs/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnogroup:x:65534:\n' >"$ctx/rootfs/etc/group"
  cat >"$ctx/Containerfile" <<IMG
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD $cmd
IMG
  podman build -q -t "$name" "$ctx" >/dev/null
}

need() { command -v "$1" >/dev/null || { echo "$1 not found: apt-get install $2" >&2; exit 1; }; }

for what in "$@"; do
  case "$what" in
    redis)
      need redis-server redis-server
      need redis-cli redis-tools
      scratch_image localhost/redis-local:7 \
        '["/usr/bin/redis-server", "--protected-mode", "no", "--save", "", "--appendonly", "no"]' \
        "$(command -v redis-server)" "$(command -v redis-cli)"
      podman tag localhost/redis-local:7 docker.io/library/redis:7.2
      echo localhost/redis-local:7 ;;
    nginx)
      nginx=$(command -v nginx || echo /usr/sbin/nginx)
      [ -x "$nginx" ] || { echo "nginx not found: apt-get install nginx-light" >&2; exit 1; }
      # nginx opens its compiled-in log and temp paths before reading any config.
      scratch_image localhost/nginx-local:1 \
        '["/usr/sbin/nginx", "-g", "daemon off;", "-e", "/dev/stderr"]' "$nginx"
      mkdir -p "$WORK/nginx-dirs/rootfs/var/log/nginx" "$WORK/nginx-dirs/rootfs/var/lib/nginx" \
        "$WORK/nginx-dirs/rootfs/etc/nginx" "$WORK/nginx-dirs/rootfs/run"
      printf 'FROM localhost/nginx-local:1\nCOPY rootfs/ /\n' >"$WORK/nginx-dirs/Containerfile"
      podman build -q -t localhost/nginx-local:1 "$WORK/nginx-dirs" >/dev/null
      echo localhost/nginx-local:1 ;;
    *) echo "unknown image: $what (redis or nginx)" >&2; exit 2 ;;
  esac
done
