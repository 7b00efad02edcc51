#!/usr/bin/env python3
"""Interop test: drive approval-server with the official MCP Python SDK.

Nobody on the team wrote this client, so it tells us whether a real MCP host can use the
server. It connects over Streamable HTTP and over stdio (`approval-server stdio --connect`),
in each protocol era the installed SDK offers. With the 2.x SDK (`mcp.Client`):

  * mode="legacy"      the initialize handshake (2025-xx revisions, the pre-2026 behaviour)
  * mode="2026-07-28"  the stateless revision: no initialize, per-request _meta
  * mode="auto"        the 2.x default: probe server/discover, fall back to initialize

With the 1.x SDK (what most deployed Python agents still run: `streamable_http_client` /
`stdio_client` + `ClientSession`, initialize handshake at 2025-11-25) only the legacy flows.

Per connection it lists the tools (names, outputSchema, annotations) and runs a whole
proposal: prepare -> status -> list -> execute refused before quorum -> approvals by
`signer-cli` subprocesses -> status -> execute with a wrong hash (PREVIEW_MISMATCH) -> execute
(SUCCEEDED) -> execute again (ALREADY_EXECUTED_NO_REPLAY), checks the note was written exactly
once, then the refusals (UNKNOWN_KIND, INVALID_PAYLOAD, UNKNOWN_PROPOSAL, withdraw) and, over
HTTP, concurrent executes of one approved proposal (exactly one runs). The SDK validates every
success result against the tool's outputSchema. The raw-http flow (no SDK) pins the stateless
transport: no Mcp-Session-Id, JSON responses, server/discover, a 2026-07-28 tools/list and
tools/call without initialize, invalid arguments as an isError result, Host/Origin checks.

Usage (tests/interop/run.sh sets all of this up):
  python_client.py --mcp-url URL --approver-url URL --server-bin PATH --signer-bin PATH \
                   --keys-dir DIR [--sandbox-dir DIR] [--flows http-legacy,stdio-auto,...]

Exits non-zero on any failure; the last line is `N passed, N failed`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import traceback
import urllib.error
import urllib.request
import importlib.metadata
import json
import uuid
import warnings
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from mcp.client.stdio import StdioServerParameters

SDK_VERSION = importlib.metadata.version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".")[0])
if SDK_MAJOR >= 2:
    from mcp import Client
else:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

TOOLS = ["approval_prepare", "approval_status", "approval_execute", "approval_list", "approval_withdraw"]
ALL_REVISIONS = ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
MODERN = "2026-07-28"
KIND = "note.write"  # policies/note.write.toml: 2 of alice/bob/carol, carol required
HEX64 = re.compile(r"^[0-9a-f]{64}$")

FLOWS = ["http-legacy", "http-2026-07-28", "http-auto", "stdio-legacy", "stdio-2026-07-28", "stdio-auto", "raw-http"]
SDK1_FLOWS = ["http-legacy", "stdio-legacy"]


class Results:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []

    def check(self, name: str, ok: bool, detail: Any = "") -> bool:
        if ok:
            self.passed += 1
            print(f"  ok   {name}", flush=True)
        else:
            self.failed += 1
            msg = f"{name}: {detail}" if detail != "" else name
            self.failures.append(msg)
            print(f"  FAIL {msg}", flush=True)
        return ok


R = Results()

# send_ping() warns that ping is gone in 2026-07-28; we call it only on legacy connections.
warnings.filterwarnings("ignore", message="ping is removed")


def short(v: Any, n: int = 600) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
    return s if len(s) <= n else s[:n] + "..."


def wire(model: Any) -> Any:
    """An SDK model as its JSON wire form (camelCase keys), the same for SDK 1.x and 2.x."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


