#!/usr/bin/env bash
# presa's containers, end to end: deploy/compose.yaml (+ compose.jwt.yaml) with
# podman-compose, from the image deploy/image.sh builds: Redis, 2 API pods
# (`--auth jwt`), 2 workers and nginx. Then, through nginx:
#   1. the official MCP conformance runner, requirements 2026-07-28 and 2025-11-25
#      (nginx adds a throw-away issuer's token to every request, as local-cluster.sh does);
#   2. a task survives `podman kill` of the worker running it (found through Redis:
#      the consumer holding the task's work entry), completing on the other worker;
#   3. the image's own facts: size, user, labels, and the cold start of its default
#      command (presa-api, embedded) to /readyz.
# Prints one line per check; exits non-zero on any failure, with the containers' logs.
#
# Usage: tests/image/compose-check.sh [--skip-conformance]
# Environment: PRESA_IMAGE (skip the image build), IMAGE_PROFILE (default release: quicker
# to build than dist, the code the same; CI passes dev, quicker still), PRESA_BIN (the presa CLI; default built here),
# COMPOSE_CHECK_KEEP=1 (leave the stack running, for a look at it).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CONFORMANCE=yes
[ "${1:-}" = --skip-conformance ] && CONFORMANCE=no

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
log() { echo "[compose-check] $*"; }

