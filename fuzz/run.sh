#!/usr/bin/env bash
# Usage: fuzz/run.sh [SECONDS] [TARGET...]
#
# Builds every fuzz target (one `cargo fuzz build`: release + ASan) and runs
# each for SECONDS (default 20) from its committed seeds (fuzz/seeds/TARGET),
# with a scratch corpus under fuzz/corpus/TARGET (not committed). Prints per
# target `TARGET: N inputs executed, no crash`; exits non-zero if any target
# crashes, leaks, times out or fails to run (the reproducer is kept in
# fuzz/artifacts/TARGET). Needs cargo-fuzz (`cargo install cargo-fuzz --locked`);
# works on the stable toolchain through RUSTC_BOOTSTRAP=1.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
SECONDS_PER_TARGET="${1:-20}"
shift || true
[[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]] || { echo "usage: fuzz/run.sh [SECONDS] [TARGET...]" >&2; exit 2; }

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
echo "[fuzz] building ${#TARGETS[@]} targets (release + ASan)"
cargo fuzz build

mkdir -p logs
failed=()
for t in "${TARGETS[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  log="logs/$t.log"
  # The scratch corpus comes first: libfuzzer writes new inputs there; seeds are read only.
  if cargo fuzz run "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 >"$log" 2>&1; then
    runs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n1 || true)
    [[ -n "$runs" ]] || runs=$(grep -oE '^#[0-9]+[[:space:]]+DONE' "$log" | grep -oE '[0-9]+' | tail -n1 || true)
    echo "$t: ${runs:-?} inputs executed, no crash"
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