class Conn:
    """One SDK connection; results come back as wire dicts so the checks work on any SDK."""

    def __init__(self, flow: str, args: argparse.Namespace) -> None:
        self.transport, _, self.mode = flow.partition("-")
        self.args = args
        self.stack = AsyncExitStack()
        self.protocol_version: str | None = None
        self.capabilities: dict[str, Any] | None = None  # None: not learnt (pinned 2026-07-28)
        self._client: Any = None
        self._session: Any = None

    def _stdio(self) -> StdioServerParameters:
        if self.args.stdio_args:  # e.g. the embedded gate: `stdio --data D --policies P --keys K --listen A`
            return StdioServerParameters(command=self.args.server_bin, args=json.loads(self.args.stdio_args))
        return StdioServerParameters(command=self.args.server_bin, args=["stdio", "--connect", self.args.mcp_url])

    async def __aenter__(self) -> "Conn":
        await self.stack.__aenter__()
        try:
            if SDK_MAJOR >= 2:
                target: Any = self.args.mcp_url if self.transport == "http" else self._stdio()
                self._client = await self.stack.enter_async_context(
                    Client(target, mode=self.mode, read_timeout_seconds=60))
                self.protocol_version = self._client.protocol_version
                if self.mode != MODERN:  # a pinned version adopts a synthesized discover result
                    self.capabilities = wire(self._client.server_capabilities)
            else:
                if self.transport == "http":
                    read, write, _ = await self.stack.enter_async_context(streamable_http_client(self.args.mcp_url))
                else:
                    read, write = await self.stack.enter_async_context(stdio_client(self._stdio()))
                self._session = await self.stack.enter_async_context(
                    ClientSession(read, write, read_timeout_seconds=timedelta(seconds=60)))
                init = await self._session.initialize()
                self.protocol_version = init.protocolVersion
                self.capabilities = wire(init.capabilities)
        except BaseException:
            await self.stack.__aexit__(*sys.exc_info())
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stack.__aexit__(*exc)

    async def ping(self) -> Any:
        return await (self._client.send_ping() if SDK_MAJOR >= 2 else self._session.send_ping())

    async def list_tools(self) -> list[dict[str, Any]]:
        res = await (self._client.list_tools() if SDK_MAJOR >= 2 else self._session.list_tools())
        return [wire(t) for t in res.tools]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The result as a wire dict: content, structuredContent, isError."""
        if SDK_MAJOR >= 2:
            return wire(await self._client.call_tool(name, arguments))
        return wire(await self._session.call_tool(name, arguments))


def dump_result(res: Any) -> str:
    return short(res, 1500)


def contains(value: Any, needle: str) -> bool:
    """Whether the string `needle` appears as a value anywhere inside a JSON value."""
    if value == needle:
        return True
    if isinstance(value, dict):
        return any(contains(v, needle) for v in value.values())
    if isinstance(value, list):
        return any(contains(v, needle) for v in value)
    return False


# ---------------------------------------------------------------------------------------------
# Checks shared by every SDK flow


def check_tools(flow: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    by_name = {t.get("name"): t for t in tools}
    R.check(f"{flow}: tools/list has the five tools", all(n in by_name for n in TOOLS), sorted(by_name))
    R.check(f"{flow}: no approve tool is exposed", not any("approve" in n for n in by_name), sorted(by_name))
    for n in TOOLS:
        t = by_name.get(n)
        if t is None:
            continue
        ins, outs = t.get("inputSchema"), t.get("outputSchema")
        R.check(f"{flow}: {n} has an inputSchema of type object",
                isinstance(ins, dict) and ins.get("type") == "object", short(ins))
        R.check(f"{flow}: {n} has an outputSchema (type object)",
                isinstance(outs, dict) and outs.get("type") == "object", short(outs))
        R.check(f"{flow}: {n} has a description", bool(t.get("description")))
    ann = {n: ((by_name.get(n) or {}).get("annotations") or {}) for n in TOOLS}
    for n in ("approval_status", "approval_list"):
        R.check(f"{flow}: {n} readOnlyHint is true", ann[n].get("readOnlyHint") is True, ann[n])
    a = ann["approval_execute"]
    R.check(f"{flow}: approval_execute destructiveHint is true", a.get("destructiveHint") is True, a)
    R.check(f"{flow}: approval_execute idempotentHint is false", a.get("idempotentHint") is False, a)
    R.check(f"{flow}: approval_execute is not readOnly", a.get("readOnlyHint") is not True, a)
    return by_name


def structured(flow: str, label: str, res: Any, *, error: bool) -> dict[str, Any]:
    """Assert the shape every result must have and return its structuredContent."""
    sc = res.get("structuredContent")
    kind = "an isError result" if error else "a success result"
    R.check(f"{flow}: {label} is {kind}", bool(res.get("isError")) == error, dump_result(res))
    R.check(f"{flow}: {label} carries structuredContent (object)", isinstance(sc, dict), dump_result(res))
    if not isinstance(sc, dict):
        return {}
    R.check(f"{flow}: {label} structuredContent has a string code", isinstance(sc.get("code"), str), short(sc))
    texts = [c.get("text") for c in res.get("content") or [] if c.get("type") == "text"]
    mirrored = False
    for t in texts:
        try:
            if json.loads(t) == sc:
                mirrored = True
        except (ValueError, TypeError):
            pass
    R.check(f"{flow}: {label} mirrors structuredContent as JSON text", mirrored, short(texts))
    if error:
        R.check(f"{flow}: {label} refusal has message and retry_allowed",
                isinstance(sc.get("message"), str) and isinstance(sc.get("retry_allowed"), bool), short(sc))
    return sc


def sign(args: argparse.Namespace, approver: str, proposal_id: str) -> bool:
    key = os.path.join(args.keys_dir, f"{approver}.key")
    cmd = [args.signer_bin, "--server", args.approver_url, "--key", key, "approve", proposal_id, "--yes"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return R.check(f"signer-cli approve as {approver}", False, repr(e))
    return R.check(f"signer-cli approve {proposal_id} as {approver} exits 0", p.returncode == 0,
                   f"exit {p.returncode}; stdout={short(p.stdout)} stderr={short(p.stderr)}")


async def run_proposal(flow: str, client: Conn, args: argparse.Namespace) -> None:
    marker = f"interop {flow} {uuid.uuid4()}"
    payload = {"text": marker}

    # prepare
    res = await client.call_tool("approval_prepare", {"kind": KIND, "payload": payload, "summary": f"interop test ({flow})"})
    sc = structured(flow, "prepare", res, error=False)
    R.check(f"{flow}: prepare code is PENDING_QUORUM", sc.get("code") == "PENDING_QUORUM", short(sc))
    pid, sha, preview = sc.get("proposal_id"), sc.get("preview_sha256"), sc.get("preview")
    R.check(f"{flow}: prepare gives a proposal_id", isinstance(pid, str) and pid != "", short(sc))
    R.check(f"{flow}: prepare gives a 64-hex preview_sha256", isinstance(sha, str) and bool(HEX64.match(sha)), sha)
    ok_preview = isinstance(preview, dict)
    R.check(f"{flow}: preview is the canonical object (v, kind, payload, proposal_id, requested_by)",
            ok_preview and preview.get("v") == 1 and preview.get("kind") == KIND and preview.get("payload") == payload
            and preview.get("proposal_id") == pid and preview.get("requested_by") == "local", short(preview))
    if not (isinstance(pid, str) and pid and isinstance(sha, str)):
        R.check(f"{flow}: proposal flow aborted (no proposal id)", False)
        return

    # status while pending
    res = await client.call_tool("approval_status", {"proposal_id": pid})
    sc = structured(flow, "status (pending)", res, error=False)
    R.check(f"{flow}: status is PENDING, not executable",
            sc.get("status") == "PENDING" and sc.get("executable") is False and sc.get("code") == "PENDING_QUORUM",
            short(sc))
    R.check(f"{flow}: status has retry_allowed", isinstance(sc.get("retry_allowed"), bool), short(sc))

    # list
    res = await client.call_tool("approval_list", {})
    sc = structured(flow, "list", res, error=False)
    R.check(f"{flow}: list includes the new proposal", contains(sc, pid), short(sc))
    res = await client.call_tool("approval_list", {"status": "PENDING"})
    sc = structured(flow, "list status=PENDING", res, error=False)
    R.check(f"{flow}: list status=PENDING includes the new proposal", contains(sc, pid), short(sc))

    # execute before quorum: refused, nothing runs
    res = await client.call_tool("approval_execute", {"proposal_id": pid, "preview_sha256": sha})
    sc = structured(flow, "execute before quorum", res, error=True)
    R.check(f"{flow}: execute before quorum is refused with a non-success code",
            sc.get("code") not in (None, "SUCCEEDED", "QUORUM_REACHED"), short(sc))

    # the humans sign
    sign(args, "alice", pid)
    sign(args, "carol", pid)

    res = await client.call_tool("approval_status", {"proposal_id": pid, "wait_seconds": 2})
    sc = structured(flow, "status (approved)", res, error=False)
    R.check(f"{flow}: status after 2 approvals is QUORUM_REACHED / APPROVED / executable",
            sc.get("code") == "QUORUM_REACHED" and sc.get("status") == "APPROVED" and sc.get("executable") is True,
            short(sc))
    R.check(f"{flow}: status names both approvers", contains(sc, "alice") and contains(sc, "carol"), short(sc))

    # execute with a wrong hash: refused, still executable afterwards
    wrong = ("0" if sha[0] != "0" else "1") + sha[1:]
    res = await client.call_tool("approval_execute", {"proposal_id": pid, "preview_sha256": wrong})
    sc = structured(flow, "execute with a wrong hash", res, error=True)
    R.check(f"{flow}: wrong hash gives PREVIEW_MISMATCH", sc.get("code") == "PREVIEW_MISMATCH", short(sc))

    # execute: runs once
    res = await client.call_tool("approval_execute", {"proposal_id": pid, "preview_sha256": sha})
    sc = structured(flow, "execute", res, error=False)
    R.check(f"{flow}: execute code is SUCCEEDED", sc.get("code") == "SUCCEEDED", short(sc))

    # and never again
    res = await client.call_tool("approval_execute", {"proposal_id": pid, "preview_sha256": sha})
    sc = structured(flow, "second execute", res, error=True)
    R.check(f"{flow}: second execute code is ALREADY_EXECUTED_NO_REPLAY",
            sc.get("code") == "ALREADY_EXECUTED_NO_REPLAY", short(sc))
    R.check(f"{flow}: second execute is not retry_allowed", sc.get("retry_allowed") is False, short(sc))

    res = await client.call_tool("approval_status", {"proposal_id": pid})
    sc = structured(flow, "status (done)", res, error=False)
    R.check(f"{flow}: status after execute is SUCCEEDED, not executable",
            sc.get("status") == "SUCCEEDED" and sc.get("executable") is False, short(sc))
    check_effect_once(flow, args, marker)


def check_effect_once(flow: str, args: argparse.Namespace, marker: str) -> None:
    """The note executor wrote the payload's text to exactly one file in the sandbox."""
    if not args.sandbox_dir:
        return
    hits = []
    if os.path.isdir(args.sandbox_dir):
        for name in sorted(os.listdir(args.sandbox_dir)):
            try:
                with open(os.path.join(args.sandbox_dir, name), encoding="utf-8", errors="replace") as f:
                    if marker in f.read():
                        hits.append(name)
            except OSError:
                pass
    R.check(f"{flow}: the effect happened exactly once (one sandbox note holds the text)", len(hits) == 1,
            f"{len(hits)} files in {args.sandbox_dir}: {hits}")


