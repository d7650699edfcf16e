#!/usr/bin/env bash
# Big results through nginx: 2 API pods and 2 workers on Redis (deploy/local-cluster.sh, round
# robin without affinity) sharing one artifact store, driven with the `presa` CLI and curl:
#
#   PRESA_ARTIFACT_URL=file:///tmp/some-dir deploy/local-cluster.sh --auth-jwt -- tests/artifacts/cluster-check.sh
#
# Checks: a 5 MB result (`big_result`) completes as a task and `presa call --output-dir` saves
# the linked artifact with the tool's exact bytes; a 24 MiB artifact a tool streams
# (`export_dataset`) the same; a ranged download through nginx answers 206 with the right bytes.
# One line per check, then `N passed, M failed`.
#
# Environment: PRESA_URL, PRESA_TOKEN (from local-cluster.sh --auth-jwt; nginx adds it too),
# PRESA_BIN (default: built with `cargo build -p presa-cli`), CHECK_TIMEOUT (default 120 s).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${PRESA_URL:?PRESA_URL is not set: run me through deploy/local-cluster.sh -- $0}"
CHECK_TIMEOUT=${CHECK_TIMEOUT:-120}
# shellcheck source=tests/lib/presa-cli.sh
source "$REPO/tests/lib/presa-cli.sh"
TMP=$(mktemp -d -t presa-artifacts-check.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PASSED=0
FAILED=0
check() { # check NAME CONDITION-EXIT-CODE DETAIL
  if [ "$2" = 0 ]; then echo "ok   $1"; PASSED=$((PASSED + 1)); else echo "FAIL $1: $3"; FAILED=$((FAILED + 1)); fi
}
# The demo's bytes: byte i is ' ' + i % 95.
expected_sha() {
  python3 -c "import hashlib,sys; n=int(sys.argv[1]); b=bytes(32 + i % 95 for i in range(n)); print(hashlib.sha256(b).hexdigest())" "$1"
}

# 1. A 5 MB result, spilled by a worker, saved by the CLI.
out=$(timeout -k 5 "$CHECK_TIMEOUT" "$PRESA_BIN" call big_result bytes=5000000 --output-dir "$TMP/a" </dev/null 2>"$TMP/err") && rc=0 || rc=$?
file=$(ls "$TMP/a" 2>/dev/null | head -n1 || true)
got=$( [ -n "$file" ] && sha256sum "$TMP/a/$file" | cut -d' ' -f1 || echo none)
want=$(expected_sha 5000000)
[ $rc = 0 ] && [ "$got" = "$want" ]; check "a 5 MB result comes back as an artifact with the tool's bytes" $? "rc=$rc sha=$got want=$want out=$out err=$(tail -n3 "$TMP/err")"

# 2. A 24 MiB artifact streamed by the tool itself.
out=$(timeout -k 5 "$CHECK_TIMEOUT" "$PRESA_BIN" call export_dataset mebibytes=24 --output-dir "$TMP/b" </dev/null 2>"$TMP/err") && rc=0 || rc=$?
file=$(ls "$TMP/b" 2>/dev/null | head -n1 || true)
got=$( [ -n "$file" ] && sha256sum "$TMP/b/$file" | cut -d' ' -f1 || echo none)
want=$(expected_sha $((24 * 1024 * 1024)))
[ $rc = 0 ] && [ "$got" = "$want" ]; check "a 24 MiB artifact a tool streams is saved whole" $? "rc=$rc sha=$got out=$out err=$(tail -n3 "$TMP/err")"

# 3. A ranged download through nginx (the path from the link's _meta), and one without credentials.
json=$(timeout -k 5 "$CHECK_TIMEOUT" "$PRESA_BIN" --json call big_result bytes=400000 </dev/null 2>/dev/null || true)
path=$(printf '%s' "$json" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["content"][0]["_meta"]["io.presa/download"])' 2>/dev/null || true)
base=${PRESA_URL%/mcp}
auth=(); [ -n "${PRESA_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $PRESA_TOKEN")
code=$(curl -s -o "$TMP/range" -w '%{http_code}' "${auth[@]}" -H 'Range: bytes=95-189' "$base/$path" || true)
range=$(cat "$TMP/range" 2>/dev/null || true)
want=$(python3 -c "print(''.join(chr(32 + i % 95) for i in range(95, 190)), end='')")
[ -n "$path" ] && [ "$code" = 206 ] && [ "$range" = "$want" ]; check "a ranged download through nginx answers 206 with the range's bytes" $? "path=$path code=$code"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
