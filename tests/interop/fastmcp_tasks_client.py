#!/usr/bin/env python3
"""Interop test: FastMCP's client with the MCP tasks extension against a gated tool (issue #33).

A third-party client (FastMCP 4.x with `fastmcp_tasks`, Streamable HTTP, protocol 2026-07-28)
calls a gated tool under its own name and simply waits (`await client.call_tool(...)`): the gate
answers with an MCP task, FastMCP polls `tasks/get` by itself, two approvers sign with real
`signer-cli` processes meanwhile, the gate runs the downstream tool once, and the call returns the
downstream tool's own result. The downstream is a real third-party MCP server, the reference
`@modelcontextprotocol/server-filesystem` from npm (installed by run.sh).

This script starts its own approval-server (`serve`, a loopback port chosen by the OS) on a data
folder and a policy written for this run, in --work-dir:

    kind fs.write_file, expose = true, quorum 2 of alice/bob/carol, one veto ends it,
    pass_through = ["read_text_file"], executor mcp: `node <index.js> <work>/allowed`,
    tool write_file, payload_schema_from_tool = true

Checks: the downstream's own tools/list (the names this test relies on exist); FastMCP speaks
2026-07-28 (server/discover, no initialize) and declares the tasks extension; tools/list shows
fs.write_file with write_file's inputSchema, and read_text_file, but neither write_file nor any
other downstream tool; the approve flow (a task, polled until two signatures, the real
"Successfully wrote" result, the file's exact content, SUCCEEDED, a replayed approval_execute
refused with ALREADY_EXECUTED_NO_REPLAY and no second write); the pass-through read (content back,
no proposal, no task); the reject flow (isError, code REJECTED, nothing written).

Usage (tests/interop/run.sh sets this up):
  fastmcp_tasks_client.py --server-bin PATH --signer-bin PATH --keys-dir DIR --keyring FILE \
                          --work-dir DIR --filesystem-server PATH/dist/index.js [--node node]

Exits non-zero on any failure; the last line is `N passed, N failed`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import time
import traceback
from collections import Counter
from typing import Any

import fastmcp_tasks  # noqa: F401  (registers the client side of the tasks extension: without it, no tasks)
import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

VERSIONS = {p: importlib.metadata.version(p) for p in ("fastmcp-slim", "fastmcp-tasks", "mcp")}
MODERN = "2026-07-28"
TASKS_EXT = "io.modelcontextprotocol/tasks"
KIND = "fs.write_file"
GATED_TOOL = "write_file"
PASS_THROUGH = "read_text_file"
# Downstream tools that must stay hidden (not gated, not passed through).
HIDDEN = ["move_file", "edit_file", "create_directory", "list_directory"]
GATE_TOOLS = ["approval_prepare", "approval_status", "approval_execute", "approval_list", "approval_withdraw"]
CALL_TIMEOUT = 120  # seconds: the whole wait of one gated call (approvals included)


class Results:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []

    def check(self, name: str, ok: bool, detail: Any = "") -> bool:
        if ok:
            self.passed += 1
            print(f"  PASS {name}", flush=True)
        else:
            self.failed += 1
            msg = f"{name}: {detail}" if detail != "" else name
            self.failures.append(msg)
            print(f"  FAIL {msg}", flush=True)
        return ok


R = Results()


def short(v: Any, n: int = 600) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
    return s if len(s) <= n else s[:n] + "..."


def info(msg: str) -> None:
    print(f"  info {msg}", flush=True)


def describe(e: BaseException) -> str:
    """The leaf exceptions of a (possibly grouped) exception, with where the first was raised."""
    leaves: list[BaseException] = []

    def walk(x: BaseException) -> None:
        subs = getattr(x, "exceptions", None)
        if isinstance(subs, (list, tuple)) and subs:
            for sub in subs:
                walk(sub)
        else:
            leaves.append(x)

    walk(e)
    tb = traceback.extract_tb(leaves[0].__traceback__) if leaves and leaves[0].__traceback__ else []
    where = f" (at {tb[-1].filename}:{tb[-1].lineno} in {tb[-1].name})" if tb else ""
    return "; ".join(f"{type(x).__name__}: {x}" for x in leaves)[:1500] + where


def texts(result: Any) -> list[str]:
    return [getattr(c, "text", "") for c in (result.content or []) if getattr(c, "type", None) == "text"]


# ---------------------------------------------------------------------------------------------
# The downstream server, asked directly (raw JSON-RPC over stdio): which tools it really has


def downstream_tools(node: str, index: str, allowed: str) -> dict[str, Any]:
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "interop-fastmcp-probe", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]
    p = subprocess.Popen([node, index, allowed], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        assert p.stdin is not None and p.stdout is not None
        for m in msgs:
            p.stdin.write(json.dumps(m) + "\n")
        p.stdin.flush()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("id") == 2:
                return {t["name"]: t for t in m.get("result", {}).get("tools", [])}
        return {}
    finally:
        p.kill()
        p.wait()


# ---------------------------------------------------------------------------------------------
# The gate this test runs (its own approval-server process)


class Gate:
    def __init__(self, args: argparse.Namespace, root: str) -> None:
        self.args = args
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None
        self.mcp_url = ""
        self.approver_url = ""

    def start(self) -> None:
        out_path = os.path.join(self.root, "server.out")
        err_path = os.path.join(self.root, "server.err")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [self.args.server_bin, "serve", "--data", os.path.join(self.root, "data"),
                 "--policies", os.path.join(self.root, "policies"), "--keys", self.args.keyring,
                 "--listen", "127.0.0.1:0"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(out_path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            m1 = re.search(r"^MCP endpoint: (http\S+)$", text, re.M)
            m2 = re.search(r"^Approver API: (http\S+)$", text, re.M)
            if m1 and m2:
                self.mcp_url, self.approver_url = m1.group(1), m2.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"approval-server exited ({self.proc.returncode}) before listening: {text}{self.log_tail()}")
            time.sleep(0.1)
        raise RuntimeError(f"approval-server printed no URLs within 30 s{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(os.path.join(self.root, "server.err"), encoding="utf-8", errors="replace") as f:
                lines = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in f.read().splitlines()]
        except OSError:
            return ""
        picked = [l for l in lines if " WARN " in l or " ERROR " in l] or lines
        return "\napproval-server stderr (last lines):\n" + "\n".join(picked[-n:])


def write_policy(root: str, node: str, index: str, allowed: str) -> None:
    q = json.dumps  # a TOML basic string is a JSON string here (paths, plain words)
    policy = f"""# Written by tests/interop/fastmcp_tasks_client.py for one run.