WORK=$(mktemp -d -t presa-compose-check.XXXXXX)
export COMPOSE_PROJECT=presa-check-$$
PORT=$(free_port)
compose() { "$REPO/deploy/compose-local.sh" -f "$REPO/deploy/compose.jwt.yaml" "$@"; }
cleanup() {
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "--- container logs (tails) ---" >&2
    for c in $(podman ps -a --filter "label=io.podman.compose.project=$COMPOSE_PROJECT" --format '{{.Names}}'); do
      echo "== $c" >&2
      podman logs --tail 30 "$c" >&2 2>&1 || true
    done
  fi
  if [ -n "${COMPOSE_CHECK_KEEP:-}" ]; then
    echo "[compose-check] kept: project $COMPOSE_PROJECT, http://127.0.0.1:$PORT/mcp, files in $WORK" >&2
    return
  fi
  compose down -v >/dev/null 2>&1 || true
  podman rm -f "presa-cold-$$" >/dev/null 2>&1 || true
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- images -------------------------------------------------------------------------------
start=$SECONDS
if [ -z "${PRESA_IMAGE:-}" ]; then
  PRESA_IMAGE=$("$REPO/deploy/image.sh" --profile "${IMAGE_PROFILE:-release}" | tail -n1)
fi
export PRESA_IMAGE
export REDIS_IMAGE=${REDIS_IMAGE:-$("$REPO/deploy/local-images.sh" redis | tail -n1)}
export NGINX_IMAGE=${NGINX_IMAGE:-$("$REPO/deploy/local-images.sh" nginx | tail -n1)}
log "images ready in $((SECONDS - start)) s: $PRESA_IMAGE, $REDIS_IMAGE, $NGINX_IMAGE"

# --- the image's facts --------------------------------------------------------------------
size=$(podman image inspect --format '{{.Size}}' "$PRESA_IMAGE")
user=$(podman image inspect --format '{{.Config.User}}' "$PRESA_IMAGE")
[ "$user" = 65532:65532 ] || { echo "the image runs as '$user', not 65532:65532 (nonroot)" >&2; exit 1; }
for label in title version revision created source; do
  value=$(podman image inspect --format "{{index .Config.Labels \"org.opencontainers.image.$label\"}}" "$PRESA_IMAGE")
  [ -n "$value" ] || { echo "the image lacks the label org.opencontainers.image.$label" >&2; exit 1; }
done
for bin in presa-api presa-worker presa-gateway presa; do
  podman run --rm "$PRESA_IMAGE" "/usr/local/bin/$bin" --version >/dev/null ||
    { echo "the image's $bin does not run" >&2; exit 1; }
done
# Cold start: the default command (presa-api, embedded: no Redis) to a 200 from /readyz.
cold_port=$(free_port)
t0=$(date +%s%N)
podman run -d --rm --name "presa-cold-$$" -p "127.0.0.1:$cold_port:8080" "$PRESA_IMAGE" >/dev/null
for _ in $(seq 500); do
  curl -fsS "http://127.0.0.1:$cold_port/readyz" >/dev/null 2>&1 && break
  sleep 0.01
done
t1=$(date +%s%N)
curl -fsS "http://127.0.0.1:$cold_port/readyz" >/dev/null ||
  { podman logs "presa-cold-$$" >&2; echo "the default command did not become ready in 5 s" >&2; exit 1; }
podman rm -f "presa-cold-$$" >/dev/null
log "image $PRESA_IMAGE: $(awk -v s="$size" 'BEGIN{printf "%.1f MB", s/1e6}'), user $user, OCI labels present," \
  "4 binaries run; cold start of the default command (podman run → /readyz 200): $(((t1 - t0) / 1000000)) ms"

# --- a throw-away issuer ------------------------------------------------------------------
(cd "$REPO" && cargo build -q -p presa-testkit --example dev_issuer && cargo build -q -p presa-cli)
BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug
PRESA_BIN=${PRESA_BIN:-$BIN/presa}
export PRESA_JWT_ISSUER=https://issuer.compose-check.invalid
export PRESA_RESOURCE_URL=http://127.0.0.1:$PORT/mcp
export PRESA_JWKS_FILE=$WORK/jwks.json
TOKEN=$("$BIN/examples/dev_issuer" "$PRESA_JWT_ISSUER" "$PRESA_RESOURCE_URL" "$PRESA_JWKS_FILE")
chmod 0644 "$PRESA_JWKS_FILE" # read by uid 65532 in the API containers
chmod 0755 "$WORK"
# nginx adds the token, so the conformance runner (which sends none) is an authenticated client.
sed "s|proxy_set_header Host \$http_host;|&\n            proxy_set_header Authorization \"Bearer $TOKEN\";|" \
  "$REPO/deploy/nginx/compose.conf" >"$WORK/nginx.conf"
grep -q 'Authorization "Bearer' "$WORK/nginx.conf" || { echo "could not add the token to nginx.conf" >&2; exit 1; }
chmod 0644 "$WORK/nginx.conf"
export NGINX_CONF=$WORK/nginx.conf PRESA_PORT=$PORT PRESA_LEASE_MS=3000
export PRESA_STATE_SECRET=compose-check-state-secret-$$-$(date +%s%N)

# --- the stack ----------------------------------------------------------------------------
start=$SECONDS
compose up -d >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log" >&2; exit 1; }
URL=http://127.0.0.1:$PORT/mcp
ready=no
for _ in $(seq 300); do
  # Through nginx's round robin: both API pods must answer.
  if curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
    ready=yes; break
  fi
  sleep 0.2
done
[ $ready = yes ] || { echo "the compose stack did not become ready through nginx in 60 s" >&2; exit 1; }
# Each API pod must also open a listen stream (its pub/sub connection). In containers here the
# first pub/sub connections have been seen to time out (2 s each) for up to a minute after start
# while every other Redis call works (not seen outside containers; issue #23's note): wait for
# it, bounded, and say how long it took, so the conformance run does not start inside that window.
listen_ok() { # listen_ok HOST:PORT: a subscriptions/listen stream is acknowledged within 3 s
  local meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
  timeout 3 curl -sN "http://$1/mcp" -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
    -H 'Mcp-Method: subscriptions/listen' -H "Origin: http://127.0.0.1:$PORT" -H "Host: 127.0.0.1:$PORT" \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subscriptions/listen\",\"params\":{\"notifications\":{\"toolsListChanged\":true},$meta}}" \
    >"$WORK/listen.out" 2>&1
  grep -q acknowledged "$WORK/listen.out"
}
for api in api1 api2; do
  ip=$(podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "${COMPOSE_PROJECT}_${api}_1")
  t0=$SECONDS
  until listen_ok "$ip:8080"; do
    [ $((SECONDS - t0)) -lt "${LISTEN_WAIT:-120}" ] || { echo "$api never acknowledged a listen stream in 120 s; its last answer: $(head -c 600 "$WORK/listen.out")" >&2; exit 1; }
    sleep 1
  done
  log "$api acknowledged a listen stream after $((SECONDS - t0)) s"
done
containers=$(podman ps --filter "label=io.podman.compose.project=$COMPOSE_PROJECT" --format '{{.Names}}' | sort | tr '\n' ' ')
log "stack up in $((SECONDS - start)) s: $containers"
# --- conformance through nginx ------------------------------------------------------------
if [ $CONFORMANCE = yes ]; then
  "$REPO/tests/conformance/run.sh" --url "$URL" --requirements 2026-07-28
  "$REPO/tests/conformance/run.sh" --url "$URL" --requirements 2025-11-25
  log "requests per API pod (nginx's log): $(podman logs "${COMPOSE_PROJECT}_nginx_1" 2>&1 |
    grep -o 'upstream=[0-9.:]*' | sort | uniq -c | awk '{printf "%s %s; ", $2, $1}')"
