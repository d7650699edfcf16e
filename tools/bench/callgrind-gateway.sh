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
# more, dumps again and prints the second dump's instructions divided by
# `calls`: start-up and warm-up excluded, everything the process ran meanwhile
# (all threads) included.
#
# Example (two builds):
#   tools/bench/callgrind-gateway.sh /work/bin-old
#   tools/bench/callgrind-gateway.sh /work/bin-new
#
# With CALLGRIND_KEEP=<dir>, the measured dump is copied there, for
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

"$bin/presa-bench" calls --url "$url" --calls "$warm" --connections 1 >/dev/null
callgrind_control -d "$gw_pid" >/dev/null 2>&1
"$bin/presa-bench" calls --url "$url" --calls "$calls" --connections 1 >"$work/calls.txt"
callgrind_control -d "$gw_pid" >/dev/null 2>&1
# Dumps are numbered: the last is the measured one.
measured=$(ls -v "$work"/out.*.* | tail -1)
ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$measured")
if [ -n "${CALLGRIND_KEEP:-}" ]; then
  mkdir -p "$CALLGRIND_KEEP" && rm -f "$CALLGRIND_KEEP"/out* && cp "$measured" "$CALLGRIND_KEEP"/
fi
echo "presa-gateway, $calls proxied calls (after $warm warm-up): $ir instructions, $((ir / calls)) a call"
