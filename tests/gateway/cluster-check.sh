#!/usr/bin/env bash
# presa-gateway in front of @modelcontextprotocol/server-everything, as a cluster (2 API pods
# and 2 workers on Redis behind nginx round robin), driven with the `presa` CLI only:
#
#   EVERYTHING_STDIO=$(bash tests/gateway/setup.sh | sed -n 's/^EVERYTHING_STDIO=//p')
#   deploy/local-cluster.sh [--auth-jwt] --gateway "$EVERYTHING_STDIO" -- tests/gateway/cluster-check.sh
#
# PRESA_URL (and with --auth-jwt PRESA_TOKEN) come from local-cluster.sh. It checks the tool
# list, a plain call, progress of a long operation, an elicitation answered after a
# `--no-input` stop (`presa answer` + `presa watch`) and up front (`--answer`), a sampling
# request answered both ways, and a cancellation; one line per check, then `N passed, M failed`
# (exit 1 if any failed). Every CLI call is bounded by `timeout`.
#
# Environment: PRESA_BIN (the presa binary; default: built with `cargo build -p presa-cli`),
# CHECK_TIMEOUT (seconds any one CLI call may take; default 60).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${PRESA_URL:?PRESA_URL is not set: run me as deploy/local-cluster.sh --gateway \"\$EVERYTHING_STDIO\" -- $0}"
CHECK_TIMEOUT=${CHECK_TIMEOUT:-60}

# shellcheck source=tests/lib/presa-cli.sh
source "$REPO/tests/lib/presa-cli.sh"

