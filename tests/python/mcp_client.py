"""A second, independent MCP client for `kiki mcp`: the Python SDK from PyPI (`mcp`).

Run by tests/tests/it/mcp.rs as `python3 mcp_client.py KIKI HOME WORKDIR ROOM OTHER`. It
starts `kiki --home HOME mcp` over stdio, lists the tools, and calls each tool's success
path. The SDK checks every tool's structuredContent against the outputSchema kiki listed,
so a result that does not match its own schema fails here. Prints one JSON line: the
negotiated protocol version and the tools' answers it checked.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(kiki: str, home: str, workdir: str, room: str, other: str) -> None:
    server = StdioServerParameters(command=kiki, args=["--home", home, "mcp"])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            tools = (await session.list_tools()).tools
            assert [t.name for t in tools] == [
                "ThreadCreate", "ThreadList", "ThreadRead", "ThreadSend", "ThreadWait", "RoomRead", "RoomAdd",
            ], [t.name for t in tools]

            async def call(name: str, arguments: dict) -> dict:
                result = await session.call_tool(name, arguments)
                text = " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")
                assert not result.is_error, f"{name}: {text}"
                assert result.structured_content is not None, name
                return result.structured_content

            created = await call("ThreadCreate", {"cwd": workdir, "prompt": "from python"})
            thread = created["id"]
            listed = await call("ThreadList", {"limit": 5})
            assert any(t["id"] == thread for t in listed["threads"]), listed
            waited = await call("ThreadWait", {"targets": [{"session_id": thread}], "timeout_ms": 10000})
            assert waited["results"][0]["events"], waited
            read = await call("ThreadRead", {"session_id": thread})
            assert read["turns"][0]["output"] == "echo: from python", read
            sent = await call("ThreadSend", {"session_id": thread, "content": "again", "idempotency_key": "py-1"})
            added = await call("RoomAdd", {"room": room, "session_id": other})
            posted = await call("ThreadSend", {"room": room, "content": "hello room"})
            log = await call("RoomRead", {"room": room})
            assert any(e["content"] == "hello room" for e in log["entries"]), log
            refused = await session.call_tool("ThreadList", {"limit": 101})
            assert refused.is_error, refused
            print(json.dumps({
                "protocol": str(init.protocol_version),
                "server": init.server_info.name,
                "sent": sent["status"],
                "added": added["added"],
                "posted": posted["status"],
                "refused": refused.content[0].text,
            }))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
