"""Self-test of summarize.py on fabricated results directories.

Run from the repository root:
    python3 -m unittest discover -s tests/conformance -v
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import summarize  # noqa: E402

SCORED = [
    "server-stateless", "completion-complete", "tools-list", "tools-call-simple-text", "tools-call-image",
    "tools-call-audio", "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error",
    "tools-call-with-progress", "server-sse-multiple-streams", "resources-list", "resources-read-text",
    "resources-read-binary", "resources-templates-read", "sep-2164-resource-not-found", "prompts-list",
    "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image",
    "dns-rebinding-protection", "caching", "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling", "input-required-result-basic-list-roots",
    "input-required-result-request-state", "input-required-result-multiple-input-requests",
    "input-required-result-multi-round", "input-required-result-missing-input-response",
    "input-required-result-non-tool-request", "input-required-result-result-type",
    "input-required-result-unsupported-methods", "input-required-result-tampered-state",
    "input-required-result-capability-check", "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
]
PENDING = ["json-schema-2020-12", "http-header-validation", "http-custom-header-server-validation"]
TASKS = [
    "tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields", "tasks-request-state-removal",
    "tasks-mrtr-input", "tasks-request-headers", "tasks-dispatch-and-envelope", "tasks-status-notifications",
    "tasks-required-task-error", "tasks-mrtr-composition",
]

REQUIREMENTS_YAML = (
    "# fabricated, same shape as requirements/2026-07-28.yaml\n"
    "server:\n" + "".join(f"  - {n}\n" for n in SCORED)
    + "\nclient:\n  - tools_call\n  - auth/metadata-default\n\nnot_scored:\n"
    + "  - scenario: auth/dpop\n    leg: client\n    reason: extension\n"
    + "".join(
        f"  - scenario: {n}\n    leg: server\n    reason: extension\n    note: >-\n      some text: here\n"
        for n in TASKS
    )
    + "".join(f"  - scenario: {n}\n    leg: server\n    reason: pending\n" for n in PENDING)
)


def row(cid: str, status: str, msg: str | None = None) -> dict:
    r = {"id": cid, "name": cid, "description": "d", "status": status, "timestamp": "2026-11-30T10:20:18.163Z"}
    if msg is not None:
        r["errorMessage"] = msg
    return r


class SummarizeTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.results = os.path.join(self.tmp.name, "results")
        os.mkdir(self.results)
        self.req = os.path.join(self.tmp.name, "2026-07-28.yaml")
        with open(self.req, "w", encoding="utf-8") as fh:
            fh.write(REQUIREMENTS_YAML)

    def write(self, scenario: str, rows: list[dict], ms: int = 163) -> None:
        d = os.path.join(self.results, f"server-{scenario}-2026-11-30T10-20-18-{ms:03d}Z")
        os.mkdir(d)
        with open(os.path.join(d, "checks.json"), "w", encoding="utf-8") as fh:
            json.dump(rows, fh)

    def all_pass(self, skip: tuple[str, ...] = ()) -> None:
        for n in SCORED + PENDING + TASKS:
            if n in skip:
                continue
            if n == "tasks-status-notifications":
                self.write(n, [row(n, "SKIPPED")])
            elif n == "server-sse-multiple-streams":
                self.write(n, [row("server-accepts-multiple-post-streams", "SUCCESS"),
                               row("server-sse-streams-functional", "INFO")])
            else:
                self.write(n, [row(n, "SUCCESS"), row("wire-schema-valid", "SUCCESS")])

    def run_summary(self, requirements: str | None = "default", runner_exit: int | None = 0) -> tuple[int, str]:
        buf = io.StringIO()
        req = self.req if requirements == "default" else requirements
        rc = summarize.summarize(self.results, req, runner_exit, out=buf)
        return rc, buf.getvalue()

    def test_scenario_name(self) -> None:
        self.assertEqual(summarize.scenario_name("server-tools-list-2026-11-30T10-20-18-163Z"), "tools-list")
        self.assertEqual(
            summarize.scenario_name("server-json-schema-2020-12-2026-01-02T03-04-05-006Z"), "json-schema-2020-12")
        self.assertIsNone(summarize.scenario_name("server.log"))

    def test_requirements_parsers_agree(self) -> None:
        with open(self.req, encoding="utf-8") as fh:
            minimal = summarize._parse_requirements_minimal(fh.read())
        self.assertEqual(minimal["server"], SCORED)
        for use_yaml in (True, False):
            loaded = summarize.load_requirements(self.req, use_yaml=use_yaml)
            self.assertEqual(loaded, {"scored": SCORED, "pending": PENDING, "tasks": TASKS})

    def test_all_pass(self) -> None:
        self.all_pass()
        rc, out = self.run_summary()
        self.assertEqual(rc, 0, out)
        lines = out.splitlines()
        self.assertEqual(lines[-1], f"{2 * 49 - 1} passed, 0 failed")
        self.assertIn("scored: 37/37 scenarios, 73 passed, 0 failed, 0 warnings", out)
        self.assertIn("pending: 3/3 scenarios", out)
        self.assertIn("tasks: 10/10 scenarios", out)
        self.assertIn("✓ tasks-status-notifications passed=0 failed=0 warnings=0", out)

    def test_all_pass_without_requirements_file(self) -> None:
        self.all_pass()
        rc, out = self.run_summary(requirements=None)
        self.assertEqual(rc, 0, out)

    def test_warning_does_not_fail(self) -> None:
        self.all_pass(skip=("caching",))
        self.write("caching", [row("caching", "SUCCESS"), row("caching-x", "WARNING", "meh")])
        rc, out = self.run_summary()
        self.assertEqual(rc, 0, out)
        self.assertIn("✓ caching passed=1 failed=0 warnings=1", out)

    def test_failure_in_tasks_scenario_fails(self) -> None:
        self.all_pass(skip=("tasks-lifecycle",))
        self.write("tasks-lifecycle", [row("tasks-lifecycle-create", "SUCCESS"),
                                       row("tasks-lifecycle-get", "FAILURE", "expected status working")])
        # the runner itself exits 0 here: tasks are not scored
        rc, out = self.run_summary(runner_exit=0)
        self.assertEqual(rc, 1, out)
        self.assertIn("✗ tasks-lifecycle passed=1 failed=1 warnings=0", out)
        self.assertIn("FAILURE tasks-lifecycle-get: expected status working", out)
        self.assertEqual(out.splitlines()[-1], f"{2 * 49 - 2} passed, 1 failed")

    def test_missing_scenario_fails(self) -> None:
        self.all_pass(skip=("http-header-validation",))
        rc, out = self.run_summary()
        self.assertEqual(rc, 1, out)
        self.assertIn("✗ http-header-validation MISSING", out)
        self.assertIn("pending: saw 2 scenarios, expected 3", out)

    def test_missing_scenario_fails_without_requirements_file(self) -> None:
        self.all_pass(skip=("tools-list",))
        rc, out = self.run_summary(requirements=None)
        self.assertEqual(rc, 1, out)
        self.assertIn("scored: saw 36 scenarios, expected 37", out)

    def test_runner_crash_fails(self) -> None:
        self.all_pass()
        rc, out = self.run_summary(runner_exit=2)
        self.assertEqual(rc, 1, out)
        self.assertIn("runner exited with status 2", out)

    def test_unreadable_checks_fails(self) -> None:
        self.all_pass(skip=("caching",))
        d = os.path.join(self.results, "server-caching-2026-11-30T10-20-18-163Z")
        os.mkdir(d)
        with open(os.path.join(d, "checks.json"), "w", encoding="utf-8") as fh:
            fh.write("{not json")
        rc, out = self.run_summary()
        self.assertEqual(rc, 1, out)
        self.assertIn("unreadable checks.json", out)

    def test_crashed_scenario_counts_one_failure(self) -> None:
        self.all_pass(skip=("tasks-capability-negotiation",))
        os.mkdir(os.path.join(self.results, "server-tasks-capability-negotiation-2026-11-30T12-22-56-080Z"))
        with open(os.path.join(self.results, "runner.log"), "w", encoding="utf-8") as fh:
            fh.write("=== Running scenario: tasks-capability-negotiation ===\n"
                     "Failed to run scenario tasks-capability-negotiation: Error: HTTP 501: boom\n"
                     "    at l (file:///x/dist/index.js:1128:6843)\n")
        rc, out = self.run_summary()
        self.assertEqual(rc, 1, out)
        self.assertIn("✗ tasks-capability-negotiation passed=0 failed=1 warnings=0", out)
        self.assertIn("FAILURE tasks-capability-negotiation: Failed to run scenario: Error: HTTP 501: boom", out)
        self.assertEqual(out.splitlines()[-1], f"{2 * 49 - 3} passed, 1 failed")

    def test_duplicate_scenario_dir_fails(self) -> None:
        self.all_pass()
        self.write("tools-list", [row("tools-list", "SUCCESS")], ms=999)
        rc, out = self.run_summary()
        self.assertEqual(rc, 1, out)
        self.assertIn("more than one results directory", out)

    def test_real_requirements_file_if_installed(self) -> None:
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        cdir = os.environ.get("PRESA_CONFORMANCE_DIR", os.path.join(repo, ".conformance"))
        path = os.path.join(cdir, "node_modules", "@modelcontextprotocol", "conformance", "requirements",
                            "2026-07-28.yaml")
        if not os.path.exists(path):
            self.skipTest("runner not installed")
        loaded = summarize.load_requirements(path)
        self.assertEqual(sorted(loaded["scored"]), sorted(SCORED))
        self.assertEqual(sorted(loaded["pending"]), sorted(PENDING))
        self.assertEqual(sorted(loaded["tasks"]), sorted(TASKS))
        self.assertEqual(summarize.load_requirements(path, use_yaml=False), loaded)


LEGACY_SCORED = ["server-initialize", "ping", "tools-call-elicitation"] + [f"legacy-{i}" for i in range(27)]
LEGACY_NOT_SCORED = [("server-session-lifecycle", "added-after-release"), ("json-schema-2020-12", "pending"),
                     ("server-sse-polling", "pending")]
LEGACY_YAML = (
    "# fabricated, same shape as requirements/2025-11-25.yaml\n"
    "server:\n" + "".join(f"  - {n}\n" for n in LEGACY_SCORED)
    + "\nnot_scored:\n  - scenario: auth/dpop\n    leg: client\n    reason: extension\n"
    + "".join(f"  - scenario: {n}\n    leg: server\n    reason: {r}\n" for n, r in LEGACY_NOT_SCORED)
)


class LegacyRevisionTest(unittest.TestCase):
    """--requirements 2025-11-25: 30 scored, 3 not scored, no tasks scenarios."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.results = os.path.join(self.tmp.name, "results")
        os.mkdir(self.results)
        self.req = os.path.join(self.tmp.name, "2025-11-25.yaml")
        with open(self.req, "w", encoding="utf-8") as fh:
            fh.write(LEGACY_YAML)
        for n in LEGACY_SCORED + [n for n, _ in LEGACY_NOT_SCORED]:
            d = os.path.join(self.results, f"server-{n}-2026-11-30T10-20-18-163Z")
            os.mkdir(d)
            with open(os.path.join(d, "checks.json"), "w", encoding="utf-8") as fh:
                json.dump([row(n, "SUCCESS")], fh)

    def summary(self) -> tuple[int, str]:
        buf = io.StringIO()
        rc = summarize.summarize(self.results, self.req, 0, out=buf)
        return rc, buf.getvalue()

    def test_all_pass(self) -> None:
        rc, out = self.summary()
        self.assertEqual(rc, 0, out)
        self.assertIn("scored: 30/30 scenarios, 30 passed, 0 failed", out)
        self.assertIn("pending: 3/3 scenarios", out)
        self.assertIn("tasks: 0/0 scenarios", out)
        self.assertTrue(out.rstrip().endswith("33 passed, 0 failed"), out)

    def test_real_requirements_file_if_installed(self) -> None:
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        cdir = os.environ.get("PRESA_CONFORMANCE_DIR", os.path.join(repo, ".conformance"))
        path = os.path.join(cdir, "node_modules", "@modelcontextprotocol", "conformance", "requirements",
                            "2025-11-25.yaml")
        if not os.path.exists(path):
            self.skipTest("runner not installed")
        loaded = summarize.load_requirements(path)
        counts = {g: len(loaded[g]) for g in summarize.GROUPS}
        self.assertEqual(counts, summarize.EXPECTED_COUNTS_BY_REVISION["2025-11-25"])
        self.assertEqual(summarize.load_requirements(path, use_yaml=False), loaded)

    def test_a_missing_scored_scenario_fails(self) -> None:
        shutil.rmtree(os.path.join(self.results, "server-ping-2026-11-30T10-20-18-163Z"))
        rc, out = self.summary()
        self.assertEqual(rc, 1, out)
        self.assertIn("scored scenario ping is missing", out)


if __name__ == "__main__":
    unittest.main()