TMP=$(mktemp -d -t presa-cluster-check.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# run SECONDS ARGS...: run `presa ARGS...` (no stdin, so never a terminal) bounded by SECONDS;
# sets RC, OUT and ERR. Never fails by itself.
run() {
  local t=$1; shift
  RC=0
  timeout -k 5 "$t" "$PRESA_BIN" "$@" </dev/null >"$TMP/out" 2>"$TMP/err" || RC=$?
  OUT=$(cat "$TMP/out")
  ERR=$(cat "$TMP/err")
  CMDLINE="presa $*"
}

die() { echo "$*" >&2; exit 1; }

# What the last run did, for failure messages (the last 40 lines of each stream).
last() {
  printf '`%s` exited %s\n--- stdout\n%s\n--- stderr\n%s' "$CMDLINE" "$RC" \
    "$(tail -n 40 <<<"$OUT")" "$(tail -n 40 <<<"$ERR")"
}

# expect_rc WANT: the last run exited WANT (124: it timed out).
expect_rc() {
  [ "$RC" = "$1" ] && return 0
  [ "$RC" = 124 ] && die "timed out after ${CHECK_TIMEOUT}s: $(last)"
  die "expected exit $1, got $RC: $(last)"
}

# contains TEXT NEEDLE WHAT: TEXT contains the fixed string NEEDLE.
contains() { grep -qF -- "$2" <<<"$1" || die "$3 lacks \"$2\": $(last)"; }

# json EXPR: evaluate a Python expression over `j`, the last run's stdout parsed as JSON.
json() { python3 -c 'import json, sys; j = json.loads(sys.stdin.read()); print(eval(sys.argv[1]))' "$1" <<<"$OUT"; }

# --- the checks (each runs in a subshell with `set -e`; `die` fails it) ------------------

check_tools() {
  run "$CHECK_TIMEOUT" tools
  expect_rc 0
  local missing=()
  for t in get-sum trigger-long-running-operation trigger-elicitation-request trigger-sampling-request get-roots-list; do
    grep -qE "^$t( |\$)" <<<"$OUT" || missing+=("$t")
  done
  [ ${#missing[@]} = 0 ] || die "presa tools does not list: ${missing[*]}: $(last)"
  echo "lists server-everything's $(grep -cE '^[a-z]' <<<"$OUT") tools, get-sum ... get-roots-list among them"
}

check_sum() {
  run "$CHECK_TIMEOUT" --json call get-sum a=2 b=3
  expect_rc 0
  local text
  text=$(json 'j["content"][0]["text"]') || die "not a JSON result: $(last)"
  [ "$text" = "The sum of 2 and 3 is 5." ] || die "unexpected text \"$text\": $(last)"
  echo "\"$text\""
}

check_progress() {
  run "$CHECK_TIMEOUT" call trigger-long-running-operation duration=2 steps=4
  expect_rc 0
  contains "$OUT" "Long running operation completed. Duration: 2 seconds, Steps: 4." "the result"
  local steps
  steps=$(grep -oE 'working: [1-4]/4' <<<"$ERR" | sed 's/working: //' | sort -u | tr '\n' ' ') || true
  [ -n "$steps" ] || die "no progress status (like 'working: 2/4') among the status lines: $(last)"
  grep -qE 'completed' <<<"$ERR" || die "no final 'completed' status line: $(last)"
  echo "completed, progress seen: ${steps% }"
}

# no_input_key TOOL ARGS...: call with --no-input; expect exit 5; sets ID and KEY (the
# gateway's q1-<kind>-<10 hex> key) from what presa printed, and checks its answer hint.
no_input_key() {
  run "$CHECK_TIMEOUT" call "$@" --no-input
  expect_rc 5
  ID=$(sed -n '1s/^Task \(.*\) needs input:$/\1/p' <<<"$OUT")
  [ -n "$ID" ] || die "no 'Task ID needs input:' line: $(last)"
  KEY=$(grep -oE 'q1-(elicit|sample)-[0-9a-f]{10}' <<<"$OUT" | head -n1) || true
  [ -n "$KEY" ] || die "no q1-…-<10 hex> input key printed: $(last)"
  contains "$OUT" "answer $ID $KEY=" "the answer hint"
  contains "$OUT" "watch $ID" "the follow hint"
}

check_elicitation() {
  no_input_key trigger-elicitation-request
  local id=$ID key=$KEY
  contains "$OUT" "name (string, required)" "the question"
  run "$CHECK_TIMEOUT" answer "$id" "$key={\"action\":\"accept\",\"content\":{\"name\":\"Ada Lovelace\"}}"
  expect_rc 0
  contains "$OUT" "Answered $key for task $id" "presa answer's output"
  run "$CHECK_TIMEOUT" watch "$id"
  expect_rc 0
  contains "$OUT" "$id completed" "presa watch's output"
  contains "$OUT" "Name: Ada Lovelace" "the result"
  # The same question gets the same key: answered up front, nothing is asked.
  run "$CHECK_TIMEOUT" call trigger-elicitation-request --no-input \
    --answer "$key={\"action\":\"accept\",\"content\":{\"name\":\"Grace Hopper\"}}"
  expect_rc 0
  contains "$OUT" "User provided the requested information!" "the result"
  contains "$OUT" "Name: Grace Hopper" "the result"
  echo "$key: answer+watch gave 'Name: Ada Lovelace', --answer gave 'Name: Grace Hopper'"
}

check_sampling() {
  local sample='{"role":"assistant","content":{"type":"text","text":"forty-two"},"model":"m"}'
  no_input_key trigger-sampling-request prompt=hi
  local id=$ID key=$KEY
  contains "$OUT" "sampling/createMessage" "the question"
  contains "$OUT" "context: hi" "the question"
  run "$CHECK_TIMEOUT" call trigger-sampling-request prompt=hi --no-input --answer "$key=$sample"
  expect_rc 0
  contains "$OUT" "LLM sampling result" "the result"
  contains "$OUT" "forty-two" "the result"
  # The task parked by --no-input, answered afterwards.
  run "$CHECK_TIMEOUT" answer "$id" "$key=$sample"
  expect_rc 0
  run "$CHECK_TIMEOUT" watch "$id"
  expect_rc 0
  contains "$OUT" "forty-two" "the parked task's result"
  echo "$key: --answer and answer+watch both completed with forty-two"
}

check_cancel() {
  run "$CHECK_TIMEOUT" call trigger-long-running-operation duration=60 steps=60 --detach
  expect_rc 0
  local id=$OUT
  [[ "$id" =~ ^p[^[:space:]]+$ ]] || die "--detach printed no task id: $(last)"
  # Follow it from another presa, as a user would, while it is cancelled.
  timeout -k 5 90 "$PRESA_BIN" watch "$id" </dev/null >"$TMP/watch.out" 2>"$TMP/watch.err" &
  WATCHER=$!
  trap 'kill "$WATCHER" 2>/dev/null || true' EXIT
  local working=""
  for _ in $(seq 60); do
    run "$CHECK_TIMEOUT" --json get "$id"
    expect_rc 0
    [ "$(json 'j.get("status")')" = working ] && [[ "$(json 'j.get("statusMessage")')" == */60 ]] && { working=yes; break; }
    sleep 0.5
  done
  [ -n "$working" ] || die "the task never showed progress (N/60) within 30 s: $(last)"
  local progress
  progress=$(json 'j.get("statusMessage")')
  run "$CHECK_TIMEOUT" cancel "$id"
  expect_rc 0
  contains "$OUT" "Task $id cancelled" "presa cancel's output"
  local wrc=0
  for _ in $(seq 60); do kill -0 "$WATCHER" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$WATCHER" 2>/dev/null && die "presa watch $id still running 30 s after the cancel: $(cat "$TMP/watch.out" "$TMP/watch.err")"
  wait "$WATCHER" || wrc=$?
  [ "$wrc" = 4 ] || die "presa watch $id exited $wrc, not 4 (cancelled): $(cat "$TMP/watch.out" "$TMP/watch.err")"
  grep -qF "$id cancelled" "$TMP/watch.out" || die "presa watch did not say cancelled: $(cat "$TMP/watch.out")"
  run "$CHECK_TIMEOUT" --json get "$id"
  expect_rc 0
  [ "$(json 'j.get("status")')" = cancelled ] || die "status after cancel is not cancelled: $(last)"
  # The cluster goes on.
  run "$CHECK_TIMEOUT" call get-sum a=40 b=2
  expect_rc 0
  contains "$OUT" "The sum of 40 and 2 is 42." "a call after the cancel"
  echo "cancelled at $progress; presa watch exited 4; get-sum still works"
}

PASSED=0
FAILED=0
check() {
  local name=$1 fn=$2 rc=0 started=$SECONDS
  set +e
  (set -e; "$fn") >"$TMP/check.out" 2>"$TMP/check.err"
  rc=$?
  set -e
  if [ $rc = 0 ]; then
    PASSED=$((PASSED + 1))
    printf 'ok    %-12s %s (%ss)\n' "$name" "$(tail -n1 "$TMP/check.out")" $((SECONDS - started))
  else
    FAILED=$((FAILED + 1))
    printf 'FAIL  %-12s (%ss)\n' "$name" $((SECONDS - started))
    sed 's/^/      /' "$TMP/check.err"
  fi
}

echo "cluster-check against $PRESA_URL ($([ -n "${PRESA_TOKEN:-}" ] && echo "with a bearer token" || echo "no token"))"
check tools check_tools
check get-sum check_sum
check progress check_progress
check elicitation check_elicitation
check sampling check_sampling
check cancel check_cancel
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
