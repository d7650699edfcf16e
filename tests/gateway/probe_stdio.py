"""Raw JSON-lines MCP probe over stdio (stdlib only), used to write FACTS.md.

Starts a server command, does the initialize handshake with the given client
capabilities and protocol version, runs a script of requests, answers the
server's own requests (roots/list, elicitation/create, sampling/createMessage)
with canned answers, and prints every line on the wire with a timestamp.

    python probe_stdio.py --caps '{"elicitation":{}}' --script script.json -- CMD ARGS...

script.json: a list of steps, each one of
  {"send": {<request without jsonrpc/id>}}            send and wait for its response
  {"send": {...}, "nowait": true}                      send, do not wait
  {"notify": {<notification without jsonrpc>}}
  {"sleep": seconds}
Every run is bounded by --timeout (default 30 s); the server is killed at the end.
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time

T0 = time.monotonic()


def log(direction: str, obj) -> None:
    text = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    print(f"[{time.monotonic() - T0:7.3f}] {direction} {text}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--caps", default="{}")
    ap.add_argument("--protocol", default="2025-11-25")
    ap.add_argument("--script", default=None)
    ap.add_argument("--steps", default=None, help="inline JSON list of steps")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--linger", type=float, default=0.0, help="seconds to keep reading at the end")
    ap.add_argument("--elicit-action", default="accept")
    ap.add_argument("--elicit-content", default='{"name":"Ada"}')
    ap.add_argument("--roots", default='[{"uri":"file:///tmp/presa-root","name":"presa-root"}]')
    ap.add_argument("--stderr", action="store_true", help="show the server's stderr lines")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd

    steps = []
    if a.script:
        with open(a.script) as f:
            steps = json.load(f)
    if a.steps:
        steps = json.loads(a.steps)

    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    inbox: queue.Queue = queue.Queue()

    def reader():
        for line in proc.stdout:
            inbox.put(line)
        inbox.put(None)

    def errreader():
        for line in proc.stderr:
            if a.stderr:
                log("ERR", line.rstrip("\n"))

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=errreader, daemon=True).start()
    deadline = time.monotonic() + a.timeout
    next_id = [0]

    def write(obj):
        log("C->S", obj)
        proc.stdin.write(json.dumps(obj) + "\n")
        proc.stdin.flush()

    def answer(msg):
        m = msg.get("method")
        if m == "roots/list":
            write({"jsonrpc": "2.0", "id": msg["id"], "result": {"roots": json.loads(a.roots)}})
        elif m == "elicitation/create":
            res = {"action": a.elicit_action}
            if a.elicit_action == "accept":
                res["content"] = json.loads(a.elicit_content)
            write({"jsonrpc": "2.0", "id": msg["id"], "result": res})
        elif m == "sampling/createMessage":
            write({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "role": "assistant", "content": {"type": "text", "text": "canned sample"},
                "model": "probe-model", "stopReason": "endTurn"}})
        elif m == "ping":
            write({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
        else:
            write({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "probe: not handled"}})

    def pump(until_id=None, until_time=None):
        while True:
            limit = deadline if until_time is None else min(deadline, until_time)
            left = limit - time.monotonic()
            if left <= 0:
                return None
            try:
                line = inbox.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                log("EOF", "server stdout closed")
                return None
            line = line.rstrip("\n")
            try:
                msg = json.loads(line)
            except ValueError:
                log("S->C(non-json)", line)
                continue
            log("S->C", msg)
            if "method" in msg and "id" in msg:
                answer(msg)
            elif until_id is not None and msg.get("id") == until_id and "method" not in msg:
                return msg

    def request(body, wait=True):
        next_id[0] += 1
        rid = next_id[0]
        write({"jsonrpc": "2.0", "id": rid, **body})
        return pump(until_id=rid) if wait else None

    try:
        request({"method": "initialize", "params": {
            "protocolVersion": a.protocol, "capabilities": json.loads(a.caps),
            "clientInfo": {"name": "presa-probe", "version": "0"}}})
        write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for st in steps:
            if "sleep" in st:
                pump(until_time=time.monotonic() + st["sleep"])
            elif "notify" in st:
                write({"jsonrpc": "2.0", **st["notify"]})
            elif "send" in st:
                t = time.monotonic()
                request(st["send"], wait=not st.get("nowait"))
                if not st.get("nowait"):
                    log("INFO", f"request took {time.monotonic() - t:.3f}s")
        if a.linger:
            pump(until_time=time.monotonic() + a.linger)
    finally:
        try:
            proc.stdin.close()
        except Exception:
            pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
