#!/usr/bin/env bash
# Virtual servers of presa-gateway on a real cluster: 2 gateway API pods (--auth jwt) and
# 2 gateway workers on Redis behind nginx, in front of two upstreams (the Python mcp-SDK
# server tests/gateway/upstream.py as `py`, prefix py_, and @modelcontextprotocol/server-everything
# as `ev`, prefix ev_), serving two `[[server]]`s:
#
#   alpha  /mcp/alpha  upstream py, without py_add            needs scope team-a
#   beta   /mcp/beta   upstream ev, and py_slow_idempotent    needs scope team-b
#
# Run it as it is: it installs the upstreams (tests/gateway/setup.sh), writes the gateway
# config, and runs itself inside `deploy/local-cluster.sh --auth-jwt --gateway-config FILE`
# with three tokens of one principal minted by the cluster's throw-away issuer (scopes team-a,
# team-b, both). Inside, through nginx, it checks: the two catalogs differ; each
# server/discover says its own identity; a token without a server's scope gets 403
# insufficient_scope; a tool hidden from a server is an unknown tool there; an unknown server is
# 404; a task created on alpha is unknown on beta and on /mcp (the same error as a random id)
# for tasks/get, tasks/update and tasks/cancel, while alpha reads it, a worker runs it, and alpha
# cancels it. One line per check, then `N passed, M failed` (exit 1 if any failed).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

if [ -z "${PRESA_URL:-}" ]; then
  SETUP=$(bash "$REPO/tests/gateway/setup.sh")
  EVERYTHING_STDIO=$(sed -n 's/^EVERYTHING_STDIO=//p' <<<"$SETUP")
  PYTHON=$(sed -n 's/^PYTHON=//p' <<<"$SETUP")
  [ -n "$EVERYTHING_STDIO" ] && [ -n "$PYTHON" ] || { echo "tests/gateway/setup.sh printed no EVERYTHING_STDIO or PYTHON" >&2; exit 1; }
  DIR=$(mktemp -d -t presa-virtual-check.XXXXXX)
  trap 'rm -rf "$DIR"' EXIT
  q() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }
  cat >"$DIR/gateway.toml" <<EOF
[[upstream]]
name = "py"
command = $(q "$PYTHON $REPO/tests/gateway/upstream.py")
prefix = "py_"
pool = 2

[[upstream]]
name = "ev"
command = $(q "$EVERYTHING_STDIO")
prefix = "ev_"
pool = 2

[[server]]
name = "alpha"
upstreams = ["py"]
hide = ["py_add"]
scopes = ["team-a"]
title = "Alpha tools"
instructions = "Alpha: the Python upstream, without add."

[[server]]
name = "beta"
upstreams = ["ev", "py"]
tools = ["ev_*", "py_slow_idempotent"]
scopes = ["team-b"]
title = "Beta tools"
EOF
  PRESA_DEV_TOKENS="a=team-a;b=team-b;ab=team-a team-b" \
    "$REPO/deploy/local-cluster.sh" --auth-jwt --gateway-config "$DIR/gateway.toml" -- "$0"
  exit $?
fi

: "${PRESA_TOKENS_DIR:?PRESA_TOKENS_DIR is not set: run me without PRESA_URL (I start the cluster myself)}"
exec timeout -k 5 120 python3 - "$PRESA_URL" "$PRESA_TOKENS_DIR" <<'PY'
import json, sys, time, urllib.error, urllib.request

