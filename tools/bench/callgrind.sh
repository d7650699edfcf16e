#!/usr/bin/env bash
# callgrind.sh: instructions per task of one pod (or of Redis) under
# `presa-bench tiers`, counted by valgrind's callgrind, so two builds compare
# without the noise of CPU time on a shared machine (instruction counts
# repeat run to run).
#
#   tools/bench/callgrind.sh <bin dir> <api|worker|redis> [tasks ...]
#
# <bin dir> holds presa-bench, presa-api and presa-worker (a `dist` build).
# The chosen pod runs under callgrind (about 50 times slower, so the run is
# bound by it; the rest run natively). `redis` runs tiers' private
# `redis-server` under it instead (a wrapper first on PATH), which counts what
# a build's Lua scripts cost Redis. Its counters are dumped
# every 0.2 s (`callgrind_control -d <its pid>`: tiers ends its pods with SIGKILL,
# which writes nothing, so what ran after the last dump is lost; a dump a
# second lost enough to undercount short runs) and summed. With two or more task counts it also
# prints the slope between the first and the last: the instructions one more
# task costs, start-up excluded. For the API pod a task brings five sync
# calls with it (tiers sends five times as many), so compare API slopes
# between builds, not with the worker's.
#
# Example (two builds, worker):
#   tools/bench/callgrind.sh /work/bin-old worker 2000 4000
#   tools/bench/callgrind.sh /work/bin-new worker 2000 4000
#
# With CALLGRIND_KEEP=<dir>, the last run's callgrind files are copied there,
# for `callgrind_annotate --inclusive=yes <dir>/out.*` (where the instructions go).
set -euo pipefail

bin=$(cd "${1:?bin dir}" && pwd)
pod=${2:?api or worker}
shift 2
[ $# -gt 0 ] || set -- 2000 4000
case "$pod" in api | worker | redis) ;; *) echo "pod: api, worker or redis" >&2; exit 2 ;; esac
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
  { echo "needs valgrind (callgrind_control)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in presa-bench presa-api presa-worker; do ln -s "$bin/$p" "$work/$p"; done
# The program to count, and the name tiers starts it by.
if [ "$pod" = redis ]; then
  target=$(command -v redis-server) || { echo "no redis-server on PATH" >&2; exit 2; }
  mkdir "$work/path"
  ln -s "$(command -v redis-cli)" "$work/path/redis-cli"
  wrapper="$work/path/redis-server"
  export PATH="$work/path:$PATH"
else
  target="$bin/presa-$pod"
  wrapper="$work/presa-$pod"
  rm "$wrapper"
fi
printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/out "%s" "$@"\n' \
  "$work" "$target" >"$wrapper"
chmod +x "$wrapper"

first="" first_ir="" last="" last_ir=""
for tasks in "$@"; do
  rm -f "$work"/out*
  "$work/presa-bench" tiers --bin-dir "$work" --tasks "$tasks" >"$work/tiers.txt" 2>&1 &
  bench=$!
  while kill -0 "$bench" 2>/dev/null; do
    # This run's callgrind only (a bare `callgrind_control -d` dumps every
    # callgrind on the machine), and never for long: a dump asked of a pod
    # that tiers SIGKILLs meanwhile can wait forever.
    pid=$(pgrep -f -- "--callgrind-out-file=$work/out" | head -n 1 || true)
    if [ -n "$pid" ]; then
      timeout 10 callgrind_control -d "$pid" >/dev/null 2>&1 || true
    fi
    sleep 0.2
  done
  wait "$bench" || { cat "$work/tiers.txt" >&2; exit 1; }
  ir=0
  for f in "$work"/out*; do
    n=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
    ir=$((ir + ${n:-0}))
  done
  if [ -n "${CALLGRIND_KEEP:-}" ]; then
    mkdir -p "$CALLGRIND_KEEP" && rm -f "$CALLGRIND_KEEP"/out* && cp "$work"/out* "$CALLGRIND_KEEP"/
  fi
  echo "$(basename "$target"), $tasks tasks: $ir instructions ($((ir / tasks)) a task, start-up included)"
  [ -n "$first" ] || { first=$tasks; first_ir=$ir; }
  last=$tasks last_ir=$ir
done
if [ "$last" != "$first" ]; then
  echo "slope: $(((last_ir - first_ir) / (last - first))) instructions a task"
fi
