#!/usr/bin/env bash
# A local presa cluster in one command, all on loopback:
#   Redis, 2 presa-api pods, 2 presa-worker pods, nginx round-robin in front.
#
# Usage:
#   deploy/local-cluster.sh                 start it and wait (Ctrl-C stops everything)
#   deploy/local-cluster.sh --conformance [REV]  start it, run the official conformance suite
#                                            (requirements REV: 2026-07-28, the default, or
#                                            2025-11-25 for legacy `initialize` clients) through
#                                            nginx, stop, exit with the suite's verdict
#   deploy/local-cluster.sh -- CMD ARGS...  start it, run CMD with PRESA_URL set, stop
#   deploy/local-cluster.sh --auth-jwt ...  (before any of the above) the API pods run
#                                            `--auth jwt` against a throw-away issuer (fresh keys,
#                                            a JWKS file); nginx adds `Authorization: Bearer <its
#                                            token>` to every request (PRESA_TOKEN holds it too)
#   deploy/local-cluster.sh --redis-cluster ...  (before the mode; with or after --auth-jwt) the
#                                            pods run in Redis Cluster mode (PRESA_REDIS_CLUSTER=true)
#                                            on a private local 3-master Redis Cluster (three
#                                            redis-server --cluster-enabled yes, joined with
#                                            redis-cli --cluster create)
#   deploy/local-cluster.sh --gateway 'UPSTREAM COMMAND LINE' ...  (before the mode; combinable
#                                            with the two above) presa in front of an existing MCP
#                                            server: builds presa-gateway and runs it as the API pods
#                                            (`presa-gateway`) and the workers (`presa-gateway worker`)
#                                            with PRESA_UPSTREAM_COMMAND set to that stdio command
#                                            line (every pod starts its own children of it), and
#                                            waits for each pod's /readyz (served once the upstream
#                                            is listed) before starting nginx, e.g.
#                                            --gateway "npx -y @modelcontextprotocol/server-everything stdio"
#   deploy/local-cluster.sh --gateway-config FILE ...  (instead of --gateway) the same with
#                                            PRESA_GATEWAY_CONFIG=FILE: several upstreams, virtual
#                                            servers (tests/gateway/virtual-check.sh)
#
# Environment:
#   PRESA_REDIS_URL   use this Redis instead of starting a private redis-server (with
#                     --redis-cluster: the cluster's seed URLs, comma-separated)
#   PRESA_LB_PORT     nginx port (default: a free port)
#   PRESA_APIS        API pods (default 2); PRESA_WORKERS worker pods (default 2)
#   PRESA_SERVER      PACKAGE:BINARY of your own server built on presa_runtime::App
#                     (e.g. presa-example-indexer:indexer): its API pods run `BINARY`,
#                     its workers `BINARY worker` (default: presa-api and presa-worker;
#                     --gateway sets presa-gateway:presa-gateway)
#   PRESA_DEV_TOKENS  with --auth-jwt: "NAME=SCOPES;..." more tokens of the throw-away issuer,
#                     written to $PRESA_TOKENS_DIR/token-NAME; a request that carries its own
#                     Authorization passes nginx unchanged
#   CARGO_TARGET_DIR  honoured when building and locating the binaries
# Needs redis-server (unless PRESA_REDIS_URL; redis-cli too for --redis-cluster) and nginx
# (`apt-get install nginx-light`).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=wait
CMD=()
AUTH=none
REDIS_CLUSTER=no
GATEWAY=""
GATEWAY_CONFIG=""
while :; do
  case "${1:-}" in
    --auth-jwt) AUTH=jwt; shift ;;
    --redis-cluster) REDIS_CLUSTER=yes; shift ;;
    --gateway)
      [ $# -ge 2 ] && [ -n "$2" ] || { echo "--gateway needs the upstream's command line (see --help)" >&2; exit 2; }
      GATEWAY=$2; shift 2 ;;
    --gateway=*)
      GATEWAY=${1#--gateway=}; shift
      [ -n "$GATEWAY" ] || { echo "--gateway needs the upstream's command line (see --help)" >&2; exit 2; } ;;
    --gateway-config)
      [ $# -ge 2 ] && [ -f "$2" ] || { echo "--gateway-config needs a gateway TOML file (see --help)" >&2; exit 2; }
      GATEWAY_CONFIG=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    *) break ;;
  esac
done
case "${1:-}" in
  --conformance) MODE=conformance; REQUIREMENTS=${2:-2026-07-28} ;;
  --) shift; MODE=cmd; CMD=("$@") ;;
  -h|--help) sed -n '2,48p' "$0"; exit 0 ;;
  "") ;;
  *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
esac

