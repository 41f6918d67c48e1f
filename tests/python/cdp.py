"""Headless Chromium driven over the DevTools protocol through a pipe
(`--remote-debugging-pipe`: commands on fd 3, answers and events on fd 4,
each message JSON ended by a NUL byte). Nothing to install beyond the
browser: no driver binary, no WebSocket library, no port to open.

The browser answers HTTP authentication challenges itself with the
credentials given (`Fetch.authRequired`), as a person would in the native
prompt, and records every console message, uncaught exception and log
entry so a test can assert that the page made none at error level.
"""

import base64
import json
import os
import queue
import signal
import tempfile
import threading
import time
from pathlib import Path

CHROMIUM = os.environ.get("OAPD_CHROMIUM", "/usr/bin/chromium")

# This machine's network is closed, and a test talks to loopback only:
# nothing in the background, no component or safe-browsing downloads.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider",
    "--metrics-recording-only",
    "--password-store=basic",
    "--use-mock-keychain",
    "--remote-debugging-pipe",
]


class CdpError(Exception):
    pass


class Browser:
    """One Chromium process with one page target."""

    def __init__(self, credentials=None, log_path=None):
        self.credentials = credentials
        self.profile = tempfile.mkdtemp(prefix="oapd-chromium-")
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()
        log = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        argv = [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"]
        self.pid = os.posix_spawn(
            CHROMIUM,
            argv,
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, commands_read, 3),
                (os.POSIX_SPAWN_DUP2, answers_write, 4),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
            ],
        )
        for fd in (commands_read, answers_write, log):
            os.close(fd)
        self._next_id = 0
        self._write_lock = threading.Lock()
        self._pending = {}
        self._pending_lock = threading.Lock()
        self.events = []
        self.errors = []
        self.auth_challenges = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = None

    # ---- the pipe ----------------------------------------------------------

    def _send(self, method, params=None, session=None):
        with self._pending_lock:
            self._next_id += 1
            ident = self._next_id
            answer = queue.Queue(maxsize=1)
            self._pending[ident] = answer
        message = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        with self._write_lock:
            os.write(self._commands, data)
        return answer

    def call(self, method, params=None, session="page", timeout=30):
        """Sends a command and waits for its result (a CdpError on error)."""
        session = self.session if session == "page" else session
        answer = self._send(method, params, session).get(timeout=timeout)
        if "error" in answer:
            raise CdpError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def _read(self):
        buffer = b""
        while True:
            try:
                chunk = os.read(self._answers, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                self._dispatch(json.loads(raw))

    def _dispatch(self, message):
        if "id" in message:
            with self._pending_lock:
                answer = self._pending.pop(message["id"], None)
            if answer is not None:
                answer.put(message)
            return
        method, params, session = message.get("method"), message.get("params", {}), message.get("sessionId")
        self.events.append(message)
        # Answered from the reader: the page waits on them.
        if method == "Fetch.requestPaused":
            self._send("Fetch.continueRequest", {"requestId": params["requestId"]}, session)
        elif method == "Fetch.authRequired":
            self.auth_challenges.append(params)
            if self.credentials:
                user, password = self.credentials
                response = {"response": "ProvideCredentials", "username": user, "password": password}
            else:
                response = {"response": "CancelAuth"}
            self._send(
                "Fetch.continueWithAuth",
                {"requestId": params["requestId"], "authChallengeResponse": response},
                session,
            )
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            self.errors.append({"kind": "exception", "text": text})
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.errors.append({"kind": "console", "text": text})
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append({"kind": "log", "source": entry.get("source"), "text": entry.get("text"), "url": entry.get("url")})

    # ---- the page ---------------------------------------------------------

    def open_page(self, width=1280, height=900):
        """Creates the page target and turns on what the tests watch."""
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=None)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True}, session=None)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain)
        self.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}], "handleAuthRequests": True})
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def navigate(self, url):
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CdpError(f"navigating to {url}: {result['errorText']}")

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page (awaited)."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=30, what=None):
        """Polls until the expression is truthy; returns its value."""
        deadline = time.time() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.time() > deadline:
                raise AssertionError(f"timed out waiting for {what or expression}")
            time.sleep(0.1)

    def type_into(self, selector, text):
        """Focuses an input and types into it as a keyboard would."""
        self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.focus(); e.select(); }})()")
        self.call("Input.insertText", {"text": text})

    def click(self, selector):
        """A real mouse click at the centre of the element."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})

    def screenshot(self, path, full_page=True):
        params = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            metrics = self.call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", params)["data"]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", session=None, timeout=5)
        except Exception:
            pass
        deadline = time.time() + 10
        while time.time() < deadline:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.1)
        else:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self._commands)
        os.close(self._answers)
