# tests/lib/presa-cli.sh: sourced by the cluster checks (tests/*/cluster-check.sh)
# to find the presa CLI they drive: PRESA_BIN if given, else built here with
# `cargo build -p presa-cli` into CARGO_TARGET_DIR (or the repo's target/).
# Needs REPO (the repository's root); sets PRESA_BIN, or exits when there is none.

if [ -z "${PRESA_BIN:-}" ]; then
  (cd "$REPO" && cargo build -q -p presa-cli)
  PRESA_BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug/presa
fi
[ -x "$PRESA_BIN" ] || { echo "$0: no presa binary at $PRESA_BIN" >&2; exit 1; }
