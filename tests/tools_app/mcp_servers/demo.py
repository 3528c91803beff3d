"""An MCP server for the tests, written with the SDK's MCPServer: well-behaved tools and misbehaving ones.

    python demo.py stdio
    python demo.py http <port>
    python demo.py sse <port>
"""

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("demo")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))  # marked read-only (approval policies may exempt it)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def env_value(name: str) -> str:
    """The value of an environment variable of the server process, or <unset>."""
    return os.environ.get(name, "<unset>")


@server.tool()
def hang(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "woke up"


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def fail(reason: str) -> str:
    """Raise an error."""
    raise ValueError(f"failed on purpose: {reason}")


@server.tool()
def flood(megabytes: int) -> str:
    """Return a very long text."""
    return "z" * (megabytes * 1024 * 1024)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run()
    elif sys.argv[1] == "sse":
        server.run(transport="sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