fi

# --- a task survives podman kill of its worker --------------------------------------------
redis_cli() { podman exec "${COMPOSE_PROJECT}_redis_1" redis-cli "$@"; }
id=$(PRESA_URL=$URL PRESA_TOKEN=$TOKEN timeout 60 "$PRESA_BIN" call slow_compute seconds=8 label=survivor --detach </dev/null)
[[ "$id" =~ ^[^[:space:]]+$ ]] || { echo "presa call --detach printed no task id: $id" >&2; exit 1; }
holder=""
for _ in $(seq 100); do
  for stream in $(redis_cli --scan --pattern '*:work'); do # the partitions' work streams
    for group in $(redis_cli xinfo groups "$stream" | awk 'prev=="name"{print} {prev=$0}'); do
      # Pending entries (id, consumer, idle, deliveries): the one whose fields name the task.
      while read -r entry consumer _; do
        if redis_cli xrange "$stream" "$entry" "$entry" | grep -qF -- "$id"; then holder=$consumer; break 4; fi
      done < <(redis_cli xpending "$stream" "$group" - + 1000 | paste - - - -)
    done
  done
  sleep 0.1
done
[ -n "$holder" ] || { echo "no worker ever held task $id's work entry" >&2; exit 1; }
container=${COMPOSE_PROJECT}_${holder}_1
podman kill "$container" >/dev/null
log "task $id held by $holder: podman kill $container"
status=""
for _ in $(seq 120); do
  status=$(PRESA_URL=$URL PRESA_TOKEN=$TOKEN timeout 30 "$PRESA_BIN" --json get "$id" </dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("status",""))' || true)
  case "$status" in completed | failed | cancelled) break ;; esac
  sleep 0.5
done
[ "$status" = completed ] || { echo "task $id ended '$status' after its worker was killed, not completed" >&2; exit 1; }
result=$(PRESA_URL=$URL PRESA_TOKEN=$TOKEN timeout 30 "$PRESA_BIN" watch "$id" </dev/null)
grep -qF "Completed survivor" <<<"$result" || { echo "task $id's result lacks 'Completed survivor': $result" >&2; exit 1; }
other=worker1; [ "$holder" = worker1 ] && other=worker2
podman logs "${COMPOSE_PROJECT}_${other}_1" 2>&1 | grep -F '"task finished"' | grep -qF "\"task_id\":\"$id\"" ||
  { echo "task $id completed, but $other's log does not say it finished it" >&2; exit 1; }
log "task $id completed on $other after $holder was killed: $(tail -n1 <<<"$result")"
log "all checks passed"
