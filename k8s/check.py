#!/usr/bin/env python3
"""Checks of presa's deployment files that schema validation cannot make.

    check.py manifests RENDERED.yaml BUILTIN_OUT.yaml [--external-secret NAME]...
                                                        # KEDA CRs + cross-references; writes the
                                                        # built-in kinds for kubernetes-validate
    check.py same A.yaml B.yaml                         # two renders describe the same objects
    check.py compose deploy/compose.yaml                # services, env and files of the compose stack

kubernetes-validate has no schema for custom resources (it only warns), so
the KEDA objects (ScaledObject, TriggerAuthentication) are checked here
against the fields KEDA documents, together with what ties the manifests
together: Secret keys, Service/Ingress/HPA/PDB targets, the stream names the
KEDA triggers watch, probes, hardening, grace periods, namespaces, and
secrets reaching presa's pods as files only (a secret volume, the `*_FILE`
variables), never as environment variables. A Secret named with
`--external-secret` is created outside the manifests (the production
overlay's presa-secrets): references to it are not checked. Exit status 1 on
any problem, each printed as `ERROR ...`.
"""

from __future__ import annotations

import os
import re
import sys

import yaml

CUSTOM_GROUPS = ("keda.sh/",)
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PersistentVolume", "StorageClass", "PriorityClass", "IngressClass"}
# presa's secrets as files: the variable naming the file of each (presa-runtime's *_FILE flags).
SECRET_FILE_VARS = ("PRESA_REDIS_URL_FILE", "PRESA_STATE_SECRET_FILE", "PRESA_REDIS_PASSWORD_FILE",
                    "PRESA_REDIS_SENTINEL_PASSWORD_FILE")
ERRORS: list[str] = []
EXTERNAL_SECRETS: set[str] = set()


def err(msg: str) -> None:
    ERRORS.append(msg)
    print(f"ERROR {msg}")


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def ident(o: dict) -> str:
    return f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}"


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env") or []}


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# --- KEDA custom resources -------------------------------------------------------------------

SO_SPEC = {"scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "idleReplicaCount",
           "minReplicaCount", "maxReplicaCount", "advanced", "triggers", "fallback"}
SO_TRIGGER = {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}
SO_ADVANCED = {"horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount", "scalingModifiers"}
SO_MODIFIERS = {"formula", "target", "activationTarget", "metricType"}
REDIS_STREAMS_META = {"address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv", "username",
                      "usernameFromEnv", "passwordFromEnv", "stream", "consumerGroup", "pendingEntriesCount",
                      "streamLength", "lagCount", "activationLagCount", "databaseIndex", "enableTLS", "unsafeSsl"}
TA_PARAMS_REDIS = {"address", "host", "port", "username", "password", "tls", "ca", "cert", "key", "keyPassword"}


def only(obj: dict, allowed: set[str], where: str) -> None:
    extra = set(obj or {}) - allowed
    if extra:
        err(f"{where}: unknown fields {sorted(extra)}")


def is_int_string(v) -> bool:
    return isinstance(v, str) and re.fullmatch(r"\d+", v) is not None


def check_trigger_auth(ta: dict, secrets: dict[str, dict]) -> set[str]:
    where = ident(ta)
    only(ta.get("spec"), {"secretTargetRef", "env", "podIdentity", "hashiCorpVault", "azureKeyVault",
                          "configMapTargetRef", "awsSecretManager", "gcpSecretManager"}, where + ".spec")
    params = set()
    for ref in (ta.get("spec") or {}).get("secretTargetRef") or []:
        only(ref, {"parameter", "name", "key"}, where + ".secretTargetRef[]")
        if not all(isinstance(ref.get(f), str) and ref.get(f) for f in ("parameter", "name", "key")):
            err(f"{where}: secretTargetRef needs parameter, name and key: {ref}")
            continue
        params.add(ref["parameter"])
        secret = secrets.get(ref["name"])
        if secret is None and ref["name"] in EXTERNAL_SECRETS:
            pass
        elif secret is None:
            err(f"{where}: Secret {ref['name']} is not in the rendered manifests")
        elif ref["key"] not in {**(secret.get("data") or {}), **(secret.get("stringData") or {})}:
            err(f"{where}: Secret {ref['name']} has no key {ref['key']}")
    unknown = params - TA_PARAMS_REDIS
    if unknown:
        err(f"{where}: parameters {sorted(unknown)} are not redis trigger parameters")
    return params


