#!/usr/bin/env bash
# callgrind-gateway.sh: instructions presa-gateway spends on one proxied
# plain `tools/call`, counted by valgrind's callgrind (instruction counts
# repeat run to run, so two builds compare without the noise of CPU time on
# a shared machine).
#
#   tools/bench/callgrind-gateway.sh <bin dir> [calls [warm-up calls]]
#
# <bin dir> holds presa-bench, rmcp-peer and presa-gateway (a release or
# `dist` build). It starts the rmcp echo peer natively and presa-gateway in
# front of it under callgrind, with the arguments `presa-bench --gateway-only`
# gives it (tools/bench/src/gateway.rs; `--upstream-pool 1`, one load
# connection), waits for /readyz, sends the warm-up calls (200) with
# `presa-bench calls` at one connection, dumps the counters
# (`callgrind_control -d`, which also zeroes them), sends `calls` (1000)
# more, dumps again and prints what was counted in between divided by
# `calls`: start-up and warm-up excluded, everything the process ran meanwhile
# (all threads) included. Other callgrind runs on the machine may go on
# (their dumps are allowed for, below); counts repeat within about 1 %.
#
# Example (two builds):
#   tools/bench/callgrind-gateway.sh /work/bin-old
#   tools/bench/callgrind-gateway.sh /work/bin-new
#
# With CALLGRIND_KEEP=<dir>, the measured parts are copied there, for
# `callgrind_annotate --inclusive=yes <dir>/out.*` (where the instructions go).
set -euo pipefail

bin=$(cd "${1:?bin dir}" && pwd)
calls=${2:-1000}
warm=${3:-200}
for p in presa-bench rmcp-peer presa-gateway; do
  [ -x "$bin/$p" ] || { echo "no $bin/$p" >&2; exit 2; }
done
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
  { echo "needs valgrind (callgrind_control)" >&2; exit 2; }
command -v curl >/dev/null || { echo "needs curl" >&2; exit 2; }

work=$(mktemp -d)
peer_pid="" gw_pid=""
cleanup() {
  [ -z "$gw_pid" ] || kill "$gw_pid" 2>/dev/null || true
  [ -z "$peer_pid" ] || kill "$peer_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The peer prints its URL first and stops when its stdin closes: keep a fifo open.
mkfifo "$work/peer.in"
"$bin/rmcp-peer" <"$work/peer.in" >"$work/peer.out" 2>&1 &
peer_pid=$!
exec 3>"$work/peer.in"
for _ in $(seq 100); do
  upstream=$(head -1 "$work/peer.out" 2>/dev/null || true)
  [ -n "$upstream" ] && break
  sleep 0.1
done
[ -n "${upstream:-}" ] || { echo "rmcp-peer printed no URL" >&2; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$work/out.%p" "$bin/presa-gateway" \
  --upstream-url "$upstream" --listen "127.0.0.1:$port" --upstream-pool 1 \
  --upstream-settle-ms 0 --max-inflight-calls-per-scope 0 >"$work/gateway.log" 2>&1 &
gw_pid=$!
for _ in $(seq 600); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$gw_pid" 2>/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
  sleep 0.2
done
url="http://127.0.0.1:$port/mcp"

# Dumps are parts out.<pid>.1, .2, …, and anyone's `callgrind_control -d`
# without a pid (callgrind.sh runs one every second) adds parts too. So:
# after the warm-up, dump and wait for the part to be written whole (on a
# loaded machine callgrind_control may give up waiting before valgrind gets to
# it); every part after it, up to the one dumped after the measured calls, is
# summed (a part dumped by someone else splits the measured span, or holds a
# sliver of idle time).
parts() { find "$work" -maxdepth 1 -name "out.$gw_pid.*" | wc -l; }
dump() {
  local before n
  before=$(parts)
  callgrind_control -d "$gw_pid" >/dev/null 2>&1 || true
  for _ in $(seq 1200); do
    n=$(parts)
    if [ "$n" -gt "$before" ] && grep -qE '^(summary|totals):' "$work/out.$gw_pid.$n" 2>/dev/null; then
      sleep 0.3
      return 0
    fi
    sleep 0.1
  done
  echo "callgrind wrote no dump" >&2
  exit 1
}
"$bin/presa-bench" calls --url "$url" --calls "$warm" --connections 1 >/dev/null
dump
first=$(($(parts) + 1))
"$bin/presa-bench" calls --url "$url" --calls "$calls" --connections 1 >"$work/calls.txt"
dump
last=$(parts)
ir=0
for n in $(seq "$first" "$last"); do
  part=$(awk '/^(summary|totals):/ {print $2; exit}' "$work/out.$gw_pid.$n")
  ir=$((ir + ${part:-0}))
done
if [ -n "${CALLGRIND_KEEP:-}" ]; then
  mkdir -p "$CALLGRIND_KEEP" && rm -f "$CALLGRIND_KEEP"/out*
  for n in $(seq "$first" "$last"); do cp "$work/out.$gw_pid.$n" "$CALLGRIND_KEEP"/; done
fi
echo "presa-gateway, $calls proxied calls (after $warm warm-up): $ir instructions, $((ir / calls)) a call"