async def run_concurrent_execute(flow: str, client: Conn, args: argparse.Namespace, n: int = 6) -> None:
    """n concurrent approval_execute calls on one approved proposal: exactly one runs the effect."""
    marker = f"interop concurrent {flow} {uuid.uuid4()}"
    res = await client.call_tool("approval_prepare", {"kind": KIND, "payload": {"text": marker}})
    sc = structured(flow, "prepare (concurrent execute)", res, error=False)
    pid, sha = sc.get("proposal_id"), sc.get("preview_sha256")
    if not isinstance(pid, str) or not isinstance(sha, str):
        return
    sign(args, "bob", pid)
    sign(args, "carol", pid)
    results = await asyncio.gather(*[
        client.call_tool("approval_execute", {"proposal_id": pid, "preview_sha256": sha}) for _ in range(n)])
    codes = sorted(str((r.get("structuredContent") or {}).get("code")) for r in results)
    ok = [i for i, r in enumerate(results)
          if not r.get("isError") and (r.get("structuredContent") or {}).get("code") == "SUCCEEDED"]
    R.check(f"{flow}: {n} concurrent executes: exactly one SUCCEEDED", len(ok) == 1, codes)
    R.check(f"{flow}: {n} concurrent executes: the others refused (ALREADY_EXECUTED_NO_REPLAY / EXECUTION_IN_PROGRESS)",
            all(r.get("isError") and (r.get("structuredContent") or {}).get("code") in
                ("ALREADY_EXECUTED_NO_REPLAY", "EXECUTION_IN_PROGRESS")
                for i, r in enumerate(results) if i not in ok), codes)
    check_effect_once(f"{flow} concurrent", args, marker)