def check_scaled_object(so: dict, deployments: dict[str, dict], auths: dict[str, set[str]]) -> None:
    where = ident(so)
    spec = so.get("spec") or {}
    only(spec, SO_SPEC, where + ".spec")
    target = (spec.get("scaleTargetRef") or {}).get("name")
    if target not in deployments:
        err(f"{where}: scaleTargetRef {target!r} is not a Deployment in the rendered manifests")
    lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
        err(f"{where}: minReplicaCount {lo} / maxReplicaCount {hi}")
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        err(f"{where}: spec.triggers must be a non-empty list")
        return
    names = []
    for i, t in enumerate(triggers):
        tw = f"{where}.triggers[{i}]"
        only(t, SO_TRIGGER, tw)
        meta = t.get("metadata")
        if not isinstance(t.get("type"), str) or not isinstance(meta, dict):
            err(f"{tw}: needs type and metadata")
            continue
        if any(not isinstance(v, str) for v in meta.values()):
            err(f"{tw}: metadata values must be strings")
        if t.get("name"):
            names.append(t["name"])
        if t["type"] != "redis-streams":
            err(f"{tw}: no check for trigger type {t['type']} here")
            continue
        only(meta, REDIS_STREAMS_META, tw + ".metadata")
        if not meta.get("stream"):
            err(f"{tw}: stream is required")
        counts = [k for k in ("pendingEntriesCount", "streamLength", "lagCount") if k in meta]
        if meta.get("consumerGroup"):
            if "streamLength" in counts or not ({"pendingEntriesCount", "lagCount"} & set(counts)):
                err(f"{tw}: with consumerGroup set pendingEntriesCount (or lagCount), not streamLength")
        elif counts != ["streamLength"]:
            err(f"{tw}: without consumerGroup only streamLength applies")
        for k in counts:
            if not is_int_string(meta[k]):
                err(f"{tw}: {k} must be an integer string")
        auth = (t.get("authenticationRef") or {}).get("name")
        sources = {"address", "addressFromEnv", "host", "hostFromEnv"} & set(meta)
        if auth is not None:
            if auth not in auths:
                err(f"{tw}: TriggerAuthentication {auth} is not in the rendered manifests")
            else:
                sources |= auths[auth] & {"address", "host"}
        if not sources:
            err(f"{tw}: no Redis address (metadata address/host or a TriggerAuthentication parameter)")
    if len(set(names)) != len(names):
        err(f"{where}: trigger names are not unique")
    mods = (spec.get("advanced") or {}).get("scalingModifiers")
    only(spec.get("advanced"), SO_ADVANCED, where + ".advanced")
    if mods:
        only(mods, SO_MODIFIERS, where + ".advanced.scalingModifiers")
        used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", mods.get("formula", "")))
        if not used or used - set(names):
            err(f"{where}: formula uses {sorted(used - set(names))}, which are no trigger names")
        if set(names) - used:
            err(f"{where}: triggers {sorted(set(names) - used)} are left out of the formula")
        if not is_int_string(mods.get("target")):
            err(f"{where}: scalingModifiers.target must be an integer string")
        if mods.get("metricType", "AverageValue") not in ("AverageValue", "Value"):
            err(f"{where}: scalingModifiers.metricType")


# --- presa workloads -------------------------------------------------------------------------

