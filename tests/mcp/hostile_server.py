"""An MCP stdio server that misbehaves on purpose, in plain Python (the SDK
cannot express most of this). Usage: hostile_server.py MODE [MARKER_DIR]

Every mode speaks newline-delimited JSON-RPC on stdin/stdout and offers the
tools echo, peek (reads a file), connect (opens a TCP connection to
127.0.0.1), crash (the process exits mid-call), hang (never answers; a
notifications/cancelled for it is written to MARKER_DIR/cancelled) and giant (answers with a 9 MB line), bump
(answers, then sends notifications/tools/list_changed and offers one more
tool, `added`, from then on). Modes change one thing:

  normal     behaves
  silent     never answers initialize
  flood      writes a 20 MB line of non-JSON before answering initialize
  huge       tools/list returns 10,000 tools with long descriptions
  paged      tools/list pages forever (every page has a next cursor)
  schemas    adds a tool whose inputSchema loops through $ref and one whose
             inputSchema is a string
  family     starts a grandchild (`sleep 600`) in its process group and writes
             both pids to MARKER_DIR/pids
  stderr     writes a 1 MB stderr line and many small ones at start
  mutelist   answers initialize but never tools/list (writes its pid to
             MARKER_DIR/listing when asked)
  deaf       behaves, but never answers ping (a hung server)
"""

import json
import os
import socket
import subprocess
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "normal"
MARKERS = sys.argv[2] if len(sys.argv) > 2 else None
added = False


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def marker(name, text):
    if MARKERS:
        with open(os.path.join(MARKERS, name), "a") as f:
            f.write(text + "\n")


def tool(name, description="A test tool.", schema=None):
    return {
        "name": name,
        "description": description,
        "inputSchema": schema
        or {"type": "object", "properties": {"text": {"type": "string"}}},
    }


def tools():
    out = [tool("echo", "Echoes text back."), tool("crash"), tool("hang"), tool("bump"), tool("giant")]
    out.append(tool("peek", "Reads a file.", {"type": "object", "properties": {"path": {"type": "string"}}}))
    out.append(tool("connect", "Connects to a port.", {"type": "object", "properties": {"port": {"type": "integer"}}}))
    if added:
        out.append(tool("added", "Appeared after list_changed."))
    if MODE == "schemas":
        out.append(
            tool(
                "looped",
                schema={
                    "type": "object",
                    "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
                    "properties": {"root": {"$ref": "#/$defs/node"}},
                },
            )
        )
        out.append({"name": "stringy", "description": "Bad schema.", "inputSchema": "not a schema"})
    return out


def main():
    global added
    if MODE == "family":
        child = subprocess.Popen(["sleep", "600"])
        marker("pids", f"{os.getpid()} {child.pid}")
    if MODE == "stderr":
        sys.stderr.write("x" * (1 << 20) + "\n")
        for i in range(1000):
            sys.stderr.write(f"line {i}\n")
        sys.stderr.flush()
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method = msg.get("method")
        mid = msg.get("id")
        if method == "initialize":
            if MODE == "silent":
                continue
            if MODE == "flood":
                sys.stdout.write("z" * (20 << 20) + "\n")
                sys.stdout.flush()
            send(
                {
                    "jsonrpc": "2.0",
                    "id": mid,
                    "result": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {"listChanged": True}},
                        "serverInfo": {"name": "hostile", "version": "1"},
                    },
                }
            )
        elif method == "ping":
            if MODE != "deaf":
                send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif method == "notifications/cancelled":
            marker("cancelled", json.dumps(msg.get("params", {}).get("requestId")))
        elif method == "tools/list":
            if MODE == "mutelist":
                marker("listing", str(os.getpid()))
                continue
            if MODE == "huge":
                listed = [tool(f"t{i}", "d" * 500) for i in range(10_000)]
                send({"jsonrpc": "2.0", "id": mid, "result": {"tools": listed}})
            elif MODE == "paged":
                cursor = (msg.get("params") or {}).get("cursor") or "0"
                n = int(cursor)
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": mid,
                        "result": {"tools": [tool(f"p{n}")], "nextCursor": str(n + 1)},
                    }
                )
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools()}})
        elif method == "tools/call":
            name = msg["params"]["name"]
            args = msg["params"].get("arguments") or {}
            if name == "crash":
                os._exit(3)
            elif name == "hang":
                marker("hanging", json.dumps(mid))
                continue
            elif name == "peek":
                try:
                    with open(args["path"]) as f:
                        text = "read: " + f.read(100)
                except OSError as e:
                    text = f"refused: {e}"
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
            elif name == "connect":
                try:
                    socket.create_connection(("127.0.0.1", int(args["port"])), timeout=5).close()
                    text = "connected"
                except OSError as e:
                    text = f"refused: {e}"
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
            elif name == "giant":
                # One answer of 9 MB, over the client's 8 MiB message cap.
                text = "g" * (9 * 1000 * 1000)
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
            elif name == "bump":
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "bumped"}]}})
                added = True
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            else:
                text = args.get("text", "")
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": f"{MODE}:{text}"}]}})
        elif mid is not None:
            send({"jsonrpc": "2.0", "id": mid, "result": {}})


main()
