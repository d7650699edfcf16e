#!/usr/bin/env bash
# Regenerate services/api/link-order.txt and services/worker/link-order.txt: the
# functions presa-api and presa-worker run from start-up through their first
# requests, which services/build.rs asks the linker to lay out first (why: that
# file's docs). Run it after a dependency update or a large change, on x86_64
# Linux, then rebuild (`cargo build --profile dist -p presa-api -p presa-worker -p presa-gateway -p presa-cli`,
# the selection the Dockerfile builds)
# and compare presa-bench's idle RSS row.
#
# Needs valgrind (callgrind records every function a process runs, by its
# mangled name), curl, and Redis at $REDIS_URL (default redis://127.0.0.1:6379;
# a private key prefix is used and deleted). Takes about a minute.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
PREFIX="presa-link-order-$$"
OUT="$(mktemp -d)"
BIN=target/dist
trap 'pkill -TERM -f "callgrind-out-file=$OUT" 2>/dev/null || true; redis-cli -u "$REDIS_URL" --scan --pattern "$PREFIX*" | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null; rm -rf "$OUT"' EXIT

# The Dockerfile's selection: the four binaries in one invocation (their dependencies'
# features unify, which names the symbols of generic code).
cargo build --profile dist -p presa-api -p presa-worker -p presa-gateway -p presa-cli

# run NAME PORT ARGS...: start BIN/NAME under callgrind on 127.0.0.1:PORT; wait for /healthz.
run() {
  local name=$1 port=$2; shift 2
  valgrind --tool=callgrind --demangle=no --callgrind-out-file="$OUT/$name.$port.cg" \
    "$BIN/$name" --listen "127.0.0.1:$port" "$@" >"$OUT/$name.$port.log" 2>&1 &
  for _ in $(seq 1 120); do
    curl -sf -m 1 "http://127.0.0.1:$port/healthz" >/dev/null && return 0
    sleep 0.5
  done
  echo "$name did not come up; its log:" >&2
  cat "$OUT/$name.$port.log" >&2
  return 1
}

# mcp PORT METHOD NAME PARAMS: one MCP 2026-07-28 request declaring the Tasks extension.
mcp() {
  local meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
  curl -sf -m 30 "http://127.0.0.1:$1/mcp" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
    -H "Mcp-Method: $2" ${3:+-H "Mcp-Name: $3"} \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":{${4:+$4,}$meta}}"
}

# traffic PORT: what a pod serves first: tools/list, a sync call, a task polled to completion.
traffic() {
  mcp "$1" tools/list "" "" >/dev/null
  mcp "$1" tools/call greet '"name":"greet","arguments":{"name":"presa"}' >/dev/null
  local id
  id=$(mcp "$1" tools/call slow_compute '"name":"slow_compute","arguments":{"seconds":0}' |
    sed -n 's/.*"taskId":"\([^"]*\)".*/\1/p')
  [[ -n "$id" ]] || { echo "slow_compute did not become a task" >&2; return 1; }
  for _ in $(seq 1 120); do
    mcp "$1" tasks/get "$id" "\"taskId\":\"$id\"" | grep -q '"status":"completed"' && return 0
    sleep 0.5
  done
  echo "task $id did not complete" >&2
  return 1
}

# stop: SIGTERM every process under callgrind (each drains and exits; callgrind writes its file).
stop() {
  pkill -TERM -f "callgrind-out-file=$OUT" || true
  while pgrep -f "callgrind-out-file=$OUT" >/dev/null; do sleep 0.2; done
}

# Embedded presa-api, then presa-api and presa-worker on Redis.
run presa-api 18601
traffic 18601
stop
run presa-api 18602 --redis-url "$REDIS_URL" --redis-prefix "$PREFIX"
run presa-worker 18603 --redis-url "$REDIS_URL" --redis-prefix "$PREFIX"
traffic 18602
stop

# names NAME: the mangled Rust functions NAME ran, in order of first appearance,
# without callgrind's recursion suffix ('2), each once.
names() {
  cat "$OUT/$1".*.cg | sed -nE "s/^c?fn=\([0-9]+\) //p" | sed -E "s/'[0-9]+$//" |
    grep -E '^(_ZN|_R)' | awk '!seen[$0]++'
}
for name in api worker; do
  names "presa-$name" >"services/$name/link-order.txt"
  echo "services/$name/link-order.txt: $(wc -l <"services/$name/link-order.txt") functions"
done
