#!/usr/bin/env bash
# Usage: fuzz/run.sh [--dev] [SECONDS] [TARGET...]
#
# Builds every fuzz target (one `cargo fuzz build`: release + ASan; with --dev,
# the dev profile with ASan: a much shorter build, fewer inputs per second) and
# runs each target (default: all) for SECONDS (default 20) from its committed
# seeds (fuzz/seeds/TARGET), with a scratch corpus under fuzz/corpus/TARGET
# (not committed). Prints per target `TARGET: N inputs executed, no crash`;
# exits non-zero if any target crashes, leaks, times out or fails to run (the
# reproducer is kept in fuzz/artifacts/TARGET, the log in fuzz/logs/TARGET.log).
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`); runs on the stable
# toolchain through RUSTC_BOOTSTRAP=1.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
PROFILE=()
if [[ "${1:-}" == "--dev" ]]; then
  PROFILE=(--dev)
  shift
fi
SECONDS_PER_TARGET="${1:-20}"
shift || true
[[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]] || { echo "usage: fuzz/run.sh [--dev] [SECONDS] [TARGET...]" >&2; exit 2; }

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2
  exit 2
fi

if (($# > 0)); then
  TARGETS=("$@")
else
  mapfile -t TARGETS < <(cargo fuzz list)
fi
((${#TARGETS[@]} > 0)) || { echo "no fuzz targets found" >&2; exit 2; }
echo "[fuzz] building ${#TARGETS[@]} targets (${PROFILE[*]:-release} + ASan)"
build_start=$SECONDS
cargo fuzz build "${PROFILE[@]}"
echo "[fuzz] built in $((SECONDS - build_start))s"

mkdir -p logs
failed=()
for t in "${TARGETS[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  log="logs/$t.log"
  # The scratch corpus comes first: libFuzzer writes new inputs there; seeds are only read.
  if cargo fuzz run "${PROFILE[@]}" "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 >"$log" 2>&1; then
    runs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n1 || true)
    [[ -n "$runs" ]] || runs=$(grep -oE '^#[0-9]+[[:space:]]+DONE' "$log" | grep -oE '[0-9]+' | tail -n1 || true)
    if [[ -z "$runs" ]]; then
      echo "$t: FAILED (no libFuzzer statistics in fuzz/$log)"
      tail -n 40 "$log"
      failed+=("$t")
      continue
    fi
    echo "$t: $runs inputs executed, no crash"
  else
    echo "$t: FAILED (see fuzz/$log; reproducer in fuzz/artifacts/$t)"
    tail -n 40 "$log"
    failed+=("$t")
  fi
done

if ((${#failed[@]} > 0)); then
  echo "[fuzz] ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "[fuzz] all ${#TARGETS[@]} targets ran ${SECONDS_PER_TARGET}s each with no crash"