url, tokens = sys.argv[1], sys.argv[2]
base = url[: -len("/mcp")]
token = {name: open(f"{tokens}/token-{name}").read().strip() for name in ("a", "b", "ab")}
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
NAME_PARAM = {"tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}


def rpc(path, who, method, params=None, caps=TASKS):
    """One 2026-07-28 request through nginx: (HTTP status, headers, JSON body)."""
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        "Authorization": f"Bearer {token[who]}",
    }
    if method in NAME_PARAM:
        headers["Mcp-Name"] = params[NAME_PARAM[method]]
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    req = urllib.request.Request(base + path, body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, hdrs, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, e.headers, e.read()
    return status, hdrs, json.loads(raw)


def ok(path, who, method, params=None, caps=TASKS):
    status, _, body = rpc(path, who, method, params, caps)
    assert status == 200 and "result" in body, f"{method} on {path}: HTTP {status} {body}"
    return body["result"]


def err(path, who, method, params=None):
    status, _, body = rpc(path, who, method, params)
    assert "error" in body, f"{method} on {path} should fail: HTTP {status} {body}"
    return status, body["error"]


def tools(path, who="ab"):
    return sorted(t["name"] for t in ok(path, who, "tools/list")["tools"])


passed, failed = 0, 0


def check(name, f):
    global passed, failed
    try:
        print(f"ok   {name}: {f()}")
        passed += 1
    except Exception as e:  # one line per failed check, then go on
        print(f"FAIL {name}: {e}")
        failed += 1


def catalogs():
    alpha, beta, root = tools("/mcp/alpha"), tools("/mcp/beta"), tools("/mcp")
    assert "py_slow_idempotent" in alpha and "py_add" not in alpha and all(n.startswith("py_") for n in alpha), alpha
    assert "ev_get-sum" in beta and "py_slow_idempotent" in beta, beta
    assert all(n.startswith("ev_") or n == "py_slow_idempotent" for n in beta), beta
    assert set(alpha) != set(beta) and set(alpha) | set(beta) < set(root), (alpha, beta, root)
    return f"alpha {len(alpha)} tools (py_ only, no py_add), beta {len(beta)} (ev_ and py_slow_idempotent), /mcp {len(root)}"


def identities():
    seen = []
    for path, title in (("/mcp/alpha", "Alpha tools"), ("/mcp/beta", "Beta tools")):
        d = ok(path, "ab", "server/discover")
        info = d["_meta"]["io.modelcontextprotocol/serverInfo"]
        assert info.get("title") == title and info["name"] == path.rsplit("/", 1)[1], d
        seen.append(f"{info['name']} \"{info['title']}\"")
    d = ok("/mcp/alpha", "ab", "server/discover")
    assert d.get("instructions") == "Alpha: the Python upstream, without add.", d
    assert "instructions" not in ok("/mcp/beta", "ab", "server/discover")
    return ", ".join(seen) + "; alpha's instructions"


def scopes():
    out = []
    for path, who, missing in (("/mcp/alpha", "b", "team-a"), ("/mcp/beta", "a", "team-b")):
        status, hdrs, body = rpc(path, who, "tools/list")
        challenge = hdrs.get("WWW-Authenticate", "")
        assert status == 403 and 'error="insufficient_scope"' in challenge, (status, challenge, body)
        assert body["error"]["data"]["requiredScopes"] == [missing], body
        out.append(f"{path} without {missing}: 403 insufficient_scope")
    assert "py_slow_idempotent" in tools("/mcp/alpha", "a") and "ev_get-sum" in tools("/mcp/beta", "b")
    return "; ".join(out)


def hidden():
    call = lambda name: {"name": name, "arguments": {"a": 1, "b": 2}}
    _, h = err("/mcp/alpha", "ab", "tools/call", call("py_add"))
    _, u = err("/mcp/alpha", "ab", "tools/call", call("no_such_tool"))
    assert h["code"] == u["code"] and h["message"].replace("py_add", "X") == u["message"].replace("no_such_tool", "X"), (h, u)
    r = ok("/mcp", "ab", "tools/call", call("py_add"), caps={})
    assert r["content"][0]["text"] == "3", r
    return f"py_add on alpha: {h['code']} \"{h['message']}\", like an unknown tool; on /mcp it answers 3"


def unknown_server():
    status, _, body = rpc("/mcp/gamma", "ab", "tools/list")
    assert status == 404 and "/mcp/gamma" in body["error"]["message"], (status, body)
    return f"/mcp/gamma: 404 \"{body['error']['message']}\""


def bound_tasks():
    created = ok("/mcp/alpha", "a", "tools/call", {"name": "py_slow_idempotent", "arguments": {"steps": 40, "step_ms": 250}})
    assert created.get("resultType") == "task", created
    tid = created["taskId"]
    lines = []
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        params = lambda i: {"taskId": i, **({"inputResponses": {"k": {"action": "cancel"}}} if method == "tasks/update" else {})}
        random = err("/mcp/beta", "ab", method, params("no-such-task-id"))
        for path in ("/mcp/beta", "/mcp"):
            got = err(path, "ab", method, params(tid))
            assert got == random, f"{method} on {path}: {got} vs a random id's {random}"
        lines.append(f"{method} {random[0]} {random[1]['code']}")
    deadline = time.time() + 30
    while True:  # a worker picks it up and reports progress
        task = ok("/mcp/alpha", "a", "tasks/get", {"taskId": tid})
        assert task["status"] == "working", task
        if task.get("statusMessage") not in (None, "Task accepted"):
            break
        assert time.time() < deadline, f"no worker progress in 30 s: {task}"
        time.sleep(0.5)
    ok("/mcp/alpha", "a", "tasks/cancel", {"taskId": tid})
    while ok("/mcp/alpha", "a", "tasks/get", {"taskId": tid})["status"] != "cancelled":
        assert time.time() < deadline, "not cancelled"
        time.sleep(0.2)
    return f"task {tid[:12]}… of alpha: on beta and /mcp " + ", ".join(lines) + " (as a random id); alpha saw a worker's progress and cancelled it"


check("two catalogs", catalogs)
check("two identities", identities)
check("scopes per server", scopes)
check("hidden tool is unknown", hidden)
check("unknown server", unknown_server)
check("tasks bound to their server", bound_tasks)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