APIS=${PRESA_APIS:-2}
WORKERS=${PRESA_WORKERS:-2}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "nginx not found: apt-get install nginx-light" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A Redis Cluster node's port: its bus listens on the port + 10,000, so the port must be at most
# 55535 ("Redis port number too high"), and both must be free. Ephemeral ports (free_port's) are
# often above that.
free_cluster_port() {
  python3 - <<'PY'
import random, socket
for _ in range(1000):
    port = random.randint(20000, 55535)
    try:
        a = socket.socket(); a.bind(("127.0.0.1", port))
        b = socket.socket(); b.bind(("127.0.0.1", port + 10000))
    except OSError:
        continue
    print(port)
    break
else:
    raise SystemExit("no free port pair (p, p + 10000) below 55536 for a Redis Cluster node")
PY
}

WORK=$(mktemp -d -t presa-cluster.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "--- logs (tails) from $WORK ---" >&2
    for f in "$WORK"/*.log; do echo "== $f" >&2; tail -n 20 "$f" >&2; done
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug
if [ -n "$GATEWAY_CONFIG" ]; then
  [ -z "$GATEWAY" ] || { echo "give --gateway or --gateway-config, not both" >&2; exit 2; }
  export PRESA_GATEWAY_CONFIG=$GATEWAY_CONFIG
  GATEWAY="the upstreams of $GATEWAY_CONFIG"
  PRESA_SERVER=presa-gateway:presa-gateway
elif [ -n "$GATEWAY" ]; then
  # presa-gateway is a server built on presa_runtime::App: the PRESA_SERVER path, with the
  # upstream handed to every pod (API and worker) in its environment.
  if [ -n "${PRESA_SERVER:-}" ] && [ "$PRESA_SERVER" != presa-gateway:presa-gateway ]; then
    echo "--gateway runs presa-gateway: unset PRESA_SERVER ($PRESA_SERVER)" >&2; exit 2
  fi
  PRESA_SERVER=presa-gateway:presa-gateway
  export PRESA_UPSTREAM_COMMAND=$GATEWAY
fi
if [ -n "${PRESA_SERVER:-}" ]; then
  echo "building ${PRESA_SERVER%%:*}..."
  (cd "$REPO" && cargo build -q -p "${PRESA_SERVER%%:*}")
  API_CMD=("$BIN/${PRESA_SERVER##*:}")
  WORKER_CMD=("$BIN/${PRESA_SERVER##*:}" worker)
else
  echo "building presa-api and presa-worker..."
  (cd "$REPO" && cargo build -q -p presa-api -p presa-worker)
  API_CMD=("$BIN/presa-api")
  WORKER_CMD=("$BIN/presa-worker")
fi

if [ -z "${PRESA_REDIS_URL:-}" ] && [ $REDIS_CLUSTER = yes ]; then
  SEEDS=()
  for n in 1 2 3; do
    RPORT=$(free_cluster_port)
    mkdir -p "$WORK/redis$n"
    redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK/redis$n" \
      --cluster-enabled yes --cluster-config-file nodes.conf >"$WORK/redis$n.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$RPORT" ping >/dev/null 2>&1 || {
      echo "Redis Cluster node $n (port $RPORT) did not start; it said:" >&2
      grep -E '#|FATAL|Error|error' "$WORK/redis$n.log" | tail -n 5 >&2
      exit 1
    }
    SEEDS+=("127.0.0.1:$RPORT")
  done
  redis-cli --cluster create "${SEEDS[@]}" --cluster-replicas 0 --cluster-yes >"$WORK/redis-cluster-create.log" 2>&1
  for seed in "${SEEDS[@]}"; do
    for _ in $(seq 100); do
      redis-cli -p "${seed##*:}" cluster info 2>/dev/null | grep -q cluster_state:ok && break
      sleep 0.2
    done
    redis-cli -p "${seed##*:}" cluster info | grep -q cluster_state:ok || { echo "Redis Cluster not ok" >&2; exit 1; }
  done
  PRESA_REDIS_URL=$(printf 'redis://%s,' "${SEEDS[@]}")
  export PRESA_REDIS_URL=${PRESA_REDIS_URL%,}
elif [ -z "${PRESA_REDIS_URL:-}" ]; then
  RPORT=$(free_port)
  redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
  PIDS+=($!)
  export PRESA_REDIS_URL="redis://127.0.0.1:$RPORT"
  for _ in $(seq 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
if [ $REDIS_CLUSTER = yes ]; then export PRESA_REDIS_CLUSTER=true; fi
export PRESA_STATE_SECRET=${PRESA_STATE_SECRET:-local-cluster-state-secret-$(date +%s%N)}
export PRESA_REDIS_PREFIX=${PRESA_REDIS_PREFIX:-presa-$(date +%s%N)}

LB=${PRESA_LB_PORT:-$(free_port)}
API_ARGS=()
AUTH_HEADER=""
if [ "$AUTH" = jwt ]; then
  # The resource (and token audience) is the URL clients use: nginx's.
  RESOURCE="http://127.0.0.1:$LB/mcp"
  ISSUER="https://issuer.local-cluster.invalid"
  echo "--auth jwt: a throw-away issuer (keys and JWKS in $WORK)..."
  (cd "$REPO" && cargo build -q -p presa-testkit --example dev_issuer)
  # PRESA_DEV_TOKENS ("NAME=SCOPES;..."): more tokens of the same issuer, one file each in
  # $PRESA_TOKENS_DIR (token-NAME), for a CMD that needs principals with other scopes.
  export PRESA_TOKENS_DIR=$WORK
  export PRESA_TOKEN=$(DEV_ISSUER_MORE=${PRESA_DEV_TOKENS:-} \
    "${CARGO_TARGET_DIR:-$REPO/target}/debug/examples/dev_issuer" "$ISSUER" "$RESOURCE" "$WORK/jwks.json")
  API_ARGS=(--auth jwt --jwt-issuer "$ISSUER" --resource-url "$RESOURCE" --jwks-file "$WORK/jwks.json")
  # nginx adds PRESA_TOKEN to requests that carry no Authorization; a client's own token passes.
  AUTH_HEADER="set \$presa_auth \$http_authorization; if (\$presa_auth = \"\") { set \$presa_auth \"Bearer $PRESA_TOKEN\"; } proxy_set_header Authorization \$presa_auth;"
fi

UPSTREAMS=""
PODS=()  # name:port:pid of every pod, for --gateway's readiness wait
for i in $(seq "$APIS"); do
  p=$(free_port)
  "${API_CMD[@]}" --listen "127.0.0.1:$p" "${API_ARGS[@]}" >"$WORK/api$i.log" 2>&1 &
  PIDS+=($!)
  PODS+=("api$i:$p:$!")
  UPSTREAMS+="server 127.0.0.1:$p; "
done
for i in $(seq "$WORKERS"); do
  p=$(free_port)
  "${WORKER_CMD[@]}" --listen "127.0.0.1:$p" --worker-id "worker$i" >"$WORK/worker$i.log" 2>&1 &
  PIDS+=($!)
  PODS+=("worker$i:$p:$!")
done
if [ -n "$GATEWAY" ]; then
  # A gateway pod serves nothing until its upstream is started and listed (node: ~1 s each,
  # more on a busy machine); wait for every pod itself, so nginx never sees a refusing one.
  echo "waiting for the presa-gateway pods (upstream: $GATEWAY)..."
  for pod in "${PODS[@]}"; do
    IFS=: read -r name port pid <<<"$pod"
    for _ in $(seq 300); do
      curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
      kill -0 "$pid" 2>/dev/null || { echo "presa-gateway pod $name exited (see $name.log below)" >&2; exit 1; }
      sleep 0.2
    done
    curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 || { echo "presa-gateway pod $name not ready after 60 s" >&2; exit 1; }
  done
fi

# Every pod's metrics address (NAME=HOST:PORT, comma-separated), for a CMD that scrapes them.
TARGETS=()
for pod in "${PODS[@]}"; do
  IFS=: read -r name port _ <<<"$pod"
  TARGETS+=("$name=127.0.0.1:$port")
done
export PRESA_METRICS_TARGETS=$(IFS=,; echo "${TARGETS[*]}")

mkdir -p "$WORK/nginx"
sed -e "s|@PREFIX@|$WORK/nginx|g" -e "s|@LISTEN@|127.0.0.1:$LB|g" -e "s|@UPSTREAMS@|$UPSTREAMS|g" \
  -e "s|@AUTH_HEADER@|$AUTH_HEADER|g" \
  "$REPO/deploy/nginx/presa.conf.template" >"$WORK/nginx/nginx.conf"
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" -e "$WORK/nginx/error.log" >"$WORK/nginx.log" 2>&1 &
PIDS+=($!)

export PRESA_URL="http://127.0.0.1:$LB/mcp"
for _ in $(seq 100); do
  ok=1
  for n in $(seq "$APIS"); do curl -fsS "http://127.0.0.1:$LB/readyz" >/dev/null 2>&1 || ok=0; done
  [ $ok = 1 ] && break
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$LB/readyz" >/dev/null || { echo "the cluster did not become ready" >&2; exit 1; }
REDIS_MODE=single; [ $REDIS_CLUSTER = yes ] && REDIS_MODE="Redis Cluster mode"
echo "presa cluster up: $PRESA_URL  (redis $PRESA_REDIS_URL, $REDIS_MODE, $APIS api, $WORKERS workers, auth $AUTH${GATEWAY:+, presa-gateway in front of: $GATEWAY}; logs in $WORK)"

spread() {
  echo "requests per API pod (nginx access log):"
  grep -o 'upstream=[0-9.:]*' "$WORK/nginx/access.log" | sort | uniq -c || true
}

case $MODE in
  conformance) "$REPO/tests/conformance/run.sh" --url "$PRESA_URL" --requirements "$REQUIREMENTS"; spread ;;
  cmd) "${CMD[@]}" ;;
  wait) echo "Ctrl-C to stop."; wait ;;
esac
