#!/usr/bin/env bash
# callgrind.sh: instructions per task of one pod under `presa-bench tiers`,
# counted by valgrind's callgrind, so two builds compare without the noise
# of CPU time on a shared machine (instruction counts repeat run to run).
#
#   tools/bench/callgrind.sh <bin dir> <api|worker> [tasks ...]
#
# <bin dir> holds presa-bench, presa-api and presa-worker (a `dist` build).
# The chosen pod runs under callgrind (about 50 times slower, so the run is
# bound by it; the other pod and Redis run natively). Its counters are dumped
# every second (`callgrind_control -d`: tiers ends its pods with SIGKILL,
# which writes nothing) and summed. With two or more task counts it also
# prints the slope between the first and the last: the instructions one more
# task costs, start-up excluded. For the API pod a task brings five sync
# calls with it (tiers sends five times as many), so compare API slopes
# between builds, not with the worker's.
#
# Example (two builds, worker):
#   tools/bench/callgrind.sh /work/bin-old worker 2000 4000
#   tools/bench/callgrind.sh /work/bin-new worker 2000 4000
set -euo pipefail

bin=$(cd "${1:?bin dir}" && pwd)
pod=${2:?api or worker}
shift 2
[ $# -gt 0 ] || set -- 2000 4000
case "$pod" in api | worker) ;; *) echo "pod: api or worker" >&2; exit 2 ;; esac
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
  { echo "needs valgrind (callgrind_control)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in presa-bench presa-api presa-worker; do ln -s "$bin/$p" "$work/$p"; done
rm "$work/presa-$pod"
printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/out "%s" "$@"\n' \
  "$work" "$bin/presa-$pod" >"$work/presa-$pod"
chmod +x "$work/presa-$pod"

first="" first_ir="" last="" last_ir=""
for tasks in "$@"; do
  rm -f "$work"/out*
  "$work/presa-bench" tiers --bin-dir "$work" --tasks "$tasks" >"$work/tiers.txt" 2>&1 &
  bench=$!
  while kill -0 "$bench" 2>/dev/null; do
    callgrind_control -d >/dev/null 2>&1 || true
    sleep 1
  done
  wait "$bench" || { cat "$work/tiers.txt" >&2; exit 1; }
  ir=0
  for f in "$work"/out*; do
    n=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
    ir=$((ir + ${n:-0}))
  done
  echo "presa-$pod, $tasks tasks: $ir instructions ($((ir / tasks)) a task, start-up included)"
  [ -n "$first" ] || { first=$tasks; first_ir=$ir; }
  last=$tasks last_ir=$ir
done
if [ "$last" != "$first" ]; then
  echo "slope: $(((last_ir - first_ir) / (last - first))) instructions a task"
fi
