"""A small upstream MCP server (stdio) for presa-gateway's integration tests.

Written with the official `mcp` Python SDK (2.x, where FastMCP is called
MCPServer). Run it with the venv python that setup.sh prints:

    $PYTHON tests/gateway/upstream.py

Tools:
  slow_idempotent(steps=5, step_ms=200)  idempotentHint=true, readOnlyHint=false
  slow_unsafe(steps=5, step_ms=200)      idempotentHint=false, destructiveHint=true, readOnlyHint=false
  ask_name()                             elicits {name: string (required)}
  add(a, b)                              returns the sum as text
  whoami()                               the caller presa forwarded in _meta["dev.presa/caller"]
                                         (--upstream-forward-identity), else "nobody"
  pid()                                  this process's id (tests tell connections apart)
  register_extra(name)                   adds a tool `name` (it returns "extra <name>")
                                         and sends notifications/tools/list_changed
  environment()                          this process's environment, as a JSON object
  broken_answer()                        answers its own request with a line cut short
                                         (not valid JSON), then never answers properly
  flaky_exit(fail_times)                 idempotentHint=true: while fewer than fail_times
                                         calls came before, the process exits mid-call
                                         (os._exit(1)); then answers "ok after <n> calls"
  flaky_error(fail_times)                the same, failing with an isError result ("busy, <n>")
  flaky_rpc(fail_times)                  the same, failing with JSON-RPC error -32001 ("busy, <n>")
  exit_unsafe()                          idempotentHint=false: exits mid-call, every call
  http_refused()                         idempotentHint=false: answers "ok after <n> calls"
                                         (see --http below for how its first calls are refused)
  fragile()                              idempotentHint=true: answers "ok after <n> calls" (see --http below for how
                                         it fails while a file `down` is in PRESA_TEST_FLAKY_DIR)

Prompts:
  city_prompt()                          logs "city_prompt log line", then elicits
                                         {city: string}; its message is "city <answer>",
                                         or "city <action>" when not accepted

Resources:
  slow://sleep/{ms}                      sleeps ms milliseconds, then reads "slept <ms>"

If PRESA_TEST_RUNS_FILE is set, slow_idempotent / slow_unsafe append their own
name as one line to that file when they start, so a test can count how many
times the upstream really ran a call (the gateway passes it on only when told:
`--upstream-inherit-env PRESA_TEST_RUNS_FILE`).

The flaky tools count their calls in PRESA_TEST_FLAKY_DIR (which must be
set for them, and passed on by the gateway): each call appends one line
"<n> <unix time in seconds, float> <pid>" to <dir>/<tool>.log before it
does anything else, n being the call's number (1 for the first), so a test
sees every call the upstream received, in order, when, and in which process.

With `--http PORT` it serves Streamable HTTP on 127.0.0.1:PORT at /mcp
instead of stdio, and refuses the first two POSTs that call http_refused
before the SDK sees them: HTTP 429, then 503, each with `Retry-After: 1`,
each logged like a call (so the third line of http_refused.log is the
call the tool itself received). While a file `down` exists in
PRESA_TEST_FLAKY_DIR, every POST calling fragile gets HTTP 503 (no
Retry-After) before the SDK sees it, logged like a call in fragile.log:
the upstream is down, and its log shows every call that reached it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations

server = MCPServer(name="presa-test-upstream", version="1.0.0")


def _record_run(tool: str) -> None:
    path = os.environ.get("PRESA_TEST_RUNS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(tool + "\n")
            f.flush()


async def _slow(ctx: Context, steps: int, step_ms: int) -> str:
    for i in range(1, steps + 1):
        await asyncio.sleep(step_ms / 1000.0)
        await ctx.report_progress(i, steps, message=f"step {i}/{steps}")
    return f"done {steps}"


@server.tool(
    description="Sleeps step_ms between steps, reporting progress each step. Safe to retry.",
    annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True),
    structured_output=False,
)
async def slow_idempotent(ctx: Context, steps: int = 5, step_ms: int = 200) -> str:
    _record_run("slow_idempotent")
    return await _slow(ctx, steps, step_ms)


@server.tool(
    description="Same as slow_idempotent but must not be retried (destructive, not idempotent).",
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    structured_output=False,
)
async def slow_unsafe(ctx: Context, steps: int = 5, step_ms: int = 200) -> str:
    _record_run("slow_unsafe")
    return await _slow(ctx, steps, step_ms)


class NameForm(BaseModel):
    name: str = Field(description="Your name")


@server.tool(description="Asks the user for their name via elicitation.", structured_output=False)
async def ask_name(ctx: Context) -> str:
    result = await ctx.elicit(message="What is your name?", schema=NameForm)
    if result.action == "accept" and result.data is not None:
        return f"hello {result.data.name}"
    return "declined"


@server.tool(description="Adds two integers.", structured_output=False)
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="This server process's id.", structured_output=False)
def pid() -> str:
    return str(os.getpid())


@server.tool(description="Says who presa said the caller is.", structured_output=False)
async def whoami(ctx: Context) -> str:
    meta = ctx.request_context.meta
    extra = meta.model_dump() if hasattr(meta, "model_dump") else dict(meta or {})
    caller = extra.get("dev.presa/caller")
    return f"{caller['tenant']}/{caller['subject']}" if caller else "nobody"


@server.tool(description="Adds a tool called `name` and says the tool list changed.", structured_output=False)
async def register_extra(ctx: Context, name: str) -> str:
    def extra() -> str:
        return f"extra {name}"

    server.add_tool(extra, name=name, description=f"Added at run time: {name}.", structured_output=False)
    await ctx.session.send_tool_list_changed()
    return f"registered {name}"


@server.tool(description="This process's environment.", structured_output=False)
def environment() -> str:
    return json.dumps(dict(os.environ))


@server.tool(description="Answers with a message cut short, then hangs.", structured_output=False)
async def broken_answer(ctx: Context) -> str:
    # The SDK serves the wire from a private duplicate of fd 1 (fd 1 itself
    # goes to stderr, so stray prints cannot corrupt the stream): write there.
    from mcp.server import stdio as sdk_stdio

    claim = sdk_stdio._claims.get(1)
    wire = claim.private_fd if claim is not None and claim.private_fd is not None else 1
    request_id = json.dumps(ctx.request_context.request_id)
    os.write(wire, ('{"jsonrpc":"2.0","id":' + request_id + ',"result":{"content":[{"type":"text","text":"cut sho\n').encode())
    await asyncio.sleep(3600)
    return "never"


def _flaky_call(tool: str) -> int:
    """Log this call of `tool` (see the module's doc); its number, from 1."""
    path = os.path.join(os.environ["PRESA_TEST_FLAKY_DIR"], tool + ".log")
    with open(path, "a+", encoding="utf-8") as f:
        f.seek(0)
        n = len(f.read().splitlines()) + 1
        f.write(f"{n} {time.time():.6f} {os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())
    return n


@server.tool(
    description="Exits mid-call (a transport failure) while fewer than fail_times calls came before.",
    annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True),
    structured_output=False,
)
async def flaky_exit(fail_times: int = 2) -> str:
    n = _flaky_call("flaky_exit")
    if n <= fail_times:
        os._exit(1)
    return f"ok after {n} calls"


@server.tool(description="Fails with an isError result while fewer than fail_times calls came before.", structured_output=False)
async def flaky_error(fail_times: int = 2) -> str:
    n = _flaky_call("flaky_error")
    if n <= fail_times:
        raise ToolError(f"busy, {n}")
    return f"ok after {n} calls"


@server.tool(description="Fails with JSON-RPC error -32001 while fewer than fail_times calls came before.", structured_output=False)
async def flaky_rpc(fail_times: int = 2) -> str:
    n = _flaky_call("flaky_rpc")
    if n <= fail_times:
        raise MCPError(-32001, f"busy, {n}")
    return f"ok after {n} calls"


@server.tool(
    description="Exits mid-call, every call: not safe to call again.",
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    structured_output=False,
)
async def exit_unsafe() -> str:
    _flaky_call("exit_unsafe")
    os._exit(1)


@server.tool(
    description="Answers; its first calls over HTTP are refused with 429 and 503 (see --http).",
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    structured_output=False,
)
async def http_refused() -> str:
    n = _flaky_call("http_refused")
    return f"ok after {n} calls"


@server.tool(
    description="Answers; over HTTP it fails with 503 while PRESA_TEST_FLAKY_DIR/down exists. Safe to retry.",
    annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True),
    structured_output=False,
)
async def fragile() -> str:
    n = _flaky_call("fragile")
    return f"ok after {n} calls"


