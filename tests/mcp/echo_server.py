"""A well-behaved MCP server built with the official Python SDK (mcp 2.x).

Usage: echo_server.py stdio
       echo_server.py http      (streamable HTTP at 127.0.0.1:<n>/mcp)
       echo_server.py sse       (legacy HTTP+SSE at 127.0.0.1:<n>/sse)
       echo_server.py https CERT KEY  (streamable HTTP over TLS, PEM files)
The HTTP modes print `PORT <n>` on stdout before they listen.
"""

import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent, TextContent

server = MCPServer("echo")


@server.tool(description="Echoes the text back, prefixed with `echo: `.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="Adds two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Always fails with the given message.")
def fail(message: str) -> str:
    raise ValueError(message)


@server.tool(description="Returns a tiny PNG and a caption.")
def picture() -> list:
    return [
        TextContent(type="text", text="a picture"),
        ImageContent(type="image", mimeType="image/png", data="iVBORw0KGgo="),
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        port = free_port()
        print(f"PORT {port}", flush=True)
        server.run("streamable-http", host="127.0.0.1", port=port)
    elif mode == "https":
        import uvicorn

        port = free_port()
        print(f"PORT {port}", flush=True)
        uvicorn.run(
            server.streamable_http_app(),
            host="127.0.0.1",
            port=port,
            ssl_certfile=sys.argv[2],
            ssl_keyfile=sys.argv[3],
            log_level="warning",
        )
    elif mode == "sse":
        port = free_port()
        print(f"PORT {port}", flush=True)
        server.run("sse", host="127.0.0.1", port=port)
    else:
        server.run("stdio")
