#!/usr/bin/env python3
"""Every panel of the Grafana dashboard, against a real Prometheus scraping a live presa cluster.

Run by tests/observability/check.sh inside `deploy/local-cluster.sh -- ...`, which sets
PRESA_URL (nginx in front of the API pods) and PRESA_METRICS_TARGETS (NAME=HOST:PORT of
every pod: api1, api2, worker1, worker2). It:

1. writes a Prometheus configuration scraping every pod every second (jobs presa-api and
   presa-worker, as in Kubernetes) and loading the alert rules, and starts `prometheus`
   (storage in a temporary directory, a free port);
2. drives a short load through PRESA_URL with plain JSON-RPC (stdlib only): tasks that
   complete, fail and are cancelled, one parked on input, refusals (the cluster runs with a
   small per-principal active-task limit: PRESA_MAX_ACTIVE_TASKS_PER_SCOPE), a too large
   input, an unknown tool, and an open listen stream;
3. waits for the scrapes, then queries every target expression of every panel (Grafana's
   $__rate_interval and friends substituted) at one instant, and fails when one returns no
   sample (or only NaN), printing `panel | expr | sample value`;
4. checks that every alert rule evaluates without error against the live series.

Exit status 0 only when every expression returned data and every rule is healthy.
Python 3 standard library only.
"""

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(REPO, "deploy/grafana/presa-dashboard.json")
RULES = os.path.join(REPO, "deploy/prometheus/presa-rules.yaml")
PROTOCOL = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
# Grafana's built-in variables, as a dashboard over the last few minutes would have them.
GRAFANA_VARS = {"$__rate_interval": "1m", "${__rate_interval}": "1m", "$__interval": "15s",
                "${__interval}": "15s", "$__range": "5m", "${__range}": "5m"}


