#!/usr/bin/env bash
# The dashboard and the alerts of issue #23, checked for real:
#
#   1. the alert rules: `promtool check rules` and `promtool test rules` (a firing and a quiet
#      case per alert, deploy/prometheus/presa-rules.test.yaml), and the PrometheusRule
#      (deploy/prometheus/prometheusrule.yaml) is what deploy/prometheus/to-prometheusrule.sh
#      generates from the rules file;
#   2. the Grafana dashboard (deploy/grafana/presa-dashboard.json): a local cluster
#      (deploy/local-cluster.sh: Redis, 2 presa-api, 2 presa-worker, nginx) under a short load,
#      scraped every second by a real Prometheus (Debian's `prometheus`, with the rules loaded),
#      and every target expression of every panel must return data (live_check.py prints
#      `panel | expr | sample value`).
#
# Usage: tests/observability/check.sh [--rules-only]
# Needs: cargo, prometheus and promtool (apt-get install prometheus), redis-server, nginx
# (nginx-light), curl, python3 (standard library only). Honours CARGO_TARGET_DIR.
# Exit status 0 only when every step passed. About a minute after the build.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PROM="$REPO/deploy/prometheus"
started=$(date +%s)

for tool in promtool prometheus python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install prometheus python3)" >&2; exit 1; }
done

echo "== promtool check rules"
promtool check rules "$PROM/presa-rules.yaml"
echo "== promtool test rules"
(cd "$PROM" && promtool test rules presa-rules.test.yaml)
echo "== the PrometheusRule is generated from the rules file"
if ! diff -u "$PROM/prometheusrule.yaml" <("$PROM/to-prometheusrule.sh" --stdout); then
  echo "deploy/prometheus/prometheusrule.yaml is stale: run deploy/prometheus/to-prometheusrule.sh" >&2
  exit 1
fi
echo "in sync"
# Every alert has a severity, a summary, a description and a runbook (stdlib: a line scan).
python3 - "$PROM/presa-rules.yaml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.split(r"\n(?=      - alert: )", text)[1:]
missing = []
for b in blocks:
    name = re.match(r"      - alert: (\S+)", b).group(1)
    for key in ("severity:", "summary:", "description:", "runbook:"):
        if f"\n          {key}" not in b:
            missing.append(f"{name} lacks {key}")
if missing or not blocks:
    sys.exit("alert rules incomplete: " + "; ".join(missing or ["no alerts"]))
print(f"{len(blocks)} alerts, each with severity, summary, description and runbook")
PY

if [ "${1:-}" = --rules-only ]; then exit 0; fi

echo "== the dashboard against a live cluster"
(cd "$REPO" && cargo build -q -p presa-api -p presa-worker)
built=$(date +%s)
# A small per-principal active-task limit, so the load can reach it (a refusal, creates near the quota).
export PRESA_MAX_ACTIVE_TASKS_PER_SCOPE=12
"$REPO/deploy/local-cluster.sh" -- python3 "$REPO/tests/observability/live_check.py"
echo "check.sh: $(( $(date +%s) - built )) s after the build ($(( $(date +%s) - started )) s in all)"
