#!/usr/bin/env python3
"""Render a kustomization offline: the small kustomize subset presa's k8s/ uses.

k8s/validate.sh prefers the real tool (`kubectl kustomize`) and falls back to
this file where kubectl is missing; where both exist it checks that they agree,
so this subset stays honest. Usage:

    python3 k8s/render.py k8s/overlays/dev > dev.yaml

Supported, exactly (anything else in a kustomization.yaml is an error, so the
manifests cannot drift outside what is rendered correctly here):

- `resources`: YAML files (several documents each) and directories holding a
  kustomization.yaml, rendered recursively first.
- `patches`: `- path: FILE` only, each FILE one strategic-merge patch that names
  its target by kind + metadata.name (exactly one match). Maps merge
  recursively, `null` deletes a key (a map it empties goes too), lists with a Kubernetes merge key
  (containers and env by `name`, volumeMounts by `mountPath`, container ports by
  `containerPort`, ...) merge item by item with the patch's items first, every
  other list is replaced. Only built-in kinds listed in PATCHABLE. The one
  `$patch` directive: `$patch: delete` at the top of a patch (beside apiVersion,
  kind and metadata.name only) removes its target from the output.
- `namespace`: set on every namespaced object (not on Namespace itself).
- `labels`: `- pairs: {...}` added to metadata.labels only (no
  includeSelectors / includeTemplates).
- `images`: `- name: N` with `newName` and/or one of `newTag` and `digest`
  (`sha256:...`: the image becomes `NAME@sha256:...`, its tag dropped),
  applied to the containers and initContainers of pod templates.

Transformations run in kustomize's order: nested resources, patches,
namespace, labels, images. Output: Namespaces first, then the input order,
keys sorted.
"""

from __future__ import annotations

import copy
import os
import sys

import yaml

KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "patches", "namespace", "labels", "images"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PersistentVolume", "StorageClass", "PriorityClass", "IngressClass"}
PATCHABLE = {"Deployment", "StatefulSet", "DaemonSet", "Secret", "ConfigMap", "Service", "Ingress",
             "HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceAccount", "NetworkPolicy"}
# Strategic-merge keys of the lists this subset may patch (field name -> key).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "imagePullSecrets": "name",
    "volumeMounts": "mountPath", "volumeDevices": "devicePath",
}


class RenderError(Exception):
    pass


def load_docs(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def merge_key(field: str, items: list) -> str | None:
    if field == "ports" and items and all(isinstance(i, dict) for i in items):
        # Container ports merge by containerPort, Service ports by port.
        return "containerPort" if "containerPort" in items[0] else "port"
    return MERGE_KEYS.get(field)


def smp(dest, patch, field: str = ""):
    """Strategic merge of `patch` into `dest` (both already parsed YAML)."""
    if isinstance(patch, dict):
        if any(k.startswith("$") for k in patch):
            raise RenderError(f"patch directives are not supported: {sorted(patch)}")
        out = dict(dest) if isinstance(dest, dict) else {}
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
                continue
            merged = smp(out.get(k), v, k)
            if merged == {} and isinstance(v, dict) and None in v.values():
                out.pop(k, None)  # emptied by deletions: gone, as kustomize leaves it
            else:
                out[k] = merged
        return out
    if isinstance(patch, list):
        key = merge_key(field, patch)
        if key is None or not isinstance(dest, list):
            return copy.deepcopy(patch)
        by_key = {d.get(key): d for d in dest}
        merged = [smp(by_key.get(p[key]), p, "") for p in patch]
        patched = {p[key] for p in patch}
        return merged + [copy.deepcopy(d) for d in dest if d.get(key) not in patched]
    return copy.deepcopy(patch)


def pod_specs(obj: dict):
    spec = obj.get("spec") or {}
    if "containers" in spec:
        yield spec
    tmpl = (spec.get("template") or {}).get("spec")
    if tmpl:
        yield tmpl
    job = (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    if job:
        yield job


def split_image(image: str) -> tuple[str, str]:
    """`name[:tag][@digest]` -> (name, rest-with-separator)."""
    at = image.find("@")
    base, digest = (image[:at], image[at:]) if at >= 0 else (image, "")
    colon = base.rfind(":")
    if colon > base.rfind("/"):
        return base[:colon], base[colon:] + digest
    return base, digest


def render(directory: str) -> list[dict]:
    kfile = os.path.join(directory, "kustomization.yaml")
    if not os.path.isfile(kfile):
        raise RenderError(f"{directory}: no kustomization.yaml")
    (k,) = load_docs(kfile)
    unknown = set(k) - KUSTOMIZATION_KEYS
    if unknown:
        raise RenderError(f"{kfile}: unsupported kustomization fields {sorted(unknown)} (see render.py)")

    objs: list[dict] = []
    for res in k.get("resources") or []:
        path = os.path.normpath(os.path.join(directory, res))
        objs.extend(render(path) if os.path.isdir(path) else load_docs(path))

    for p in k.get("patches") or []:
        if set(p) != {"path"}:
            raise RenderError(f"{kfile}: only `- path: FILE` patches are supported, got {p}")
        for patch in load_docs(os.path.join(directory, p["path"])):
            kind, name = patch.get("kind"), (patch.get("metadata") or {}).get("name")
            if kind not in PATCHABLE:
                raise RenderError(f"{p['path']}: patching kind {kind} is not supported")
            hits = [i for i, o in enumerate(objs) if o.get("kind") == kind and o["metadata"].get("name") == name]
            if len(hits) != 1:
                raise RenderError(f"{p['path']}: {kind}/{name} matches {len(hits)} resources, not 1")
            target = objs[hits[0]]
            if patch.get("apiVersion") != target.get("apiVersion"):
                raise RenderError(f"{p['path']}: apiVersion {patch.get('apiVersion')} != {target.get('apiVersion')}")
            if patch.get("$patch") == "delete":
                if set(patch) != {"$patch", "apiVersion", "kind", "metadata"} or set(patch["metadata"]) != {"name"}:
                    raise RenderError(f"{p['path']}: a `$patch: delete` names apiVersion, kind and metadata.name only")
                del objs[hits[0]]
                continue
            objs[hits[0]] = smp(target, patch)

    ns = k.get("namespace")
    if ns:
        for o in objs:
            if o.get("kind") not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = ns

    for entry in k.get("labels") or []:
        if set(entry) != {"pairs"}:
            raise RenderError(f"{kfile}: only `labels: - pairs:` is supported, got {sorted(entry)}")
        for o in objs:
            o["metadata"].setdefault("labels", {}).update(entry["pairs"])

    for img in k.get("images") or []:
        if not set(img) <= {"name", "newName", "newTag", "digest"} or "name" not in img \
                or {"newTag", "digest"} <= set(img):
            raise RenderError(f"{kfile}: unsupported images entry {img}")
        for o in objs:
            for spec in pod_specs(o):
                for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                    name, rest = split_image(c["image"])
                    if name != img["name"]:
                        continue
                    if "newTag" in img:
                        rest = ":" + str(img["newTag"])
                    if "digest" in img:
                        rest = "@" + str(img["digest"])
                    c["image"] = img.get("newName", name) + rest
    return objs


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        objs = render(argv[1].rstrip("/"))
    except (RenderError, OSError, yaml.YAMLError) as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 1
    objs.sort(key=lambda o: 0 if o.get("kind") == "Namespace" else 1)
    yaml.safe_dump_all(objs, sys.stdout, sort_keys=True, default_flow_style=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