async def run_refusals(flow: str, client: Conn) -> None:
    res = await client.call_tool("approval_prepare", {"kind": "no.such.kind", "payload": {"text": "x"}})
    sc = structured(flow, "prepare unknown kind", res, error=True)
    R.check(f"{flow}: unknown kind gives UNKNOWN_KIND", sc.get("code") == "UNKNOWN_KIND", short(sc))

    res = await client.call_tool("approval_prepare", {"kind": KIND, "payload": {"wrong": 1}})
    sc = structured(flow, "prepare payload off-schema", res, error=True)
    R.check(f"{flow}: off-schema payload gives INVALID_PAYLOAD", sc.get("code") == "INVALID_PAYLOAD", short(sc))

    res = await client.call_tool("approval_status", {"proposal_id": "no-such-proposal"})
    sc = structured(flow, "status unknown proposal", res, error=True)
    R.check(f"{flow}: unknown proposal gives UNKNOWN_PROPOSAL", sc.get("code") == "UNKNOWN_PROPOSAL", short(sc))

    res = await client.call_tool("approval_prepare", {"kind": KIND, "payload": {"text": f"withdraw me {uuid.uuid4()}"}})
    sc = structured(flow, "prepare (to withdraw)", res, error=False)
    pid = sc.get("proposal_id")
    if isinstance(pid, str):
        res = await client.call_tool("approval_withdraw", {"proposal_id": pid})
        sc = structured(flow, "withdraw", res, error=False)
        R.check(f"{flow}: withdraw gives WITHDRAWN", sc.get("code") == "WITHDRAWN" or sc.get("status") == "WITHDRAWN",
                short(sc))
        res = await client.call_tool("approval_withdraw", {"proposal_id": pid})
        sc = structured(flow, "withdraw again", res, error=True)
        R.check(f"{flow}: second withdraw is refused with a code", isinstance(sc.get("code"), str), short(sc))


