#!/usr/bin/env bash
# checkov, the Kubernetes policy scanner, on what presa ships: k8s/base and
# k8s/overlays/production, rendered as k8s/validate.sh renders them (kubectl
# kustomize where kubectl exists, else k8s/render.py). Fails on any failed
# check or any file checkov cannot parse.
#
# No check is skipped on the command line: a check presa does not meet is
# waived in the manifests, on the object, with its reason
# (`checkov.io/skipN: CKV_K8S_xx=reason` in metadata.annotations), so the
# waiver travels with the object and checkov lists it as skipped. The
# production overlay removes the base's waivers it does not need, so there
# checkov checks those for real.
#
# checkov is pinned (CHECKOV_VERSION) and installed from PyPI with pip into a
# venv of its own (CHECKOV_VENV) the first time; later runs reuse it. It is
# run with --skip-download: it fetches nothing (no guidelines, no platform).
# Needs python3 (3.9-3.12) with pip and the venv module, and pyyaml where
# kubectl is missing (k8s/render.py).
# Environment: CHECKOV_VERSION, CHECKOV_VENV, K8S_RENDER_DIR (rendered files
# and checkov's JSON reports are left there; default a temporary directory),
# KUBECTL=none forces the render.py-only path, PYTHON.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
CHECKOV_VERSION=${CHECKOV_VERSION:-3.3.30}
CHECKOV_VENV=${CHECKOV_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/presa/checkov-$CHECKOV_VERSION}
OUT=${K8S_RENDER_DIR:-$(mktemp -d -t presa-checkov.XXXXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
KUBECTL=${KUBECTL:-kubectl}
# Nothing from the environment may skip or narrow the checks, nor call a platform.
unset CKV_SKIP_CHECK CKV_CHECK CKV_FRAMEWORK CKV_SKIP_FRAMEWORK BC_API_KEY PRISMA_API_URL

checkov_bin=$CHECKOV_VENV/bin/checkov
installed() { [ -x "$checkov_bin" ] && [ "$("$checkov_bin" --version 2>/dev/null)" = "$CHECKOV_VERSION" ]; }
if ! installed; then
  echo "== installing checkov $CHECKOV_VERSION from PyPI into $CHECKOV_VENV"
  t0=$SECONDS
  rm -rf "$CHECKOV_VENV"
  "$PY" -m venv "$CHECKOV_VENV"
  "$CHECKOV_VENV/bin/python" -m pip install -q --disable-pip-version-check "checkov==$CHECKOV_VERSION"
  installed || { echo "checkov $CHECKOV_VERSION did not install in $CHECKOV_VENV" >&2; exit 1; }
  echo "installed in $((SECONDS - t0)) s"
fi

fail=0
for target in base overlays/production; do
  name=${target##*/}
  if command -v "$KUBECTL" >/dev/null 2>&1; then
    "$KUBECTL" kustomize "k8s/$target" >"$OUT/$name.yaml"
  else
    "$PY" k8s/render.py "k8s/$target" >"$OUT/$name.yaml"
  fi
  echo "== checkov $CHECKOV_VERSION on k8s/$target"
  # Exit 1 on failed checks: judged below from the JSON report, with parse errors too.
  "$checkov_bin" --file "$OUT/$name.yaml" --framework kubernetes --skip-download --output json \
    >"$OUT/$name.checkov.json" || true
  # Failures, the waivers in force and the summary, from the report.
  "$PY" - "$OUT/$name.checkov.json" "k8s/$target" <<'PY' || fail=1
import json, sys
path, target = sys.argv[1:]
with open(path, encoding="utf-8") as f:
    report = json.load(f)
reports = report if isinstance(report, list) else [report]
bad = 0
for r in reports:
    s = r.get("summary", {})
    if r.get("check_type") != "kubernetes":
        sys.exit(f"{target}: a report of check type {r.get('check_type')}, expected kubernetes")
    for c in r["results"].get("failed_checks", []):
        lines = "-".join(map(str, c.get("file_line_range") or []))
        print(f"  FAILED {c['check_id']} {c['check_name']!r} on {c['resource']} ({c['file_path']}:{lines})")
    for c in r["results"].get("skipped_checks", []):
        print(f"  waived {c['check_id']} on {c['resource']}: {c.get('check_result', {}).get('suppress_comment')}")
    for e in r["results"].get("parsing_errors", []):
        print(f"  cannot parse {e}")
    print(f"{target}: Passed checks: {s['passed']}, Failed checks: {s['failed']}, Skipped checks: {s['skipped']}, "
          f"parsing errors: {s['parsing_errors']} ({s['resource_count']} resources, checkov {s['checkov_version']})")
    bad += s["failed"] + s["parsing_errors"] + (s["passed"] == 0)
if not reports or bad:
    sys.exit(f"{target}: FAILED")
PY
done

if [ $fail -ne 0 ]; then
  echo "k8s/checkov.sh: FAILED (rendered files and reports in $OUT)" >&2
  exit 1
fi
echo "k8s/checkov.sh: no failed check (rendered files and reports in $OUT)"
