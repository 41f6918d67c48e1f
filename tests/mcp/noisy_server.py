"""An MCP stdio server that talks as fast as it can, in plain JSON-RPC (the
SDK would pace it). Usage: noisy_server.py [MARKER_DIR]

Once initialized it sends, in a tight loop and for as long as it runs,
`notifications/message` (log messages), `notifications/tools/list_changed`
and `notifications/progress`, and writes a line to stderr each round; every
text carries the word NOISEMARK, so a test can look for it in the daemon's
log. Meanwhile it answers requests as a normal server: one tool, `shout`
(upper-cases `text`), whose list never really changes. Each `tools/list` it
answers appends a line to MARKER_DIR/lists.
"""

import json
import os
import sys
import threading

MARKERS = sys.argv[1] if len(sys.argv) > 1 else None
write_lock = threading.Lock()


def send(obj):
    line = json.dumps(obj) + "\n"
    with write_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def marker(name, text):
    if MARKERS:
        with open(os.path.join(MARKERS, name), "a") as f:
            f.write(text + "\n")


TOOLS = [
    {
        "name": "shout",
        "description": "Shouts a word back in capital letters.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    }
]


def spam():
    n = 0
    while True:
        n += 1
        send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "logger": "noisy", "data": f"NOISEMARK log message {n} " + "x" * 200},
            }
        )
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "NOISEMARK", "progress": n, "message": "NOISEMARK progress"},
            }
        )
        sys.stderr.write(f"NOISEMARK stderr line {n}\n")
        sys.stderr.flush()


def main():
    started = False
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method = msg.get("method")
        mid = msg.get("id")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": mid,
                    "result": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {"listChanged": True}, "logging": {}},
                        "serverInfo": {"name": "noisy NOISEMARK", "version": "1"},
                    },
                }
            )
        elif method == "notifications/initialized":
            if not started:
                started = True
                threading.Thread(target=spam, daemon=True).start()
        elif method == "tools/list":
            marker("lists", "listed")
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            text = ((msg.get("params") or {}).get("arguments") or {}).get("text", "")
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text.upper()}]}})
        elif mid is not None:
            send({"jsonrpc": "2.0", "id": mid, "result": {}})


main()