kind = "{KIND}"
description = "Write a file through the reference filesystem MCP server (interop test)"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "10m"
execute_within = "5m"
expose = true
pass_through = [{q(PASS_THROUGH)}]

[executor]
type = "mcp"
command = [{q(node)}, {q(index)}, {q(allowed)}]
tool = "{GATED_TOOL}"
timeout = "30s"
payload_schema_from_tool = true
"""
    os.makedirs(os.path.join(root, "policies"), exist_ok=True)
    with open(os.path.join(root, "policies", f"{KIND}.toml"), "w", encoding="utf-8") as f:
        f.write(policy)


# ---------------------------------------------------------------------------------------------
# Approvers: real signer-cli processes (async, so FastMCP keeps polling meanwhile)


async def signer(args: argparse.Namespace, gate: Gate, who: str, *cmd: str) -> tuple[int, str, str]:
    argv = [args.signer_bin, "--server", gate.approver_url, "--key", os.path.join(args.keys_dir, f"{who}.key"),
            "--known-servers", os.path.join(gate.root, "known_servers"), *cmd]
    p = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(p.communicate(), timeout=60)
    except asyncio.TimeoutError:
        p.kill()
        await p.wait()
        return -1, "", "timed out after 60 s"
    return p.returncode or 0, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


async def pending(args: argparse.Namespace, gate: Gate) -> list[dict[str, Any]]:
    rc, out, err = await signer(args, gate, "alice", "--json", "pending")
    if rc != 0:
        raise RuntimeError(f"signer-cli pending exited {rc}: {err.strip()}")
    return json.loads(out).get("proposals", [])


async def find_proposal(args: argparse.Namespace, gate: Gate, known: set[str], call: asyncio.Task[Any]) -> dict[str, Any] | None:
    """The new pending fs.write_file proposal that the running call made (via signed reads)."""
    deadline = time.monotonic() + 30
    while True:
        done = call.done()  # a call that ended may still have made one: look once more
        for p in await pending(args, gate):
            if p.get("kind") == KIND and p.get("proposal_id") not in known:
                return p
        if done or time.monotonic() > deadline:
            return None
        await asyncio.sleep(0.1)


async def decide(flow: str, args: argparse.Namespace, gate: Gate, who: str, verb: str, pid: str) -> bool:
    rc, out, err = await signer(args, gate, who, verb, pid, "--yes", "--reason", f"interop {flow}")
    return R.check(f"{flow}: signer-cli {verb} as {who} exits 0", rc == 0,
                   f"exit {rc}; stdout={short(out)} stderr={short(err)}")


# ---------------------------------------------------------------------------------------------
# What FastMCP sends (an httpx event hook on the client it uses)


class Wire:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def on_request(self, request: httpx2.Request) -> None:
        body: Any = None
        try:
            body = json.loads(request.content or b"null")
        except (ValueError, httpx2.RequestNotRead):
            pass
        method = body.get("method") if isinstance(body, dict) else None
        self.requests.append({
            "method": method or request.headers.get("mcp-method"),
            "header_method": request.headers.get("mcp-method"),
            "version": request.headers.get("mcp-protocol-version"),
            "name_header": request.headers.get("mcp-name"),
            "body": body,
        })

    def factory(self, **kwargs: Any) -> httpx2.AsyncClient:
        kwargs.setdefault("timeout", httpx2.Timeout(30.0, read=300.0))
        return httpx2.AsyncClient(event_hooks={"request": [self.on_request]}, **kwargs)

    def count(self, method: str) -> int:
        return sum(1 for r in self.requests if r["method"] == method)

    def calls(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "tools/call"]


# ---------------------------------------------------------------------------------------------


def ended(call: asyncio.Task[Any]) -> str:
    """How a finished call ended, for a failure message."""
    if not call.done():
        return "still running"
    if call.cancelled():
        return "cancelled"
    e = call.exception()
    return f"it already ended: {describe(e)}" if e else f"it already returned: {short(repr(call.result()))}"


async def call_and_decide(flow: str, client: Client, args: argparse.Namespace, gate: Gate, wire: Wire,
                          arguments: dict[str, Any], decisions: list[tuple[str, str]]) -> tuple[Any, dict[str, Any] | None]:
    """Starts `client.call_tool(KIND, arguments)` and, while FastMCP waits on it, finds the
    proposal and has `decisions` made with signer-cli; returns (the call's result, the proposal)."""
    known = {p.get("proposal_id") for p in await pending(args, gate)}
    polls_before = wire.count("tasks/get")
    started = time.monotonic()
    call = asyncio.create_task(client.call_tool(KIND, arguments, timeout=CALL_TIMEOUT, raise_on_error=False))
    prop = await find_proposal(args, gate, known, call)
    R.check(f"{flow}: the call made a pending {KIND} proposal (signer-cli pending)", prop is not None,
            "none appeared within 30 s; " + ended(call))
    if prop is None:
        call.cancel()
        return None, None
    pid = str(prop.get("proposal_id"))
    R.check(f"{flow}: signer-cli checked the proposal (preview hash matches)", prop.get("checked") is True, short(prop))
    rc, out, err = await signer(args, gate, "alice", "--json", "show", pid)
    shown: Any = None
    try:
        shown = json.loads(out)
    except ValueError:
        pass
    blob = json.dumps(shown)
    R.check(f"{flow}: the signed preview says execution on_quorum and carries the call's arguments",
            rc == 0 and '"execution": "on_quorum"' in blob and all(json.dumps(v) in blob for v in arguments.values()),
            f"exit {rc}; {short(out or err, 1500)}")
    for i, (who, verb) in enumerate(decisions):
        R.check(f"{flow}: the call is still waiting before decision {i + 1} ({verb} by {who})", not call.done(),
                ended(call))
        await decide(flow, args, gate, who, verb, pid)
    try:
        result = await call
    except BaseException as e:  # noqa: BLE001
        R.check(f"{flow}: FastMCP's call_tool returns", False, describe(e))
        return None, prop
    polls = wire.count("tasks/get") - polls_before
    info(f"{flow}: call_tool returned after {time.monotonic() - started:.1f} s and {polls} tasks/get poll(s)")
    R.check(f"{flow}: FastMCP waited on a task (it polled tasks/get)", polls >= 1, polls)
    tg = [r for r in wire.requests if r["method"] == "tasks/get"]
    R.check(f"{flow}: every tasks/get names the proposal as its taskId",
            bool(tg) and all((r["body"] or {}).get("params", {}).get("taskId") == pid for r in tg[-polls:]),
            short([(r["body"] or {}).get("params", {}).get("taskId") for r in tg[-polls:]]))
    return result, prop


async def phase(name: str, body: Any) -> Any:
    """Runs one part of the flow; an exception fails it (and is counted) without ending the run."""
    print(f"== {name}", flush=True)
    try:
        return await body
    except Exception as e:  # noqa: BLE001
        R.check(f"{name}: ran without exception", False, describe(e))
        return None


async def check_connect(client: Client, wire: Wire) -> None:
    flow = "connect"
    pv = client.protocol_version
    R.check(f"{flow}: FastMCP negotiated {MODERN}", pv == MODERN, pv)
    methods = [r["method"] for r in wire.requests]
    R.check(f"{flow}: it asked server/discover and sent no initialize",
            "server/discover" in methods and "initialize" not in methods, methods)
    info(f"negotiated {pv}; requests so far: {methods}")


async def check_tools(client: Client, down: dict[str, Any]) -> None:
    flow = "tools/list"
    tools = {t.name: t for t in await client.list_tools()}
    info(f"tools/list: {sorted(tools)}")
    t = tools.get(KIND)
    R.check(f"{flow}: the exposed kind {KIND} is a tool", t is not None, sorted(tools))
    want = (down.get(GATED_TOOL) or {}).get("inputSchema")
    R.check(f"{flow}: {KIND} has the downstream {GATED_TOOL}'s inputSchema",
            t is not None and want is not None and t.input_schema == want,
            f"listed {short(t.input_schema if t else None)}; downstream {short(want)}")
    desc = (t.description or "") if t else ""
    R.check(f"{flow}: {KIND}'s description is the downstream's and says who must approve",
            desc.startswith(((down.get(GATED_TOOL) or {}).get("description") or "?")[:40])
            and "2 of alice, bob, carol" in desc, short(desc))
    meta = ((t.meta or {}) if t else {}).get("dev.approval-gate/approval") or {}
    R.check(f"{flow}: {KIND}'s _meta says it runs on quorum", meta.get("execution") == "on_quorum", short(meta))
    p = tools.get(PASS_THROUGH)
    R.check(f"{flow}: the pass-through {PASS_THROUGH} is listed as the downstream defines it",
            p is not None and p.input_schema == (down.get(PASS_THROUGH) or {}).get("inputSchema"),
            short(p.input_schema if p else sorted(tools)))
    R.check(f"{flow}: the gated downstream tool {GATED_TOOL} itself is not listed", GATED_TOOL not in tools,
            sorted(tools))
    R.check(f"{flow}: other downstream tools ({', '.join(HIDDEN)}) are not listed",
            not any(h in tools for h in HIDDEN), sorted(tools))
    R.check(f"{flow}: the gate's own tools are still there", all(g in tools for g in GATE_TOOLS), sorted(tools))


async def approve_flow(client: Client, args: argparse.Namespace, gate: Gate, wire: Wire,
                       target: str, content: str) -> dict[str, Any] | None:
    """alice and bob approve while FastMCP waits on the task; returns the proposal."""
    flow = "approve"
    result, prop = await call_and_decide(flow, client, args, gate, wire, {"path": target, "content": content},
                                         [("alice", "approve"), ("bob", "approve")])
    calls = [r for r in wire.calls() if (r["body"] or {}).get("params", {}).get("name") == KIND]
    caps = ((calls[-1]["body"] or {}).get("params", {}).get("_meta", {}) if calls else {}).get(
        "io.modelcontextprotocol/clientCapabilities", {})
    R.check(f"{flow}: FastMCP's tools/call declared the tasks extension, at {MODERN}",
            bool(calls) and TASKS_EXT in (caps.get("extensions") or {}) and calls[-1]["version"] == MODERN,
            short(calls[-1] if calls else wire.requests))
    if result is not None:
        words = texts(result)
        R.check(f"{flow}: the result is the downstream tool's own success (not an error)",
                not result.is_error and any(w.startswith("Successfully wrote to") for w in words),
                f"is_error={result.is_error} content={short(words)} structured={short(result.structured_content)}")
        info(f"{flow}: result text {short(words, 200)}; _meta {short(result.meta, 300)}")
        R.check(f"{flow}: the result carries the tool-approval disposition approved-executed",
                (result.meta or {}).get("io.modelcontextprotocol/tool-approval-disposition") == "approved-executed",
                short(result.meta))
    if prop is not None:
        st = await client.call_tool("approval_status", {"proposal_id": prop["proposal_id"], "wait_seconds": 5},
                                    raise_on_error=False)
        sc = st.structured_content or {}
        R.check(f"{flow}: approval_status says SUCCEEDED", sc.get("status") == "SUCCEEDED", short(sc))
    try:
        with open(target, encoding="utf-8") as f:
            got = f.read()
    except OSError as e:
        got = repr(e)
    R.check(f"{flow}: the file holds exactly the content", got == content, repr(got))
    return prop


def listed_ids(result: Any) -> set[str]:
    return set(re.findall(r'"proposal_id": "([^"]+)"', json.dumps(result.structured_content)))


async def pass_through_flow(client: Client, args: argparse.Namespace, gate: Gate, wire: Wire,
                            path: str, content: str) -> None:
    """read_text_file straight through: the content back, no proposal, no task."""
    flow = "pass-through"
    before = listed_ids(await client.call_tool("approval_list", {}, raise_on_error=False))
    n_pending, polls = len(await pending(args, gate)), wire.count("tasks/get")
    try:
        read = await client.call_tool(PASS_THROUGH, {"path": path}, timeout=60, raise_on_error=False)
        R.check(f"{flow}: {PASS_THROUGH} returns the file's content",
                not read.is_error and content in "".join(texts(read)), f"is_error={read.is_error} {short(texts(read))}")
        info(f"{flow}: {PASS_THROUGH} structuredContent {short(read.structured_content, 200)}")
    except Exception as e:  # noqa: BLE001 - the checks below still say whether a proposal was made
        R.check(f"{flow}: FastMCP accepts {PASS_THROUGH}'s result", False, describe(e))
    after = listed_ids(await client.call_tool("approval_list", {}, raise_on_error=False))
    R.check(f"{flow}: no proposal was made (approval_list unchanged)", after == before,
            f"new: {sorted(after - before)}")
    R.check(f"{flow}: nothing new waits for approvers (signer-cli pending)", len(await pending(args, gate)) == n_pending)
    R.check(f"{flow}: answered at once, no task polled", wire.count("tasks/get") == polls,
            wire.count("tasks/get") - polls)


async def exactly_once_flow(client: Client, prop: dict[str, Any], target: str, content: str) -> None:
    """After it ran: the agent's own execute is refused, and the downstream does not write again."""
    flow = "exactly once"
    marked = content + " (marked after the run)"
    with open(target, "w", encoding="utf-8") as f:
        f.write(marked)
    again = await client.call_tool("approval_execute",
                                   {"proposal_id": prop["proposal_id"], "preview_sha256": prop.get("preview_sha256")},
                                   raise_on_error=False)
    sc = again.structured_content or {}
    R.check(f"{flow}: approval_execute afterwards is refused ALREADY_EXECUTED_NO_REPLAY",
            again.is_error and sc.get("code") == "ALREADY_EXECUTED_NO_REPLAY", short(sc))
    await asyncio.sleep(0.3)
    with open(target, encoding="utf-8") as f:
        R.check(f"{flow}: the downstream did not write a second time", f.read() == marked)


async def reject_flow(client: Client, args: argparse.Namespace, gate: Gate, wire: Wire, allowed: str) -> None:
    """carol rejects while FastMCP waits: the call returns the refusal, nothing is written."""
    flow = "reject"
    rejected = os.path.join(allowed, "rejected.txt")
    result, _ = await call_and_decide(flow, client, args, gate, wire,
                                      {"path": rejected, "content": "never written"}, [("carol", "reject")])
    if result is not None:
        sc = result.structured_content or {}
        R.check(f"{flow}: the call returns an error result (isError true)", result.is_error is True,
                f"is_error={result.is_error} {short(texts(result))}")
        R.check(f"{flow}: its structured content code is REJECTED", sc.get("code") == "REJECTED", short(sc))
        info(f"{flow}: result text {short(texts(result), 200)}")
        R.check(f"{flow}: the disposition is denied-not-executed",
                (result.meta or {}).get("io.modelcontextprotocol/tool-approval-disposition") == "denied-not-executed",
                short(result.meta))
    R.check(f"{flow}: the file was not written", not os.path.exists(rejected))


async def run(args: argparse.Namespace, gate: Gate, allowed: str, down: dict[str, Any]) -> None:
    wire = Wire()
    transport = StreamableHttpTransport(gate.mcp_url, httpx_client_factory=wire.factory)
    target = os.path.join(allowed, "from-a-task.txt")
    content = "hello from a task"
    seed = os.path.join(allowed, "seed.txt")  # what the pass-through reads if the approve flow wrote nothing
    with open(seed, "w", encoding="utf-8") as f:
        f.write("seeded by the test")
    async with Client(transport) as client:
        await phase("connect", check_connect(client, wire))
        await phase("tools/list", check_tools(client, down))
        prop = await phase("approve: FastMCP waits on a task while alice and bob sign",
                           approve_flow(client, args, gate, wire, target, content))
        written = os.path.exists(target)
        await phase("pass-through: read_text_file goes straight to the downstream",
                    pass_through_flow(client, args, gate, wire, target if written else seed,
                                      content if written else "seeded by the test"))
        if prop is not None:
            await phase("exactly once", exactly_once_flow(client, prop, target, content))
        await phase("reject: carol vetoes while FastMCP waits", reject_flow(client, args, gate, wire, allowed))

        counts = Counter(r["method"] for r in wire.requests)
        info(f"wire: {dict(sorted(counts.items()))}; protocol headers {sorted({str(r['version']) for r in wire.requests})}")
        tg = [r for r in wire.requests if r["method"] == "tasks/get"]
        info(f"wire: {sum(1 for r in tg if r['name_header'])} of {len(tg)} tasks/get carried an Mcp-Name header "
             "(FastMCP sends none; the extension says the client MUST, so a server that insists refuses FastMCP)")
        R.check("wire: FastMCP never called tasks/result or tasks/cancel",
                counts["tasks/result"] == 0 and counts["tasks/cancel"] == 0, dict(counts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-bin", required=True)
    ap.add_argument("--signer-bin", required=True)
    ap.add_argument("--keys-dir", required=True, help="holds alice.key, bob.key, carol.key")
    ap.add_argument("--keyring", required=True, help="their public keys (the server's --keys file)")
    ap.add_argument("--work-dir", required=True, help="a folder of this run's (the gate's data, policy, allowed dir)")
    ap.add_argument("--filesystem-server", required=True, help="dist/index.js of @modelcontextprotocol/server-filesystem")
    ap.add_argument("--node", default="node")
    args = ap.parse_args()
    print("FastMCP tasks client: " + ", ".join(f"{k} {v}" for k, v in VERSIONS.items()), flush=True)
    started = time.monotonic()

    root = os.path.abspath(os.path.join(args.work_dir, "fastmcp"))
    allowed = os.path.join(root, "allowed")
    os.makedirs(allowed, exist_ok=True)
    allowed = os.path.realpath(allowed)  # the filesystem server compares resolved paths

    print("== downstream: @modelcontextprotocol/server-filesystem, tools/list (raw stdio)", flush=True)
    down = downstream_tools(args.node, args.filesystem_server, allowed)
    for name in (GATED_TOOL, PASS_THROUGH, *HIDDEN):
        R.check(f"downstream: the pinned server has a {name} tool", name in down, sorted(down))

    write_policy(root, args.node, args.filesystem_server, allowed)
    gate = Gate(args, root)
    try:
        gate.start()
        print(f"== FastMCP over Streamable HTTP: {gate.mcp_url} (approver API {gate.approver_url})", flush=True)
        asyncio.run(run(args, gate, allowed, down))
    except BaseException as e:  # noqa: BLE001 - report, count, and stop
        if isinstance(e, KeyboardInterrupt):
            raise
        R.check("the FastMCP flow ran without exception", False, describe(e))
    finally:
        gate.stop()
    if R.failures:
        print(gate.log_tail(), flush=True)
        print("\nFailures:", flush=True)
        for m in R.failures:
            print(f"  - {m[:2000]}", flush=True)
    info(f"FastMCP flow took {time.monotonic() - started:.1f} s")
    print(f"{R.passed} passed, {R.failed} failed", flush=True)
    return 0 if R.failed == 0 and R.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