async def sdk_flow(name: str, args: argparse.Namespace) -> None:
    transport, _, mode = name.partition("-")
    flow = f"mcp{SDK_VERSION} {name}"
    print(f"== {flow}: MCP Python SDK {SDK_VERSION}, {transport}, mode={mode}", flush=True)
    try:
        async with Conn(name, args) as client:
            pv = client.protocol_version
            if mode == "legacy":
                R.check(f"{flow}: negotiated a handshake-era revision", pv in ALL_REVISIONS[:-1], pv)
                R.check(f"{flow}: negotiated the latest handshake revision 2025-11-25", pv == "2025-11-25", pv)
            else:
                R.check(f"{flow}: speaks {MODERN}", pv == MODERN, pv)
            if client.capabilities is not None:
                R.check(f"{flow}: server declares the tools capability",
                        isinstance(client.capabilities.get("tools"), dict), client.capabilities)
            if mode == "legacy":
                R.check(f"{flow}: ping answers", (await client.ping()) is not None)
            tools = await client.list_tools()
            check_tools(flow, tools)
            await run_proposal(flow, client, args)
            await run_refusals(flow, client)
            if transport == "http":
                await run_concurrent_execute(flow, client, args)
    except BaseException as e:  # noqa: BLE001 - report, count, go on with the next flow
        if isinstance(e, KeyboardInterrupt):
            raise
        R.check(f"{flow}: flow ran without exception", False, describe(e))


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
    where = ""
    tb = traceback.extract_tb(leaves[0].__traceback__) if leaves and leaves[0].__traceback__ else []
    if tb:
        where = f" (at {tb[-1].filename}:{tb[-1].lineno} in {tb[-1].name})"
    return "; ".join(f"{type(x).__name__}: {x}" for x in leaves)[:1500] + where


