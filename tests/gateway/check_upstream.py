"""Self-check for upstream.py, driven by the same mcp SDK's stdio client.

    $PYTHON tests/gateway/check_upstream.py      # prints "N passed, 0 failed", exit 0 on success

Not run by setup.sh. Bounded: the whole check gives up after 60 s.
"""

from __future__ import annotations

import os
import sys
import tempfile

import anyio

import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

HERE = os.path.dirname(os.path.abspath(__file__))
UPSTREAM = os.path.join(HERE, "upstream.py")


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def run_checks(runs_file: str) -> list[tuple[str, bool, str]]:
    results: list[tuple[str, bool, str]] = []
    elicit_answer = {"action": "accept"}
    elicit_seen: list[types.ElicitRequestParams] = []

    async def on_elicit(context, params: types.ElicitRequestParams):
        elicit_seen.append(params)
        if elicit_answer["action"] == "accept":
            return types.ElicitResult(action="accept", content={"name": "Ada"})
        return types.ElicitResult(action=elicit_answer["action"])

    def check(name: str, cond: bool, detail: str = "") -> None:
        results.append((name, bool(cond), detail))

    params = StdioServerParameters(
        command=sys.executable,
        args=[UPSTREAM],
        env={**os.environ, "PRESA_TEST_RUNS_FILE": runs_file},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
            init = await session.initialize()
            check("initialize negotiates 2025-11-25", init.protocol_version == "2025-11-25", init.protocol_version)

            tools = {t.name: t for t in (await session.list_tools()).tools}
            check("four tools listed", set(tools) == {"slow_idempotent", "slow_unsafe", "ask_name", "add"}, str(set(tools)))
            a = tools["slow_idempotent"].annotations
            check("slow_idempotent annotations", a is not None and a.idempotent_hint is True and a.read_only_hint is False, str(a))
            a = tools["slow_unsafe"].annotations
            check(
                "slow_unsafe annotations",
                a is not None and a.idempotent_hint is False and a.destructive_hint is True and a.read_only_hint is False,
                str(a),
            )

            r = await session.call_tool("add", {"a": 2, "b": 40})
            check("add 2+40", text_of(r) == "42", text_of(r))

            for tool in ("slow_idempotent", "slow_unsafe"):
                progress: list[tuple[float, float | None, str | None]] = []

                async def on_progress(p: float, total: float | None, message: str | None) -> None:
                    progress.append((p, total, message))

                r = await session.call_tool(tool, {"steps": 3, "step_ms": 50}, progress_callback=on_progress)
                check(f"{tool} result", text_of(r) == "done 3", text_of(r))
                want = [(1, 3, "step 1/3"), (2, 3, "step 2/3"), (3, 3, "step 3/3")]
                check(f"{tool} progress", [(int(p), int(t), m) for p, t, m in progress] == want, str(progress))

            r = await session.call_tool("ask_name", {})
            check("ask_name accept", text_of(r) == "hello Ada", text_of(r))
            check("elicitation message", elicit_seen and elicit_seen[-1].message == "What is your name?", str(elicit_seen))
            schema = elicit_seen[-1].requested_schema if elicit_seen else {}
            check(
                "elicitation schema",
                schema.get("required") == ["name"] and schema["properties"]["name"]["type"] == "string",
                str(schema),
            )
            elicit_answer["action"] = "decline"
            r = await session.call_tool("ask_name", {})
            check("ask_name decline", text_of(r) == "declined", text_of(r))
            elicit_answer["action"] = "cancel"
            r = await session.call_tool("ask_name", {})
            check("ask_name cancel", text_of(r) == "declined", text_of(r))

    with open(runs_file) as f:
        lines = f.read().splitlines()
    check("runs file", lines == ["slow_idempotent", "slow_unsafe"], str(lines))
    return results


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        runs_file = os.path.join(d, "runs.txt")
        results: list[tuple[str, bool, str]] = []

        async def go() -> None:
            with anyio.fail_after(60):
                results.extend(await run_checks(runs_file))

        anyio.run(go)
    failed = 0
    for name, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"))
        failed += 0 if ok else 1
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
