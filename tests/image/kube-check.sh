#!/usr/bin/env bash
# presa's Kubernetes base manifests, run for real with `podman kube play`:
# k8s/base rendered by the repository's own renderer (k8s/render.py), given
# what the base expects from outside, played on a dedicated podman network
# with DNS, beside a throw-away Redis (k8s/podman/redis.yaml). Then:
#   1. every pod's containers are running (and none restarted);
#   2. each API and worker pod answers its livenessProbe and readinessProbe
#      (paths and ports read from the manifests, named ports resolved) and its
#      prometheus.io scrape annotation, from the host to the pod's IP;
#   3. the base's `--auth jwt` is on: /mcp without a token is 401;
#   4. a task (slow_compute, 2 s) created through one API pod with the presa
#      CLI and a throw-away issuer's token completes, followed through another
#      API pod, and a worker pod's log shows it ran it.
#   5. no secret is in any presa container's environment: they reach the pods
#      as files of the `secrets` volume (PRESA_REDIS_URL_FILE,
#      PRESA_STATE_SECRET_FILE), mounted read-only, readable by uid 65532 only
#      through its group (mode 0440, group 65532 as fsGroup makes it).
# Prints one line per check; on failure the pods' logs; cleans up on exit
# (podman kube down, the network, the JWKS server, the secret files).
#
# What the base expects from outside, supplied here:
#   - a Redis: k8s/podman/redis.yaml (pod `redis`, reached by its DNS name);
#   - Secret presa-secrets: PRESA_REDIS_URL=redis://redis:6379, a fresh random
#     PRESA_STATE_SECRET (REDIS_ADDRESS too, though only KEDA reads it);
#   - ConfigMap presa-auth: the issuer and resource URL of a throw-away issuer
#     (cargo's dev_issuer example: fresh keys, one token), and PRESA_JWKS_URL =
#     http://GATEWAY:PORT/jwks.json, a JWKS server this script runs on the
#     network's gateway address (the base's URL path unchanged, plain http
#     being accepted inside a trusted network);
#   - the image: every container whose image is `presa[:tag]` runs PRESA_IMAGE.
# What podman 4.3 cannot do, and what the played copy (never k8s/base) changes:
#   - kinds: it plays Pod, Deployment, ConfigMap and PersistentVolumeClaim only:
#     Service, Ingress, HorizontalPodAutoscaler, PodDisruptionBudget,
#     NetworkPolicy, ServiceAccount and the KEDA objects are dropped (listed);
#   - Secret volumes: it crashes on a `secret` volume without `optional`, and
#     with one writes the Secret's data still base64-encoded, ignores `items`,
#     `defaultMode` and `stringData`, and keeps the files in a named volume
#     after `kube down`. So each Secret leaves the played copy, and each secret
#     volume becomes a hostPath directory of this run holding what the kubelet
#     would write: the items' files, decoded, in defaultMode, group fsGroup
#     (podman ignores fsGroup; runAsGroup applies). A secretKeyRef env is an
#     error (the base takes secrets as files only);
#   - ports: it publishes every containerPort on the host (hostPort =
#     containerPort), so two replicas would collide on 8080: `ports` are
#     removed from the played copy (pods are reached on the network by IP);
#   - probes: it turns an httpGet livenessProbe into a healthcheck that runs
#     `curl -f ... || exit 1` through /bin/sh in the container, which presa's
#     shell-less image cannot run, and ignores readinessProbe: probes are
#     removed from the played copy and checked from the host instead (2.);
#   - preStop, terminationGracePeriodSeconds, topologySpreadConstraints,
#     runAsNonRoot, seccompProfile and the pod-level securityContext are
#     ignored; runAsUser/runAsGroup, readOnlyRootFilesystem,
#     allowPrivilegeEscalation, capabilities, resources and fieldRef apply;
#   - replicas: podman 4.3 starts one pod per replica (NAME-pod-0, -1, ...);
#     newer podman versions start one per Deployment. Both pass.
#
# Usage: tests/image/kube-check.sh
# Environment: PRESA_IMAGE (default localhost/presa:dev; build it with
# deploy/image.sh), REDIS_IMAGE (default docker.io/library/redis:7.2; built by
# deploy/local-images.sh redis when absent and redis-server is installed),
# PRESA_BIN (the presa CLI) and DEV_ISSUER (presa-testkit's dev_issuer example;
# both default to building them with cargo), KUBE_CHECK_TIMEOUT
# (seconds to wait for pods and probes, default 60).
# Needs podman (rootful, netavark + aardvark-dns), curl, python3 with pyyaml
# (as k8s/render.py does), cargo.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ -n "${PRESA_BIN:-}" ] && PRESA_BIN=$(realpath "$PRESA_BIN")
[ -n "${DEV_ISSUER:-}" ] && DEV_ISSUER=$(realpath "$DEV_ISSUER")
cd "$REPO"
PRESA_IMAGE=${PRESA_IMAGE:-localhost/presa:dev}
REDIS_IMAGE=${REDIS_IMAGE:-docker.io/library/redis:7.2}
TIMEOUT=${KUBE_CHECK_TIMEOUT:-60}
NET=presa-kube-check-$$

