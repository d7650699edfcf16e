#!/usr/bin/env bash
# Offline checks of presa's deployment files; exits non-zero on any problem.
#   1. renders k8s/base, k8s/overlays/dev and k8s/overlays/production (kubectl
#      kustomize where kubectl exists, else k8s/render.py; with both, the two
#      renders must agree);
#   2. validates every built-in object with kubernetes-validate --strict against
#      each version in KUBE_VERSIONS (unknown fields, types, required fields);
#      the optional k8s/base/worker-hpa-alternative.yaml and the podman-only
#      k8s/podman/redis.yaml too;
#   3. checks the KEDA custom resources (no schema in kubernetes-validate) and
#      the cross-references between objects with k8s/check.py (production's
#      presa-secrets is created outside the manifests: --external-secret);
#   4. validates deploy/compose.yaml against the Compose specification's JSON
#      schema (check-jsonschema) and checks its services and config files.
# Needs python3 with pip (installs kubernetes-validate, check-jsonschema, pyyaml).
# Rendered files are left in $K8S_RENDER_DIR (default: a temporary directory),
# as NAME.yaml for NAME in base, dev, production (k8s/checkov.sh scans them).
# KUBECTL=none forces the render.py-only path.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
KUBE_VERSIONS=${KUBE_VERSIONS:-"1.30.0 1.33.0"}
OUT=${K8S_RENDER_DIR:-$(mktemp -d -t presa-k8s.XXXXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
KUBECTL=${KUBECTL:-kubectl}

need() { "$PY" -c "import $1" 2>/dev/null || return 1; }
if ! need kubernetes_validate || ! need check_jsonschema || ! need yaml; then
  echo "installing kubernetes-validate, check-jsonschema, pyyaml"
  "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    'kubernetes-validate==1.37.0' 'check-jsonschema==0.39.0' pyyaml
fi

fail=0
problem() { echo "FAIL: $*" >&2; fail=1; }

echo "== render"
for target in base overlays/dev overlays/production; do
  name=${target##*/}
  "$PY" k8s/render.py "k8s/$target" >"$OUT/$name.render-py.yaml" || problem "render.py k8s/$target"
  if command -v "$KUBECTL" >/dev/null 2>&1; then
    "$KUBECTL" kustomize "k8s/$target" >"$OUT/$name.yaml" || problem "kubectl kustomize k8s/$target"
    "$PY" k8s/check.py same "$OUT/$name.yaml" "$OUT/$name.render-py.yaml" \
      || problem "render.py and kubectl kustomize disagree on k8s/$target"
  else
    echo "kubectl not found: k8s/$target rendered by k8s/render.py only"
    cp "$OUT/$name.render-py.yaml" "$OUT/$name.yaml"
  fi
done

echo "== cross-references and KEDA custom resources (k8s/check.py)"
for name in base dev production; do
  external=()
  [ "$name" = production ] && external=(--external-secret presa-secrets)
  "$PY" k8s/check.py manifests "$OUT/$name.yaml" "$OUT/$name.builtin.yaml" "${external[@]}" ||
    problem "k8s/check.py on $name"
done

echo "== kubernetes-validate --strict (${KUBE_VERSIONS})"
for v in $KUBE_VERSIONS; do
  for f in "$OUT"/{base,dev,production}.builtin.yaml k8s/base/worker-hpa-alternative.yaml k8s/podman/redis.yaml; do
    if ! log=$("$PY" -m kubernetes_validate --strict -k "$v" "$f" 2>&1); then
      echo "$log"; problem "kubernetes-validate $v $f"; continue
    fi
    # A kind without a schema is only a warning there: here it is a failure
    # (custom resources were split off and checked above).
    if grep -q "Couldn't find schema" <<<"$log"; then
      echo "$log"; problem "kubernetes-validate $v $f: objects without a schema"
    fi
    echo "$v $(basename "$f"): $(grep -c ' passed for resource ' <<<"$log") objects passed"
  done
done

echo "== deploy/compose.yaml"
"$PY" -m check_jsonschema --builtin-schema vendor.compose-spec deploy/compose.yaml || problem "compose schema"
"$PY" k8s/check.py compose deploy/compose.yaml || problem "compose checks"

if [ $fail -ne 0 ]; then
  echo "k8s/validate.sh: FAILED (rendered files in $OUT)" >&2
  exit 1
fi
echo "k8s/validate.sh: all manifests valid (rendered files in $OUT)"
