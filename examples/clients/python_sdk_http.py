# The approval gate from the MCP Python SDK 2.x, over Streamable HTTP.
import asyncio
import sys

from mcp import Client

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:4800/mcp"


async def main() -> None:
    async with Client(URL) as gate:
        tools = await gate.list_tools()
        print("tools:", ", ".join(t.name for t in tools.tools))
        prepared = await gate.call_tool("approval_prepare", {
            "kind": "note.write",
            "payload": {"text": "Hello from the Python SDK"},
            "summary": "Write a greeting",
        })
        proposal = prepared.structured_content
        print("prepare:", proposal["code"], proposal["proposal_id"])
        status = await gate.call_tool("approval_status", {"proposal_id": proposal["proposal_id"]})
        print("status:", status.structured_content["code"], status.structured_content["status"])


asyncio.run(main())