# ---------------------------------------------------------------------------------------------
# Raw HTTP checks (no SDK): the stateless Streamable HTTP transport itself


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers or {})
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, hdrs, raw = r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
    text = raw.decode("utf-8", "replace")
    try:
        data: Any = json.loads(text) if text.strip() else None
    except ValueError:
        data = text
    return status, hdrs, data


def meta_2026() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "interop-raw", "version": "1.0.0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }


def raw_flow(args: argparse.Namespace) -> None:
    flow = "raw-http"
    url = args.mcp_url
    print(f"== {flow}: raw JSON-RPC over HTTP", flush=True)
    try:
        st, h, d = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "interop-raw", "version": "1"}}})
        R.check(f"{flow}: initialize 2025-03-26 answers 200 JSON", st == 200 and "application/json" in h.get("content-type", ""),
                f"{st} {h.get('content-type')} {short(d)}")
        R.check(f"{flow}: initialize 2025-03-26 negotiates 2025-03-26",
                isinstance(d, dict) and d.get("result", {}).get("protocolVersion") == "2025-03-26", short(d))
        R.check(f"{flow}: stateless: no Mcp-Session-Id header", "mcp-session-id" not in h, h)

        st, h, d = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
                        {"MCP-Protocol-Version": "2025-06-18"})
        ok = isinstance(d, dict) and isinstance(d.get("result", {}).get("tools"), list)
        R.check(f"{flow}: 2025-06-18 tools/list without session answers", st == 200 and ok, f"{st} {short(d)}")

        st, h, d = post(url, {"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {"_meta": meta_2026()}},
                        {"MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"})
        res = d.get("result", {}) if isinstance(d, dict) else {}
        R.check(f"{flow}: server/discover answers 200", st == 200 and isinstance(res, dict) and res != {}, f"{st} {short(d)}")
        R.check(f"{flow}: server/discover lists 2026-07-28 in supportedVersions",
                MODERN in (res.get("supportedVersions") or []), short(res))
        R.check(f"{flow}: server/discover declares the tools capability",
                isinstance((res.get("capabilities") or {}).get("tools"), dict), short(res))
        print(f"  info server/discover supportedVersions: {res.get('supportedVersions')}", flush=True)

        hdr = {"MCP-Protocol-Version": MODERN}
        st, h, d = post(url, {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": meta_2026()}},
                        {**hdr, "Mcp-Method": "tools/list"})
        tools = d.get("result", {}).get("tools") if isinstance(d, dict) else None
        R.check(f"{flow}: 2026-07-28 tools/list without initialize",
                st == 200 and isinstance(tools, list) and {t.get("name") for t in tools} >= set(TOOLS), f"{st} {short(d)}")

        st, h, d = post(url, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "approval_status", "arguments": {"proposal_id": "no-such-proposal"}, "_meta": meta_2026()}},
                        {**hdr, "Mcp-Method": "tools/call", "Mcp-Name": "approval_status"})
        res = d.get("result", {}) if isinstance(d, dict) else {}
        R.check(f"{flow}: 2026-07-28 tools/call gives isError with structuredContent.code UNKNOWN_PROPOSAL",
                st == 200 and res.get("isError") is True and (res.get("structuredContent") or {}).get("code") == "UNKNOWN_PROPOSAL",
                f"{st} {short(d)}")

        st, h, d = post(url, {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
            "name": "approval_prepare", "arguments": {"kind": KIND, "payload": {"text": f"raw {uuid.uuid4()}"}},
            "_meta": meta_2026()}}, {**hdr, "Mcp-Method": "tools/call", "Mcp-Name": "approval_prepare"})
        res = d.get("result", {}) if isinstance(d, dict) else {}
        sc = res.get("structuredContent") or {}
        R.check(f"{flow}: 2026-07-28 tools/call approval_prepare gives PENDING_QUORUM",
                st == 200 and res.get("isError") in (None, False) and sc.get("code") == "PENDING_QUORUM", f"{st} {short(d)}")
        if isinstance(sc.get("proposal_id"), str):
            post(url, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                "name": "approval_withdraw", "arguments": {"proposal_id": sc["proposal_id"]}, "_meta": meta_2026()}},
                 {**hdr, "Mcp-Method": "tools/call", "Mcp-Name": "approval_withdraw"})

        st, h, d = post(url, {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
            "name": "no_such_tool", "arguments": {}, "_meta": meta_2026()}},
                        {**hdr, "Mcp-Method": "tools/call", "Mcp-Name": "no_such_tool"})
        R.check(f"{flow}: 2026-07-28 unknown tool is a protocol or tool error",
                isinstance(d, dict) and ("error" in d or (d.get("result") or {}).get("isError") is True), f"{st} {short(d)}")

        # SEP-1303 (2025-11-25): arguments that fail the tool's inputSchema are a tool execution
        # error (isError: true), not a JSON-RPC protocol error: the model must see it to correct itself.
        st, h, d = post(url, {"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {
            "name": "approval_prepare", "arguments": {}}}, {"MCP-Protocol-Version": "2025-11-25"})
        R.check(f"{flow}: tools/call with arguments off the inputSchema gives an isError result, not a JSON-RPC error",
                isinstance(d, dict) and "error" not in d and (d.get("result") or {}).get("isError") is True, f"{st} {short(d)}")

        own = urlsplit(url)
        for origin in (f"http://{own.netloc}", f"http://localhost:{own.port}"):
            st, h, d = post(url, {"jsonrpc": "2.0", "id": 12, "method": "tools/list", "params": {}},
                            {"Origin": origin, "MCP-Protocol-Version": "2025-11-25"})
            R.check(f"{flow}: a loopback Origin ({origin}) is accepted", st == 200 and isinstance(d, dict) and "result" in d,
                    f"{st} {short(d)}")

        st, h, d = post(url, {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}},
                        {"Host": "evil.example.com"})
        R.check(f"{flow}: a foreign Host header is refused with 4xx", 400 <= st < 500, f"{st} {short(d)}")
        st, h, d = post(url, {"jsonrpc": "2.0", "id": 10, "method": "tools/list", "params": {}},
                        {"Origin": "http://evil.example.com"})
        R.check(f"{flow}: a foreign Origin header is refused with 4xx", 400 <= st < 500, f"{st} {short(d)}")
    except Exception as e:  # noqa: BLE001
        R.check(f"{flow}: flow ran without exception", False, describe(e))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mcp-url", required=True)
    ap.add_argument("--approver-url", required=True)
    ap.add_argument("--server-bin", required=True)
    ap.add_argument("--signer-bin", required=True)
    ap.add_argument("--keys-dir", required=True, help="holds alice.key, bob.key, carol.key")
    ap.add_argument("--sandbox-dir", help="the note executor's folder (<data>/sandbox): checks each effect happened once")
    ap.add_argument("--stdio-args", help="JSON list: the stdio flows launch `server-bin ARGS` instead of `stdio --connect URL`")
    ap.add_argument("--flows", help=f"comma-separated subset of {FLOWS} (SDK 1.x: of {SDK1_FLOWS}); default all")
    args = ap.parse_args()
    allowed = FLOWS if SDK_MAJOR >= 2 else SDK1_FLOWS
    flows = [f for f in (args.flows or ",".join(allowed)).split(",") if f]
    for f in flows:
        if f not in allowed:
            ap.error(f"flow {f!r} is not one of {allowed} (mcp {SDK_VERSION})")
    print(f"mcp (Python SDK) {SDK_VERSION}", flush=True)
    for f in flows:
        if f == "raw-http":
            raw_flow(args)
        else:
            asyncio.run(sdk_flow(f, args))
    if R.failures:
        print("\nFailures:", flush=True)
        for m in R.failures:
            print(f"  - {m[:2000]}", flush=True)
    print(f"{R.passed} passed, {R.failed} failed", flush=True)
    return 0 if R.failed == 0 and R.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
