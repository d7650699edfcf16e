#!/usr/bin/env python3
"""Summarise an MCP conformance results directory and decide pass/fail.

Usage:
    python3 tests/conformance/summarize.py RESULTS_DIR \
        [--requirements .conformance/node_modules/@modelcontextprotocol/conformance/requirements/2026-07-28.yaml] \
        [--runner-exit N]

RESULTS_DIR is what `conformance server ... -o RESULTS_DIR` wrote: one directory per
scenario, named `server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>`, each holding a
`checks.json` array of `{id, status, errorMessage?, ...}` rows.

Scenarios are grouped as
  * scored  - the `server:` list of the requirements file (37 at 2026-07-28, 30 at 2025-11-25);
  * pending - the other `not_scored` server entries (`reason: pending`, or `added-after-release`
              at 2025-11-25): 3 at either revision;
  * tasks   - the `tasks-*` extension scenarios (10 at 2026-07-28, none at 2025-11-25).
The expected counts follow the revision the requirements file is named after
(`2026-07-28.yaml`, `2025-11-25.yaml`); another file sets them from its own lists.
Without a requirements file the grouping falls back to names (the pending scenarios
below, `tasks-*`, and everything else is scored) and the 2026-07-28 counts.

The runner's own exit code only reflects scored scenarios, so this script is the gate:
it exits 1 if the runner exit code (when given) is non-zero, any scenario of any
group has a FAILURE row, a checks.json is unreadable, an expected scenario is
missing, or a group does not have exactly its expected number of scenarios.
WARNING, INFO and SKIPPED rows never fail.

The last line printed is always `N passed, N failed` (SUCCESS and FAILURE rows over
all scenarios), alone on its line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field

PENDING_FALLBACK = (
    "json-schema-2020-12",
    "http-header-validation",
    "http-custom-header-server-validation",
)
EXPECTED_COUNTS = {"scored": 37, "pending": 3, "tasks": 10}
EXPECTED_COUNTS_BY_REVISION = {
    "2026-07-28": EXPECTED_COUNTS,
    "2025-11-25": {"scored": 30, "pending": 3, "tasks": 0},
}
GROUPS = ("scored", "pending", "tasks")

DIR_RE = re.compile(r"^server-(?P<name>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")


@dataclass
class Scenario:
    name: str
    group: str
    passed: int = 0
    failed: int = 0
    warnings: int = 0
    other: int = 0  # INFO, SKIPPED, anything else
    failures: list = field(default_factory=list)  # (id, errorMessage)
    error: str | None = None  # unreadable checks.json etc.
    dirs: int = 0

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.error is None and self.dirs == 1


def scenario_name(dirname: str) -> str | None:
    m = DIR_RE.match(dirname)
    return m.group("name") if m else None


def _parse_requirements_minimal(text: str) -> dict:
    """A tiny parser for the structure of requirements/*.yaml (no PyYAML needed).

    Returns {"server": [names], "not_scored": [{"scenario":..,"leg":..,"reason":..}]}.
    """
    out: dict = {"server": [], "not_scored": []}
    section = None
    current = None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if not line.startswith(" ") and line.endswith(":"):
            section = line[:-1].strip()
            current = None
            continue
        stripped = line.strip()
        if section == "server" and stripped.startswith("- "):
            out["server"].append(stripped[2:].strip().strip("'\""))
        elif section == "not_scored":
            if stripped.startswith("- "):
                current = {}
                out["not_scored"].append(current)
                stripped = stripped[2:].strip()
            if current is not None and ":" in stripped:
                k, v = stripped.split(":", 1)
                v = v.strip().strip("'\"")
                if k.strip() in ("scenario", "leg", "reason"):
                    current[k.strip()] = v
    return out


def load_requirements(path: str, use_yaml: bool = True) -> dict[str, list[str]]:
    """Expected scenario names per group, from the runner's requirements file.

    Uses PyYAML when it is installed, otherwise the minimal parser above.
    """
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    data = None
    if use_yaml:
        try:
            import yaml  # type: ignore

            data = yaml.safe_load(text)
        except ImportError:
            data = None
    if data is None:
        data = _parse_requirements_minimal(text)
    scored = list(data.get("server") or [])
    pending: list[str] = []
    tasks: list[str] = []
    for entry in data.get("not_scored") or []:
        if entry.get("leg") != "server":
            continue
        name = entry.get("scenario")
        if name.startswith("tasks-"):
            tasks.append(name)
        elif entry.get("reason") == "pending":
            pending.append(name)
        else:  # another not-scored server scenario: treat it as pending-like
            pending.append(name)
    return {"scored": scored, "pending": pending, "tasks": tasks}


def expected_counts(requirements: str | None, expected: dict[str, list[str]] | None) -> dict[str, int]:
    """Scenarios expected per group: by the revision the requirements file is named after,
    else as many as the file lists, else the 2026-07-28 counts."""
    if requirements:
        revision = os.path.basename(requirements).removesuffix(".yaml")
        if revision in EXPECTED_COUNTS_BY_REVISION:
            return EXPECTED_COUNTS_BY_REVISION[revision]
        if expected:
            return {g: len(expected[g]) for g in GROUPS}
    return EXPECTED_COUNTS


def classify(name: str, expected: dict[str, list[str]] | None) -> str:
    if expected:
        for g in GROUPS:
            if name in expected[g]:
                return g
    if name.startswith("tasks-"):
        return "tasks"
    if name in PENDING_FALLBACK or (expected and name in expected.get("pending", [])):
        return "pending"
    return "scored"


CRASH_RE = re.compile(r"^Failed to run scenario (?P<name>\S+): (?P<msg>.*)$")


def runner_crashes(log_path: str) -> dict[str, str]:
    """`Failed to run scenario X: <error>` lines of the runner's console log (run.sh tees it)."""
    out: dict[str, str] = {}
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = CRASH_RE.match(line.rstrip("\n"))
                if m:
                    out[m.group("name")] = "Failed to run scenario: " + m.group("msg")
    except OSError:
        pass
    return out


def collect(results_dir: str, expected: dict[str, list[str]] | None) -> tuple[dict[str, Scenario], list[str]]:
    scenarios: dict[str, Scenario] = {}
    problems: list[str] = []
    crashes = runner_crashes(os.path.join(results_dir, "runner.log"))
    for entry in sorted(os.listdir(results_dir)):
        path = os.path.join(results_dir, entry)
        if not os.path.isdir(path):
            continue
        name = scenario_name(entry)
        if name is None:
            continue  # not a scenario directory
        sc = scenarios.get(name)
        if sc is None:
            sc = scenarios[name] = Scenario(name=name, group=classify(name, expected))
        sc.dirs += 1
        if sc.dirs > 1:
            problems.append(f"scenario {name} has more than one results directory (stale results dir?)")
        checks_path = os.path.join(path, "checks.json")
        if not os.path.exists(checks_path):
            # The runner leaves an empty directory when a scenario throws ("Failed to run
            # scenario X: ...") and counts it as one failed check; do the same.
            msg = crashes.get(name, "no checks.json: the scenario crashed (see runner.log)")
            sc.failed += 1
            sc.failures.append((name, msg))
            problems.append(f"scenario {name} crashed: {_oneline(msg, 200)}")
            continue
        try:
            with open(checks_path, encoding="utf-8") as fh:
                rows = json.load(fh)
            if not isinstance(rows, list):
                raise ValueError("checks.json is not a JSON array")
        except (OSError, ValueError) as exc:
            sc.error = f"{checks_path}: {exc}"
            problems.append(f"scenario {name}: unreadable checks.json ({exc})")
            continue
        for row in rows:
            status = row.get("status") if isinstance(row, dict) else None
            if status == "SUCCESS":
                sc.passed += 1
            elif status == "FAILURE":
                sc.failed += 1
                sc.failures.append((row.get("id", "?"), row.get("errorMessage") or row.get("description") or ""))
            elif status == "WARNING":
                sc.warnings += 1
            else:
                sc.other += 1
    return scenarios, problems


def _oneline(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summarize(results_dir: str, requirements: str | None = None, runner_exit: int | None = None,
              out=sys.stdout) -> int:
    expected = None
    problems: list[str] = []
    if requirements:
        try:
            expected = load_requirements(requirements)
        except OSError as exc:
            problems.append(f"cannot read requirements file {requirements}: {exc}")
    if not os.path.isdir(results_dir):
        problems.append(f"results directory {results_dir} does not exist")
        scenarios: dict[str, Scenario] = {}
    else:
        scenarios, more = collect(results_dir, expected)
        problems.extend(more)
    counts = expected_counts(requirements, expected)

    def p(line: str = "") -> None:
        print(line, file=out)

    total_pass = total_fail = 0
    for g in GROUPS:
        group = [s for s in scenarios.values() if s.group == g]
        exp_names = expected[g] if expected else []
        # keep the requirements order, then anything unexpected
        order = {n: i for i, n in enumerate(exp_names)}
        group.sort(key=lambda s: (order.get(s.name, len(order)), s.name))
        p(f"== {g} ==")
        for s in group:
            mark = "✓" if s.ok else "✗"
            p(f"{mark} {s.name} passed={s.passed} failed={s.failed} warnings={s.warnings}")
            for cid, msg in s.failures:
                p(f"    FAILURE {cid}: {_oneline(msg)}")
            if s.error:
                p(f"    ERROR {_oneline(s.error)}")
        seen = {s.name for s in group}
        missing = [n for n in exp_names if n not in seen]
        for n in missing:
            p(f"✗ {n} MISSING (no results directory)")
            problems.append(f"{g} scenario {n} is missing")
        unexpected = [s.name for s in group if expected and s.name not in exp_names]
        if unexpected:
            problems.append(f"unexpected {g} scenarios: {', '.join(unexpected)}")
        if len(group) != counts[g]:
            problems.append(f"{g}: saw {len(group)} scenarios, expected {counts[g]}")
        bad = [s.name for s in group if s.failed]
        if bad:
            problems.append(f"{g} scenarios with FAILURE rows: {', '.join(bad)}")
        g_pass = sum(s.passed for s in group)
        g_fail = sum(s.failed for s in group)
        g_warn = sum(s.warnings for s in group)
        total_pass += g_pass
        total_fail += g_fail
        g_ok = sum(1 for s in group if s.ok)
        p(f"-- {g}: {g_ok}/{counts[g]} scenarios ok, {len(group)} seen, "
          f"{g_pass} passed, {g_fail} failed, {g_warn} warnings")
        p()

    p("== totals ==")
    for g in GROUPS:
        group = [s for s in scenarios.values() if s.group == g]
        p(f"{g}: {sum(1 for s in group if s.ok)}/{counts[g]} scenarios, "
          f"{sum(s.passed for s in group)} passed, {sum(s.failed for s in group)} failed, "
          f"{sum(s.warnings for s in group)} warnings")
    if runner_exit is not None and runner_exit != 0:
        problems.append(f"conformance runner exited with status {runner_exit}")
    if problems:
        p("CONFORMANCE FAILED:")
        for pr in problems:
            p(f"  - {pr}")
    else:
        p("CONFORMANCE OK")
    p(f"{total_pass} passed, {total_fail} failed")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results_dir")
    ap.add_argument("--requirements", help="runner requirements/<rev>.yaml (to know the scenario groups)")
    ap.add_argument("--runner-exit", type=int, default=None, help="exit status of the runner; non-zero fails")
    args = ap.parse_args(argv)
    return summarize(args.results_dir, args.requirements, args.runner_exit)


if __name__ == "__main__":
    sys.exit(main())