def check_presa_deployment(d: dict, secrets: dict[str, dict]) -> dict[str, str]:
    where = ident(d)
    pod = d["spec"]["template"]["spec"]
    psc = pod.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True or psc.get("runAsUser") != 65532 \
            or (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        err(f"{where}: pod securityContext must be runAsNonRoot, runAsUser 65532, seccomp RuntimeDefault")
    if pod.get("automountServiceAccountToken") is not False:
        err(f"{where}: automountServiceAccountToken must be false")
    if not pod.get("topologySpreadConstraints"):
        err(f"{where}: no topologySpreadConstraints")
    mine = [c for c in pod["containers"] if c["name"] == d["metadata"]["name"]]
    if len(mine) != 1:
        err(f"{where}: needs one container named {d['metadata']['name']}")
        return {}
    c = mine[0]
    csc = c.get("securityContext") or {}
    if not (csc.get("readOnlyRootFilesystem") is True and csc.get("allowPrivilegeEscalation") is False
            and "ALL" in ((csc.get("capabilities") or {}).get("drop") or [])):
        err(f"{where}: container securityContext must be read-only, no privilege escalation, drop ALL")
    if not (c.get("resources") or {}).get("requests") or not (c.get("resources") or {}).get("limits"):
        err(f"{where}: resources requests and limits")
    env = env_of(c)
    if len(env) != len(c.get("env") or []):
        err(f"{where}: duplicate env names")
    # Secrets as files only: an environment variable is inherited by every child process
    # (a gateway's stdio upstream) and shown by `kubectl describe` (checkov CKV_K8S_35).
    for name, e in env.items():
        if (e.get("valueFrom") or {}).get("secretKeyRef"):
            err(f"{where}: env {name} takes a Secret (secretKeyRef): mount it and set its *_FILE variable instead")
    if any("secretRef" in f for f in c.get("envFrom") or []):
        err(f"{where}: envFrom takes a Secret (secretRef): mount it and set the *_FILE variables instead")
    files = check_secret_volumes(where, pod, c, secrets)
    values = {k: str(e["value"]) for k, e in env.items() if "value" in e}
    for name in SECRET_FILE_VARS:
        if name in values and values[name] not in files:
            err(f"{where}: {name}={values[name]} is no file of a mounted secret volume ({sorted(files) or 'none'})")
    for name in ("PRESA_REDIS_URL", "PRESA_STATE_SECRET", "PRESA_REDIS_PASSWORD", "PRESA_REDIS_SENTINEL_PASSWORD"):
        if name in env:
            err(f"{where}: env {name} holds a secret: use {name}_FILE and the secrets volume")
    if "PRESA_REDIS_URL_FILE" not in values and "PRESA_REDIS_SENTINELS" not in values:
        err(f"{where}: no Redis: PRESA_REDIS_URL_FILE (or PRESA_REDIS_SENTINELS) must be set")
    listen = values.get("PRESA_LISTEN") or values.get("PRESA_WORKER_LISTEN")
    if not listen or not listen.startswith("0.0.0.0:"):
        err(f"{where}: PRESA_LISTEN / PRESA_WORKER_LISTEN must listen on 0.0.0.0")
        return values
    port = int(listen.rsplit(":", 1)[1])
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
    if port not in ports.values():
        err(f"{where}: listen port {port} is not a containerPort")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (c.get(probe) or {}).get("httpGet") or {}
        pport = ports.get(get.get("port"), get.get("port"))
        if get.get("path") != path or pport != port:
            err(f"{where}: {probe} must GET {path} on port {port}")
    ann = d["spec"]["template"]["metadata"].get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(port) \
            or ann.get("prometheus.io/path") != "/metrics":
        err(f"{where}: prometheus.io scrape annotations must name port {port} and /metrics")
    grace_ms = int(values.get("PRESA_GRACE_MS", "20000"))
    pre_stop = (((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds", 0)
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    if tgps * 1000 < grace_ms + pre_stop * 1000 + 10_000:
        err(f"{where}: terminationGracePeriodSeconds {tgps} leaves under 10 s beyond preStop + PRESA_GRACE_MS")
    return values


def check_secret_volumes(where: str, pod: dict, c: dict, secrets: dict[str, dict]) -> set[str]:
    """The secret volumes `c` mounts; returns the paths of the files they give it."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    psc = pod.get("securityContext") or {}
    files = set()
    for m in c.get("volumeMounts") or []:
        v = volumes.get(m["name"])
        if v is None:
            err(f"{where}: volumeMount {m['name']} names no volume of the pod")
            continue
        src = v.get("secret")
        if src is None:
            continue
        if m.get("readOnly") is not True:
            err(f"{where}: secret volume {m['name']} must be mounted readOnly")
        if src.get("optional") is True:
            err(f"{where}: secret volume {m['name']} is optional: a pod without its secrets must not start")
        # Files owned root:fsGroup: presa (uid 65532) reads them through the group, no other uid at all.
        mode = src.get("defaultMode", 0o644)
        if mode & 0o077 != 0o040 or psc.get("fsGroup") != psc.get("runAsGroup"):
            err(f"{where}: secret volume {m['name']}: defaultMode {oct(mode)} with fsGroup {psc.get('fsGroup')} "
                f"(want 0440 and fsGroup = runAsGroup {psc.get('runAsGroup')}: readable by presa's group only)")
        secret = secrets.get(src.get("secretName"))
        keys = None if secret is None else set({**(secret.get("data") or {}), **(secret.get("stringData") or {})})
        if secret is None and src.get("secretName") not in EXTERNAL_SECRETS:
            err(f"{where}: secret volume {m['name']}: Secret {src.get('secretName')} is not in the rendered manifests")
        items = src.get("items")
        if items is None and keys is None:
            err(f"{where}: secret volume {m['name']} of an external Secret must list its items")
            items = []
        for item in items if items is not None else [{"key": k, "path": k} for k in sorted(keys)]:
            if keys is not None and item["key"] not in keys:
                err(f"{where}: secret volume {m['name']}: Secret {src['secretName']} has no key {item['key']}")
            files.add(m["mountPath"].rstrip("/") + "/" + item["path"])
    return files


def check_manifests(rendered: str, builtin_out: str) -> None:
    objs = load(rendered)
    seen = set()
    for o in objs:
        key = (o.get("apiVersion"), o.get("kind"), (o.get("metadata") or {}).get("namespace"),
               (o.get("metadata") or {}).get("name"))
        if None in (key[0], key[1], key[3]):
            err(f"{rendered}: object without apiVersion, kind or metadata.name: {key}")
        if key[1] not in CLUSTER_SCOPED and key[2] in (None, "", "default"):
            err(f"{ident(o)}: in namespace {key[2]!r}: every object needs a namespace of its own (kustomization `namespace:`)")
        if key in seen:
            err(f"{rendered}: duplicate {key}")
        seen.add(key)
    custom = [o for o in objs if str(o.get("apiVersion", "")).startswith(CUSTOM_GROUPS)]
    builtin = [o for o in objs if o not in custom]
    with open(builtin_out, "w", encoding="utf-8") as f:
        yaml.safe_dump_all(builtin, f, sort_keys=True)

    by_kind: dict[str, dict[str, dict]] = {}
    for o in objs:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    secrets = by_kind.get("Secret", {})
    for name in EXTERNAL_SECRETS & set(secrets):
        err(f"Secret {name} is rendered, yet named external: the overlay must leave it out ($patch: delete)")
    deployments = by_kind.get("Deployment", {})

    auths = {}
    for o in custom:
        if o["kind"] == "TriggerAuthentication":
            auths[o["metadata"]["name"]] = check_trigger_auth(o, secrets)
    for o in custom:
        if o["kind"] == "ScaledObject":
            check_scaled_object(o, deployments, auths)
        elif o["kind"] != "TriggerAuthentication":
            err(f"{ident(o)}: custom resource without a check in k8s/check.py")

    # presa's two Deployments.
    api, worker = deployments.get("presa-api"), deployments.get("presa-worker")
    if not api or not worker:
        err("Deployments presa-api and presa-worker are both required")
        return
    api_env = check_presa_deployment(api, secrets)
    worker_env = check_presa_deployment(worker, secrets)
    if "PRESA_STATE_SECRET_FILE" not in api_env:
        err("presa-api: no PRESA_STATE_SECRET_FILE: each pod would use a random key, and no pod could "
            "read another's requestState")
    for k in ("PRESA_REDIS_PREFIX", "PRESA_PARTITIONS", "PRESA_REDIS_CLUSTER"):
        if api_env.get(k) != worker_env.get(k):
            err(f"{k} differs between presa-api ({api_env.get(k)}) and presa-worker ({worker_env.get(k)})")
    if not any("lifecycle" in c for c in api["spec"]["template"]["spec"]["containers"]):
        err("presa-api: no preStop hook to let endpoints drain before SIGTERM")

    # Autoscalers: every target exists; no Deployment has two.
    owners: dict[str, list[str]] = {}
    for h in by_kind.get("HorizontalPodAutoscaler", {}).values():
        t = h["spec"]["scaleTargetRef"]["name"]
        owners.setdefault(t, []).append(ident(h))
        if t not in deployments:
            err(f"{ident(h)}: target {t} is not a Deployment")
    for so in by_kind.get("ScaledObject", {}).values():
        owners.setdefault(so["spec"]["scaleTargetRef"]["name"], []).append(ident(so))
        prefix = worker_env.get("PRESA_REDIS_PREFIX", "presa")
        parts = int(worker_env.get("PRESA_PARTITIONS", "16"))
        want = {f"{prefix}:{{p{n:02d}}}:work" for n in range(parts)}
        got = [t["metadata"].get("stream") for t in so["spec"]["triggers"] if t.get("type") == "redis-streams"]
        if sorted(got) != sorted(want):
            err(f"{ident(so)}: streams {sorted(got)} are not the {parts} partition streams {prefix}:{{pNN}}:work")
        for t in so["spec"]["triggers"]:
            if t["metadata"].get("consumerGroup", "workers") != "workers":
                err(f"{ident(so)}: presa's consumer group is `workers`")
    for t, who in owners.items():
        if len(who) > 1:
            err(f"Deployment {t} is scaled by more than one autoscaler: {who}")
    for name in ("presa-api", "presa-worker"):
        if name not in owners:
            err(f"Deployment {name} has no autoscaler")

    # Services, PDBs, Ingress backends.
    workloads = list(deployments.values()) + list(by_kind.get("StatefulSet", {}).values())

    def pods_for(selector: dict) -> list[dict]:
        return [w for w in workloads if selects(selector, w["spec"]["template"]["metadata"].get("labels") or {})]

    for s in by_kind.get("Service", {}).values():
        pods = pods_for(s["spec"].get("selector") or {})
        if not pods:
            err(f"{ident(s)}: selector matches no workload")
        for p in s["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            names = {cp.get("name") for w in pods for c in w["spec"]["template"]["spec"]["containers"]
                     for cp in c.get("ports") or []}
            nums = {cp["containerPort"] for w in pods for c in w["spec"]["template"]["spec"]["containers"]
                    for cp in c.get("ports") or []}
            if tp not in names | nums:
                err(f"{ident(s)}: targetPort {tp} is no container port of its pods")
    for pdb in by_kind.get("PodDisruptionBudget", {}).values():
        if not pods_for(pdb["spec"]["selector"]["matchLabels"]):
            err(f"{ident(pdb)}: selector matches no workload")
    for ing in by_kind.get("Ingress", {}).values():
        for rule in ing["spec"].get("rules") or []:
            for path in rule["http"]["paths"]:
                svc = path["backend"]["service"]
                target = by_kind.get("Service", {}).get(svc["name"])
                port = svc["port"].get("name") or svc["port"].get("number")
                if target is None or port not in {p.get("name") for p in target["spec"]["ports"]} | \
                        {p["port"] for p in target["spec"]["ports"]}:
                    err(f"{ident(ing)}: backend {svc['name']}:{port} does not exist")
    print(f"checked {len(objs)} objects ({len(custom)} KEDA custom resources) of {rendered}")


# --- two renders, compose --------------------------------------------------------------------

def canonical(v):
    if isinstance(v, dict):
        return {k: canonical(x) for k, x in v.items()}
    if isinstance(v, list):
        items = [canonical(x) for x in v]
        if items and all(isinstance(x, dict) and "name" in x for x in items):
            items.sort(key=lambda x: str(x["name"]))
        return items
    return v


def check_same(a: str, b: str) -> None:
    def index(path):
        return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): canonical(o) for o in load(path)}
    ia, ib = index(a), index(b)
    for k in sorted(set(ia) | set(ib), key=str):
        if ia.get(k) != ib.get(k):
            err(f"{k}: {a} and {b} differ:\n  {ia.get(k)}\n  {ib.get(k)}")
    print(f"{a} and {b}: {len(ia)} objects, {'same' if not ERRORS else 'DIFFERENT'}")


def compose_defaults(v):
    """Compose's `${VAR:-default}` / `${VAR-default}` / `${VAR}` as run with nothing set."""
    if isinstance(v, dict):
        return {k: compose_defaults(x) for k, x in v.items()}
    if isinstance(v, list):
        return [compose_defaults(x) for x in v]
    if isinstance(v, str):
        return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}", lambda m: m.group(1) or "", v)
    return v


def check_compose(path: str) -> None:
    base = os.path.dirname(os.path.abspath(path))
    (doc,) = load(path)
    # Images, ports and settings may come from the environment: check their defaults.
    doc = compose_defaults(doc)
    services = doc.get("services") or {}
    want = {"redis", "api1", "api2", "worker1", "worker2", "nginx", "otel-collector", "jaeger"}
    if set(services) != want:
        err(f"{path}: services {sorted(services)}, expected {sorted(want)}")
        return
    redis = services["redis"]
    if not str(redis.get("image", "")).startswith("redis:7.2") or "--appendonly" not in redis.get("command", []) \
            or not any(str(v).endswith(":/data") for v in redis.get("volumes", [])):
        err(f"{path}: redis must be redis:7.2 with --appendonly yes on a /data volume")
    for name in ("api1", "api2", "worker1", "worker2"):
        s = services[name]
        env = s.get("environment") or {}
        need = {"PRESA_REDIS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"}
        need |= {"PRESA_LISTEN", "PRESA_STATE_SECRET", "PRESA_ALLOWED_ORIGINS"} if name.startswith("api") \
            else {"PRESA_WORKER_LISTEN", "PRESA_WORKER_ID"}
        if need - set(env):
            err(f"{path}: {name} lacks {sorted(need - set(env))}")
        # Traces are opt-in (the `tracing` profile): no endpoint, or the collector's.
        if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") not in ("", "http://otel-collector:4317"):
            err(f"{path}: {name} must export to http://otel-collector:4317 (or nowhere by default)")
        build = s.get("build") or {}
        if not os.path.isfile(os.path.join(base, build.get("context", "."), build.get("dockerfile", "Dockerfile"))):
            err(f"{path}: {name}: no Dockerfile at its build context")
        # The image's CMD is presa-api (no ENTRYPOINT): a worker replaces either.
        if name.startswith("worker") and (s.get("entrypoint") or s.get("command")) != ["/usr/local/bin/presa-worker"]:
            err(f"{path}: {name} must run /usr/local/bin/presa-worker")
        grace = str(s.get("stop_grace_period", "10s"))
        if not grace.endswith("s") or int(grace[:-1]) * 1000 <= int(env.get("PRESA_GRACE_MS", "20000")):
            err(f"{path}: {name}: stop_grace_period {grace} must exceed PRESA_GRACE_MS")
    ids = {services[w]["environment"].get("PRESA_WORKER_ID") for w in ("worker1", "worker2")}
    if len(ids) != 2:
        err(f"{path}: worker ids must differ")
    for name, s in services.items():
        for v in s.get("volumes") or []:
            src = str(v).split(":", 1)[0]
            if src.startswith((".", "/")) and not os.path.exists(os.path.join(base, src)):
                err(f"{path}: {name} mounts missing {src}")
    nginx_conf = open(os.path.join(base, "nginx", "compose.conf"), encoding="utf-8").read()
    for must in ("server api1:8080", "server api2:8080", "listen 8080", "proxy_buffering off"):
        if must not in nginx_conf:
            err(f"nginx/compose.conf lacks `{must}`")
    if "127.0.0.1:8080:8080" not in services["nginx"].get("ports", []):
        err(f"{path}: nginx must be published on 127.0.0.1:8080")
    (otel,) = load(os.path.join(base, "otel-collector.yaml"))
    pipe = otel["service"]["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        for name in pipe[kind]:
            if name not in (otel.get(kind) or {}):
                err(f"otel-collector.yaml: pipeline {kind[:-1]} {name} is not defined")
    if "4317" not in str(otel["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]):
        err("otel-collector.yaml: OTLP gRPC receiver must listen on 4317")
    if not any("jaeger:4317" == e.get("endpoint") for e in otel["exporters"].values()):
        err("otel-collector.yaml: no exporter to jaeger:4317")
    print(f"{path}: {len(services)} services checked")


def main(argv: list[str]) -> int:
    cmds = {"manifests": (check_manifests, 2), "same": (check_same, 2), "compose": (check_compose, 1)}
    while len(argv) >= 2 and argv[-2] == "--external-secret" and argv[1] == "manifests":
        EXTERNAL_SECRETS.add(argv.pop())
        argv.pop()
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    cmds[argv[1]][0](*argv[2:])
    return 1 if ERRORS else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