def log(msg):
    print(f"[observability] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- MCP over plain HTTP -------------------------------------------------------------------

class Mcp:
    def __init__(self, url):
        self.url = url
        self.next_id = 0
        self.lock = threading.Lock()

    def _request(self, method, params, name=None, tasks=True, timeout=30):
        with self.lock:
            self.next_id += 1
            rid = self.next_id
        caps = {"elicitation": {}}
        if tasks:
            caps["extensions"] = {TASKS: {}}
        params = dict(params)
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": PROTOCOL,
                           "io.modelcontextprotocol/clientCapabilities": caps}
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": PROTOCOL, "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        return urllib.request.urlopen(req, timeout=timeout)

    def call(self, method, params, name=None, tasks=True):
        """The JSON-RPC response (an error response too; HTTP error statuses carry one)."""
        try:
            resp = self._request(method, params, name, tasks)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                return json.loads(text)
            except ValueError:
                return {"error": {"code": e.code, "message": text[:200]}}
        with resp:
            text = resp.read().decode()
            if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                last = None
                for line in text.splitlines():
                    if line.startswith("data:"):
                        msg = json.loads(line[5:])
                        if "id" in msg:
                            last = msg
                return last or {}
            return json.loads(text)

    def tool(self, name, arguments, tasks=True):
        return self.call("tools/call", {"name": name, "arguments": arguments}, name=name, tasks=tasks)

    def task(self, method, task_id, **extra):
        return self.call(method, dict({"taskId": task_id}, **extra), name=task_id)

    def listen(self, opened, stop):
        """Hold a subscriptions/listen stream open until `stop` is set."""
        resp = self._request("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, timeout=120)
        with resp:
            opened.set()
            while not stop.is_set():
                if not resp.readline():
                    break


def task_id(reply):
    return (reply.get("result") or {}).get("taskId")


def wait_status(mcp, tid, wanted, timeout=30):
    deadline = time.time() + timeout
    status = None
    while time.time() < deadline:
        status = (mcp.task("tasks/get", tid).get("result") or {}).get("status")
        if status in wanted:
            return status
        time.sleep(0.1)
    raise SystemExit(f"task {tid} is {status}, not {wanted}, after {timeout} s")


def drive_load(mcp):
    """The load every panel needs; returns what happened, for the log."""
    seen = {}
    count = lambda k: seen.__setitem__(k, seen.get(k, 0) + 1)  # noqa: E731

    # A listen stream, open while Prometheus scrapes.
    opened, stop = threading.Event(), threading.Event()
    listener = threading.Thread(target=mcp.listen, args=(opened, stop), daemon=True)
    listener.start()
    if not opened.wait(10):
        raise SystemExit("subscriptions/listen did not open")

    # A task parked on input (input_required), answered only at the end.
    parked = task_id(mcp.tool("confirm_delete", {"filename": "observability.txt"}))
    assert parked, "confirm_delete did not become a task"
    wait_status(mcp, parked, {"input_required"})
    count("input_required")

    # Work that completes, fails (a handler error: -32603), and is cancelled; plus plain calls.
    for round_ in range(3):
        ids = [task_id(mcp.tool("slow_compute", {"seconds": 0.3, "label": f"r{round_}-{i}"})) for i in range(4)]
        failing = [task_id(mcp.tool("protocol_error_job", {})) for _ in range(2)]
        tool_error = task_id(mcp.tool("failing_job", {}))
        long_ = [task_id(mcp.tool("slow_compute", {"seconds": 60})) for _ in range(2)]
        for tid in long_:
            wait_status(mcp, tid, {"working"})
            mcp.task("tasks/cancel", tid)
        for tid in ids + [tool_error]:
            count(wait_status(mcp, tid, {"completed", "failed", "cancelled"}))
        for tid in failing:
            count(wait_status(mcp, tid, {"failed"}))
        for tid in long_:
            count(wait_status(mcp, tid, {"cancelled"}))
        mcp.tool("greet", {"name": "observability"}, tasks=False)
        mcp.call("tools/list", {})
        mcp.tool("no_such_tool", {})  # -32602
        count("error -32602")

    # Refusals: an input over max_task_input_bytes (256 KiB by default)...
    big = mcp.tool("slow_compute", {"seconds": 0, "label": "x" * (300 * 1024)})
    assert "error" in big, f"a too large input was accepted: {str(big)[:200]}"
    count(f"refused {big['error'].get('code')}")
    # ... and the principal's active-task limit: slow tasks until a create is refused
    # (the creates before it are near the quota: the quota-use histogram's upper buckets).
    held, refused = [], None
    for _ in range(40):
        reply = mcp.tool("slow_compute", {"seconds": 60})
        if "error" in reply:
            refused = reply["error"]
            break
        held.append(task_id(reply))
    if refused is None:
        raise SystemExit("no create was refused for max_active_tasks_per_scope: is PRESA_MAX_ACTIVE_TASKS_PER_SCOPE set?")
    count(f"refused {refused.get('data', {}).get('limit', refused.get('code'))}")
    for tid in held:
        mcp.task("tasks/cancel", tid)
        count("cancelled")
    return seen, (parked, stop, listener)


def finish_load(mcp, handles):
    parked, stop, listener = handles
    answer = {"confirm-delete": {"action": "accept", "content": {"confirm": True}}}
    mcp.task("tasks/update", parked, inputResponses=answer)
    wait_status(mcp, parked, {"completed"})
    stop.set()


# --- Prometheus ------------------------------------------------------------------------------

def prometheus_config(targets, path):
    jobs = {"presa-api": [], "presa-worker": []}
    for entry in targets:
        name, address = entry.split("=", 1)
        jobs["presa-worker" if name.startswith("worker") else "presa-api"].append(address)
    lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "  evaluation_interval: 1s",
             "rule_files:", f"  - {json.dumps(RULES)}", "scrape_configs:"]
    for job, addresses in jobs.items():
        lines += [f"  - job_name: {job}", "    static_configs:", f"      - targets: {json.dumps(addresses)}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return jobs


class Prometheus:
    def __init__(self, config, workdir):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(workdir, "prometheus.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={os.path.join(workdir, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}" if params else f"{self.base}{path}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        sys.stderr.write(open(self.log_path).read()[-3000:])
        raise SystemExit("prometheus did not become ready")

    def wait_targets_up(self, expected, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            active = self.get("/api/v1/targets")["data"]["activeTargets"]
            up = [t for t in active if t["health"] == "up"]
            if len(up) >= expected:
                return
            time.sleep(0.5)
        raise SystemExit(f"not every pod is scraped: {json.dumps(active, indent=1)[:2000]}")

    def query(self, expr, at):
        return self.get("/api/v1/query", query=expr, time=f"{at:.3f}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


# --- The check ---------------------------------------------------------------------------------

def panel_targets(path):
    """(panel title, expr) of every target of every panel, rows' nested panels included."""
    with open(path) as f:
        dash = json.load(f)
    templating = [v["name"] for v in dash.get("templating", {}).get("list", [])]
    assert "datasource" in templating, "the dashboard needs a ${datasource} variable"
    out = []

    def walk(panels):
        for p in panels:
            if p.get("type") == "row":
                walk(p.get("panels", []))
                continue
            uid = (p.get("datasource") or {}).get("uid")
            assert uid == "${datasource}", f"panel {p.get('title')!r} must use the ${{datasource}} variable, not {uid!r}"
            targets = p.get("targets") or []
            assert targets, f"panel {p.get('title')!r} has no query"
            for t in targets:
                out.append((p["title"], t["expr"]))

    walk(dash["panels"])
    return out


def substitute(expr):
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unsubstituted Grafana variable in: {expr}"
    return expr


def sample(result):
    """A short text of the result's samples (the largest number of them, with its labels),
    and whether one is a number (not NaN)."""
    kind, data = result["resultType"], result["result"]
    values = []
    if kind == "vector":
        for s in data:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items()) if k != "job")
            values.append((labels, float(s["value"][1])))
    elif kind == "scalar":
        values.append(("", float(data[1])))
    if not values:
        return "", False
    finite = [lv for lv in values if not math.isnan(lv[1])]
    labels, value = max(finite, key=lambda lv: lv[1]) if finite else values[0]
    text = f"{value:.4g}" + (f" {{{labels}}}" if labels else "")
    if len(values) > 1:
        text += f" (+{len(values) - 1} series)"
    return text, bool(finite)


def main():
    url = os.environ.get("PRESA_URL")
    targets = [t for t in os.environ.get("PRESA_METRICS_TARGETS", "").split(",") if t]
    if not url or not targets:
        raise SystemExit("run me through deploy/local-cluster.sh (PRESA_URL and PRESA_METRICS_TARGETS unset)")
    if not shutil.which("prometheus"):
        raise SystemExit("prometheus not found (apt-get install prometheus)")
    exprs = panel_targets(DASHBOARD)
    workdir = tempfile.mkdtemp(prefix="presa-prometheus.")
    prom = None
    try:
        config = os.path.join(workdir, "prometheus.yml")
        jobs = prometheus_config(targets, config)
        log(f"prometheus scraping {', '.join(f'{j}: {len(a)}' for j, a in jobs.items())} every 1 s")
        prom = Prometheus(config, workdir)
        prom.wait_ready()
        prom.wait_targets_up(len(targets))

        mcp = Mcp(url)
        started = time.time()
        seen, handles = drive_load(mcp)
        log(f"load done in {time.time() - started:.1f} s: {seen}")
        # A few scrapes (1 s apart) of the aftermath, while a task is still parked on input
        # and the listen stream open: the instant every panel is read at.
        time.sleep(4)
        at = time.time()
        finish_load(mcp, handles)

        failures, rows = [], []
        for title, expr in exprs:
            reply = prom.query(substitute(expr), at)
            if reply.get("status") != "success":
                failures.append(f"{title}: {reply.get('error')}")
                rows.append((title, expr, "ERROR"))
                continue
            text, ok = sample(reply["data"])
            rows.append((title, expr, text or "(empty)"))
            if not ok:
                failures.append(f"{title}: {'only NaN' if text else 'no data'} for {expr}")

        width = max(len(t) for t, _, _ in rows)
        print(f"{'panel'.ljust(width)} | expr | sample value")
        print(f"{'-' * width}-|------|-------------")
        for title, expr, value in rows:
            print(f"{title.ljust(width)} | {expr} | {value}")
        print(f"\n{len(rows)} panel queries over {len({t for t, _, _ in rows})} panels, "
              f"{len(rows) - len(failures)} with data")

        # Every alert rule evaluates against the live series without error.
        rules = [r for g in prom.get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]
        unhealthy = [f"{r['name']}: {r.get('lastError')}" for r in rules if r.get("health") != "ok"]
        states = ", ".join(f"{r['name']}={r.get('state')}" for r in rules)
        print(f"{len(rules)} alert rules loaded in Prometheus: {states}")
        failures += [f"rule {u}" for u in unhealthy]

        if failures:
            print("\nFAILED:\n  " + "\n  ".join(failures))
            return 1
        print("OK: every panel query returned data, every alert rule is healthy")
        return 0
    finally:
        if prom:
            prom.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