log() { echo "[kube-check] $*"; }
ok() { echo "[kube-check] ok: $*"; }
die() { echo "[kube-check] FAIL: $*" >&2; exit 1; }

WORK=$(mktemp -d -t presa-kube-check.XXXXXX)
PLAYED=()
JWKS_PID=""
NET_CREATED=no
START=$SECONDS
CHECKS_START=$SECONDS

# Pods on this run's network (so never anyone else's).
our_pods() { podman pod ps --filter "network=$NET" --format '{{.Name}}' 2>/dev/null | sort; }
app_containers() { podman ps -a --filter "pod=$1" --format '{{.Names}}' | grep -v -- '-infra$' || true; }

cleanup() {
  local rc=$? pod ctr f i
  trap - EXIT INT TERM
  if [ $rc -ne 0 ] && [ $NET_CREATED = yes ]; then
    echo "--- pods' logs (tails) ---" >&2
    for pod in $(our_pods); do
      for ctr in $(app_containers "$pod"); do
        echo "== $ctr ($(podman inspect --format '{{.State.Status}}, exit {{.State.ExitCode}}, restarts {{.RestartCount}}' "$ctr" 2>/dev/null))" >&2
        podman logs --tail 40 "$ctr" >&2 2>&1 || true
      done
    done
    [ -s "$WORK/jwks.log" ] && { echo "== JWKS server" >&2; tail -n 20 "$WORK/jwks.log" >&2; }
  fi
  for ((i = ${#PLAYED[@]} - 1; i >= 0; i--)); do
    podman kube down "${PLAYED[$i]}" >/dev/null 2>&1 || true
  done
  if [ $NET_CREATED = yes ]; then
    # What kube down left (a pod that failed half-way through kube play).
    for pod in $(our_pods); do podman pod rm -f "$pod" >/dev/null 2>&1 || true; done
    podman network rm -f "$NET" >/dev/null 2>&1 || true
  fi
  [ -n "$JWKS_PID" ] && kill "$JWKS_PID" 2>/dev/null || true
  rm -rf "$WORK"
  if [ $rc -eq 0 ]; then
    log "all checks passed in $((SECONDS - CHECKS_START)) s ($((SECONDS - START)) s in all)"
  else
    log "FAILED after $((SECONDS - START)) s (exit $rc)"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS CMD...: run CMD every 0.5 s until it succeeds.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}

# --- images, CLI, issuer -----------------------------------------------------------------
python3 -c 'import yaml' 2>/dev/null || die "python3 lacks pyyaml (k8s/render.py needs it): pip install pyyaml"
podman image exists "$PRESA_IMAGE" ||
  die "image $PRESA_IMAGE not found: build it with deploy/image.sh (or set PRESA_IMAGE)"
if ! podman image exists "$REDIS_IMAGE"; then
  if [ "$REDIS_IMAGE" = docker.io/library/redis:7.2 ] && command -v redis-server >/dev/null; then
    deploy/local-images.sh redis >/dev/null # tags its stand-in docker.io/library/redis:7.2
  else
    podman pull -q "$REDIS_IMAGE" >/dev/null
  fi
fi
BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug
if [ -z "${PRESA_BIN:-}" ]; then
  cargo build -q -p presa-cli
  PRESA_BIN=$BIN/presa
fi
if [ -z "${DEV_ISSUER:-}" ]; then
  cargo build -q -p presa-testkit --example dev_issuer
  DEV_ISSUER=$BIN/examples/dev_issuer
fi
log "images, presa CLI and dev_issuer ready in $((SECONDS - START)) s"
CHECKS_START=$SECONDS

# --- the network and Redis -----------------------------------------------------------------
podman network create "$NET" >/dev/null
NET_CREATED=yes
GATEWAY=$(podman network inspect "$NET" --format '{{range .Subnets}}{{.Gateway}}{{end}}')
[ -n "$GATEWAY" ] || die "network $NET has no gateway address"

# The played copy of a manifest set: see the header. Writes OUT.yaml (to play),
# OUT.secrets/POD/VOLUME/ (the secret volumes' files), OUT.probes.tsv; prints what it did.
cat >"$WORK/play.py" <<'PY'
import base64, json, os, sys
import yaml
sys.path.insert(0, os.path.join(os.environ["REPO"], "k8s"))
from render import split_image  # the renderer's own image-name parsing

src, out = sys.argv[1], sys.argv[2]
image = os.environ.get("IMAGE", "")
supply = json.loads(os.environ.get("SUPPLY", "{}"))
PLAYABLE = {"Pod", "Deployment", "ConfigMap", "PersistentVolumeClaim"}
docs = [d for d in yaml.safe_load_all(open(src, encoding="utf-8")) if d]
ident = lambda o: f"{o['kind']}/{o['metadata']['name']}"
problems, played, secrets, dropped, probes, replaced = [], [], [], [], [], 0
secret_values, secret_volumes = {}, []

for o in docs:
    want = supply.pop(ident(o), None)
    if want is not None:
        field = "data" if o["kind"] == "ConfigMap" else "stringData"
        have = {**(o.get("data") or {}), **(o.get("stringData") or {})}
        for k, v in want.items():
            if k not in have:
                problems.append(f"{ident(o)} has no key {k}: the base changed, update this check")
            if o["kind"] == "Secret":
                (o.get("data") or {}).pop(k, None)
            o.setdefault(field, {})[k] = v
    if o["kind"] == "Secret":
        values = {k: base64.b64decode(v) for k, v in (o.get("data") or {}).items()}
        values.update({k: str(v).encode() for k, v in (o.get("stringData") or {}).items()})
        left = sorted(k for k, v in values.items() if b"CHANGE-ME" in v)
        if left:
            problems.append(f"{ident(o)}: placeholders left in {left}: supply them")
        secret_values[o["metadata"]["name"]] = values
        secrets.append(ident(o))
        continue
    if o["kind"] not in PLAYABLE:
        dropped.append(ident(o))
        continue
    spec = o["spec"]["template"]["spec"] if o["kind"] == "Deployment" else o.get("spec")
    for v in (spec or {}).get("volumes", []) if o["kind"] in ("Pod", "Deployment") else []:
        sv = v.get("secret")
        if sv is None:
            continue
        values = secret_values.get(sv["secretName"])
        if values is None:
            problems.append(f"{ident(o)}: volume {v['name']} names Secret {sv['secretName']}, not in {src}")
            continue
        # What the kubelet writes: each item's value, decoded, in defaultMode, group fsGroup.
        directory = os.path.realpath(f"{out}.secrets/{o['metadata']['name']}/{v['name']}")
        os.makedirs(directory)
        gid = (spec.get("securityContext") or {}).get("fsGroup", 0)
        for item in sv.get("items") or [{"key": k, "path": k} for k in values]:
            if item["key"] not in values:
                problems.append(f"{ident(o)}: volume {v['name']}: Secret {sv['secretName']} has no key {item['key']}")
                continue
            path = os.path.join(directory, item["path"])
            with open(path, "wb") as f:
                f.write(values[item["key"]])
            os.chown(path, 0, gid)
            os.chmod(path, item.get("mode", sv.get("defaultMode", 0o644)))
        v.pop("secret")
        v["hostPath"] = {"path": directory, "type": "Directory"}
        secret_volumes.append(f"{o['metadata']['name']}/{v['name']}")
    for c in (spec or {}).get("containers", []) if o["kind"] in ("Pod", "Deployment") else []:
        if any((e.get("valueFrom") or {}).get("secretKeyRef") for e in c.get("env") or []):
            problems.append(f"{ident(o)} {c['name']}: a secretKeyRef env: the base takes secrets as files only")
        if image and split_image(c["image"])[0] == "presa":
            c["image"] = image
            replaced += 1
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            probe = c.pop(kind, None)
            if probe is None:
                continue
            get = probe.get("httpGet")
            if not get:
                problems.append(f"{ident(o)} {c['name']}: {kind} is not httpGet, which this check cannot make")
                continue
            port = get["port"] if isinstance(get["port"], int) else ports.get(get["port"])
            if port is None:
                problems.append(f"{ident(o)} {c['name']}: {kind} names port {get['port']}, which it lacks")
                continue
            probes.append([o["metadata"]["name"], kind, get.get("scheme", "HTTP").lower(), str(port), get.get("path", "/")])
        c.pop("ports", None)
    if o["kind"] == "Deployment":
        ann = o["spec"]["template"]["metadata"].get("annotations") or {}
        if ann.get("prometheus.io/scrape") == "true":
            probes.append([o["metadata"]["name"], "metrics", "http", ann.get("prometheus.io/port", ""),
                           ann.get("prometheus.io/path", "/metrics")])
    played.append(o)

for name in supply:
    problems.append(f"{name} is not in {src}: the base changed, update this check")
if image and not replaced:
    problems.append(f"no container of {src} runs the image `presa`")
if problems:
    sys.exit("\n".join(problems))
with open(f"{out}.yaml", "w") as f:
    yaml.safe_dump_all(played, f, sort_keys=False)
with open(f"{out}.probes.tsv", "w") as f:
    f.writelines("\t".join(p) + "\n" for p in probes)
print(f"{len(docs)} objects: playing {', '.join(map(ident, played))}"
      + (f"; Secrets as files of the secret volumes {', '.join(secret_volumes)}: {', '.join(secrets)}"
         if secrets else "")
      + (f"; dropped (podman cannot play them): {', '.join(dropped)}" if dropped else ""))
PY
export REPO

python3 - "$REDIS_IMAGE" k8s/podman/redis.yaml "$WORK/redis.src.yaml" <<'PY'
import sys, yaml
(pod,) = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
pod["spec"]["containers"][0]["image"] = sys.argv[1]
yaml.safe_dump(pod, open(sys.argv[3], "w"), sort_keys=False)
PY
python3 "$WORK/play.py" "$WORK/redis.src.yaml" "$WORK/redis" >/dev/null
REDIS_POD=$(python3 -c 'import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"]["name"])' "$WORK/redis.yaml")
podman pod exists "$REDIS_POD" && die "a pod named $REDIS_POD exists already (a previous run?): podman pod rm -f $REDIS_POD"
PLAYED+=("$WORK/redis.yaml")
podman kube play --network "$NET" "$WORK/redis.yaml" >"$WORK/play-redis.log" 2>&1 ||
  { cat "$WORK/play-redis.log" >&2; die "podman kube play of k8s/podman/redis.yaml"; }
redis_cli() { podman exec "$REDIS_POD-redis" redis-cli "$@"; }
wait_for "$TIMEOUT" sh -c "podman exec '$REDIS_POD-redis' redis-cli ping 2>/dev/null | grep -q PONG" ||
  die "Redis (pod $REDIS_POD) did not answer PING in $TIMEOUT s"

# --- a throw-away issuer and its JWKS server ------------------------------------------------
ISSUER=https://issuer.kube-check.invalid
RESOURCE=https://presa.kube-check.invalid/mcp
TOKEN=$("$DEV_ISSUER" "$ISSUER" "$RESOURCE" "$WORK/jwks.json")
# On the network's gateway address (the bridge exists now that Redis runs), any free port.
python3 - "$GATEWAY" "$WORK/jwks.json" "$WORK/jwks.port" >"$WORK/jwks.log" 2>&1 <<'PY' &
import http.server, sys
body = open(sys.argv[2], "rb").read()
class Jwks(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/jwks.json":
            return self.send_error(404)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, fmt, *args):
        print(self.client_address[0], fmt % args, flush=True)
server = http.server.ThreadingHTTPServer((sys.argv[1], 0), Jwks)
with open(sys.argv[3] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os; os.rename(sys.argv[3] + ".tmp", sys.argv[3])
server.serve_forever()
PY
JWKS_PID=$!
wait_for 10 test -s "$WORK/jwks.port" || die "the JWKS server did not start on $GATEWAY"
JWKS_URL=http://$GATEWAY:$(cat "$WORK/jwks.port")/jwks.json

# --- the base ------------------------------------------------------------------------------
python3 k8s/render.py k8s/base >"$WORK/base.src.yaml"
STATE_SECRET=$(python3 -c 'import secrets; print(secrets.token_urlsafe(48))')
SUPPLY=$(python3 -c 'import json,sys; a=sys.argv[1:]; print(json.dumps({
  "Secret/presa-secrets": {"PRESA_REDIS_URL": a[0], "PRESA_STATE_SECRET": a[1], "REDIS_ADDRESS": a[2]},
  "ConfigMap/presa-auth": {"PRESA_JWT_ISSUER": a[3], "PRESA_RESOURCE_URL": a[4], "PRESA_JWKS_URL": a[5]}}))' \
  "redis://$REDIS_POD:6379" "$STATE_SECRET" "$REDIS_POD:6379" "$ISSUER" "$RESOURCE" "$JWKS_URL")
summary=$(IMAGE=$PRESA_IMAGE SUPPLY=$SUPPLY python3 "$WORK/play.py" "$WORK/base.src.yaml" "$WORK/base") ||
  die "could not make a playable copy of k8s/base"
ok "rendered k8s/base with k8s/render.py, $summary"

DEPLOYMENTS=$(python3 -c 'import sys,yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Deployment": print(d["metadata"]["name"], d["spec"].get("replicas", 1))' "$WORK/base.yaml")
while read -r name replicas; do
  for ((i = 0; i < replicas; i++)); do
    podman pod exists "$name-pod-$i" && die "a pod named $name-pod-$i exists already (a previous run?): podman pod rm -f $name-pod-$i"
  done
done <<<"$DEPLOYMENTS"
PLAYED+=("$WORK/base.yaml")
podman kube play --network "$NET" "$WORK/base.yaml" >"$WORK/play-base.log" 2>&1 ||
  { cat "$WORK/play-base.log" >&2; die "podman kube play of the rendered base"; }

# --- 1. every pod's containers run -----------------------------------------------------------
all_running() {
  local pod ctr state
  for pod in $(our_pods); do
    for ctr in $(app_containers "$pod"); do
      state=$(podman inspect --format '{{.State.Status}}' "$ctr")
      [ "$state" = running ] || return 1
    done
  done
}
wait_for "$TIMEOUT" all_running || die "not every container is running after $TIMEOUT s"
PODS=$(our_pods | tr '\n' ' ')
per_deployment=""
while read -r name replicas; do
  n=$(our_pods | grep -c -- "^$name-pod-[0-9]*$" || true)
  [ "$n" -ge 1 ] || die "Deployment $name started no pod"
  per_deployment+="$name $n of $replicas replicas, "
done <<<"$DEPLOYMENTS"
ok "pods running on network $NET: ${PODS% } (${per_deployment%, })"

# Pod IP on our network; the pods of a Deployment.
pod_ip() {
  podman inspect --format "{{(index .NetworkSettings.Networks \"$NET\").IPAddress}}" \
    "$(podman pod inspect --format '{{.InfraContainerID}}' "$1")"
}
pods_of() { our_pods | grep -- "^$1-pod-[0-9]*$" || true; }

# --- 2. probes, from the host --------------------------------------------------------------
http_code() { curl -s -o /dev/null -m 3 -w '%{http_code}' "$@" || true; }
answers() { # URL: a probe's success, 200-399 as the kubelet counts it
  local code
  code=$(http_code "$1")
  [ "$code" -ge 200 ] 2>/dev/null && [ "$code" -lt 400 ]
}
while read -r name _; do
  grep -q "^$name	" "$WORK/base.probes.tsv" || die "Deployment $name has no probes in the manifests"
  for pod in $(pods_of "$name"); do
    ip=$(pod_ip "$pod")
    line=""
    while IFS=$'\t' read -r dep kind scheme port path; do
      [ "$dep" = "$name" ] || continue
      url=$scheme://$ip:$port$path
      wait_for "$TIMEOUT" answers "$url" || die "$pod: $kind GET $url answered $(http_code "$url"), not 2xx/3xx, for $TIMEOUT s"
      line+="${kind%Probe} :$port$path $(http_code "$url"), "
    done <"$WORK/base.probes.tsv"
    ok "$pod ($ip): ${line%, }"
  done
done <<<"$DEPLOYMENTS"

# --- 3. auth on --------------------------------------------------------------------------------
API_PODS=($(pods_of presa-api))
WORKER_PODS=($(pods_of presa-worker))
[ ${#API_PODS[@]} -ge 1 ] && [ ${#WORKER_PODS[@]} -ge 1 ] || die "no presa-api or no presa-worker pod"
api_port=$(awk -F'\t' '$1 == "presa-api" && $2 == "readinessProbe" {print $4}' "$WORK/base.probes.tsv")
URL1=http://$(pod_ip "${API_PODS[0]}"):$api_port/mcp
URL2=http://$(pod_ip "${API_PODS[${#API_PODS[@]} - 1]}"):$api_port/mcp
code=$(http_code -X POST -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}' "$URL1")
[ "$code" = 401 ] || die "POST $URL1 without a token answered $code, not 401 (is --auth jwt on?)"
fetched=$(grep -c 'GET /jwks.json' "$WORK/jwks.log" || true)
ok "auth: POST /mcp without a token is 401 (--auth jwt from ConfigMap presa-auth; JWKS served $fetched time(s) from $JWKS_URL)"

# --- 4. a task through the API pods, run by a worker ------------------------------------------
t0=$SECONDS
id=$(PRESA_TOKEN=$TOKEN timeout 30 "$PRESA_BIN" --url "$URL1" call slow_compute seconds=2 label=kube-check --detach </dev/null) ||
  die "presa call slow_compute through $URL1 failed"
[[ "$id" =~ ^[^[:space:]]+$ ]] || die "presa call --detach printed no task id: $id"
result=$(PRESA_TOKEN=$TOKEN timeout 60 "$PRESA_BIN" --url "$URL2" watch "$id" </dev/null) ||
  die "presa watch $id through $URL2 failed: $result"
grep -qF "Completed kube-check" <<<"$result" || die "task $id's result lacks 'Completed kube-check': $result"
runner=""
for pod in "${WORKER_PODS[@]}"; do
  # Its "task finished" line (JSON logs, or text): inside the task's span, which names the id.
  if podman logs "$pod-presa-worker" 2>&1 | grep -F -- "$id" | grep 'task finished' |
    grep -qE 'status"?[:=]"?completed'; then
    runner=$pod
    break
  fi
done
[ -n "$runner" ] || die "no worker pod's log shows task $id finished completed"
ok "task $id (slow_compute seconds=2): created through ${API_PODS[0]}, followed through" \
  "${API_PODS[${#API_PODS[@]} - 1]}, run by $runner; completed in $((SECONDS - t0)) s: $(tail -n1 <<<"$result")"

# --- read-only root, as on Kubernetes; secrets as files only -----------------------------------
# readOnlyRootFilesystem: `podman run --read-only` would mount a tmpfs on /tmp, /var/tmp and /run;
# kube play does not (as Kubernetes, where a writable path needs an emptyDir). So the run above
# proves presa needs no writable path, provided the containers really were that way: a read-only
# root, no tmpfs, and no volume but read-only ones (the secret files).
checked=0
for pod in $(our_pods); do
  for ctr in $(app_containers "$pod"); do
    [ "$(podman inspect --format '{{.Config.Image}}' "$ctr")" = "$PRESA_IMAGE" ] || continue
    fs=$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}} {{len .HostConfig.Tmpfs}}' "$ctr")
    [ "$fs" = "true 0" ] || die "$ctr: read-only root, tmpfs mounts: $fs, not true 0"
    mounts=$(podman inspect --format '{{range .Mounts}}{{.Destination}}:{{if .RW}}rw{{else}}ro{{end}} {{end}}' "$ctr")
    [ -n "$mounts" ] || die "$ctr: no volume mounted: where are its secret files?"
    grep -q ':rw' <<<"$mounts" && die "$ctr: a writable volume: $mounts"
    # 5. The secrets reached it as files: none of their values is in its environment.
    env=$(podman inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$ctr")
    grep -qF -e "$STATE_SECRET" -e "redis://" <<<"$env" && die "$ctr: a secret in its environment"
    grep -qE '^PRESA_(REDIS_URL|STATE_SECRET)=' <<<"$env" && die "$ctr: PRESA_REDIS_URL or PRESA_STATE_SECRET in its environment"
    grep -q '^PRESA_REDIS_URL_FILE=' <<<"$env" || die "$ctr: no PRESA_REDIS_URL_FILE in its environment"
    # An API pod that could not read its state secret's file would have exited; one without
    # PRESA_STATE_SECRET_FILE would warn that it uses a random key.
    if podman logs "$ctr" 2>&1 | grep -q 'PRESA_STATE_SECRET is not set'; then
      die "$ctr: runs on a random state key, not the one in its secret file"
    fi
    checked=$((checked + 1))
  done
done
ok "read-only root filesystem and secrets as files: the $checked presa containers ran with no writable path" \
  "(no tmpfs; read-only mounts only: ${mounts% }) and no secret in their environment"

# --- nothing restarted meanwhile ---------------------------------------------------------------
for pod in $(our_pods); do
  for ctr in $(app_containers "$pod"); do
    r=$(podman inspect --format '{{.State.Status}} {{.RestartCount}}' "$ctr")
    [ "$r" = "running 0" ] || die "$ctr: $r (status, restarts) at the end"
  done
done
ok "all containers still running, none restarted"