def _down() -> bool:
    return os.path.exists(os.path.join(os.environ.get("PRESA_TEST_FLAKY_DIR", ""), "down"))


@server.tool(description="Answers at once; logs each call (the gateway's rate rule spaces them).", structured_output=False)
async def metered() -> str:
    n = _flaky_call("metered")
    return f"call {n}"


@server.tool(
    description="Sleeps `seconds`; logs when each call starts and ends (the gateway's concurrency rule bounds the overlap).",
    structured_output=False,
)
async def exclusive(seconds: float = 0.5, label: str = "-") -> str:
    _span_line("exclusive", "start", label)
    await asyncio.sleep(seconds)
    _span_line("exclusive", "end", label)
    return f"ran {label}"


def _span_line(tool: str, what: str, label: str) -> None:
    """Append `<what> <label> <unix time> <pid>` to `tool`.spans in PRESA_TEST_FLAKY_DIR."""
    path = os.path.join(os.environ["PRESA_TEST_FLAKY_DIR"], tool + ".spans")
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{what} {label} {time.time():.6f} {os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())


class RefuseFirstCalls:
    """ASGI middleware: the first POSTs calling http_refused get these statuses, with Retry-After: 1;
    POSTs calling fragile get 503 while the upstream is down (PRESA_TEST_FLAKY_DIR/down)."""

    def __init__(self, app, statuses: list[int]) -> None:
        self.app = app
        self.statuses = list(statuses)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if self.statuses and b'"tools/call"' in body and b'"http_refused"' in body:
            status = self.statuses.pop(0)
            _flaky_call("http_refused")
            headers = [(b"retry-after", b"1"), (b"content-type", b"text/plain")]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b"not now"})
            return
        if b'"tools/call"' in body and b'"fragile"' in body and _down():
            _flaky_call("fragile")
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"down"})
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class CityForm(BaseModel):
    city: str = Field(description="A city")


@server.prompt(description="Logs a line, then asks which city (elicitation) before answering.")
async def city_prompt(ctx: Context) -> str:
    await ctx.info("city_prompt log line")
    result = await ctx.elicit(message="Which city?", schema=CityForm)
    if result.action == "accept" and result.data is not None:
        return f"city {result.data.city}"
    return f"city {result.action}"


@server.resource("slow://sleep/{ms}", description="Sleeps ms milliseconds, then answers.")
async def slow_resource(ms: str) -> str:
    await asyncio.sleep(int(ms) / 1000.0)
    return f"slept {ms}"


if __name__ == "__main__":
    if "--http" in sys.argv:
        import uvicorn

        port = int(sys.argv[sys.argv.index("--http") + 1])
        app = RefuseFirstCalls(server.streamable_http_app(), [429, 503])
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    else:
        server.run("stdio")
