#!/usr/bin/env bash
# Usage: source .ci/podman-redis.sh DIR
#
# A Docker-API-compatible engine for testcontainers on a machine without Docker
# or a registry (see docs/testing.md, "Containers without Docker"): installs podman + runc (Debian),
# writes /etc/containers/containers.conf (runc, cgroupfs, ulimits the sandbox
# allows), builds a `FROM scratch` image holding Debian's redis-server and the
# libraries ldd lists for it (deploy/local-images.sh redis), tagged
# docker.io/library/redis:7.2 (what the tests ask testcontainers for, so
# nothing is pulled), starts
# `podman system service` on DIR/podman.sock and exports DOCKER_HOST and
# PODMAN_SERVICE_PID. Sourced (it exports); any failure exits non-zero, loudly.
# The caller stops the service: kill "$PODMAN_SERVICE_PID".
set -euo pipefail

PODMAN_DIR="${1:?usage: source .ci/podman-redis.sh DIR}"
mkdir -p "$PODMAN_DIR"

if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc
fi
podman --version

mkdir -p /etc/containers
cat >/etc/containers/containers.conf <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF

if ! podman image exists docker.io/library/redis:7.2; then
  # FROM scratch: Debian's redis-server and redis-cli with their libraries, tagged redis:7.2.
  "$(dirname "${BASH_SOURCE[0]}")/../deploy/local-images.sh" redis
fi

# The image must start and accept connections before any test relies on it.
cid="$(podman run -d --rm -p 127.0.0.1::6379 docker.io/library/redis:7.2)"
port="$(podman port "$cid" 6379 | head -n1 | sed 's/.*://')"
ok=""
for _ in $(seq 1 50); do
  if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then ok=1; break; fi
  sleep 0.2
done
podman rm -f "$cid" >/dev/null
[[ -n "$ok" ]] || { echo "podman: the redis:7.2 image did not answer PING" >&2; exit 1; }
echo "podman: redis:7.2 image answers on a published port"

sock="$PODMAN_DIR/podman.sock"
rm -f "$sock"
podman system service --time=0 "unix://$sock" >"$PODMAN_DIR/service.log" 2>&1 &
PODMAN_SERVICE_PID=$!
export PODMAN_SERVICE_PID
for _ in $(seq 1 50); do
  [[ "$(curl -s --unix-socket "$sock" http://d/_ping 2>/dev/null)" == "OK" ]] && break
  sleep 0.2
done
[[ "$(curl -s --unix-socket "$sock" http://d/_ping)" == "OK" ]] || {
  echo "podman: the API service on $sock did not answer" >&2
  cat "$PODMAN_DIR/service.log" >&2
  exit 1
}
export DOCKER_HOST="unix://$sock"
echo "podman: Docker API on $DOCKER_HOST (pid $PODMAN_SERVICE_PID)"
