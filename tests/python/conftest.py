"""Fixtures: the real oapd binary in front of the scripted fake Ollama.

Both are started as processes on loopback ports; the fake is driven through
its control endpoints (/_fake/...), so each test scripts exactly what "the
model" answers and can read back what oapd forwarded.
"""

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release"
MODEL_DIR = Path(os.environ.get("OAPD_MODEL_DIR", REPO / "models" / "all-MiniLM-L6-v2"))

SCRIPT = {
    "models": [
        {"name": "qwen3:4b", "capabilities": ["completion", "tools"]},
        {"name": "tiny", "capabilities": ["completion"]},
        {"name": "gemma3:1b", "capabilities": ["completion", "tools"]},
        {"name": "qwen3:8b", "capabilities": ["completion", "tools", "thinking"]},
    ],
    "turns": [],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(method, url, body=None, token=None):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
        return json.loads(text) if text else None


class Fake:
    def __init__(self, url):
        self.url = url

    def turns(self, *turns):
        http_json("POST", f"{self.url}/_fake/turns", list(turns))

    def reset(self):
        http_json("POST", f"{self.url}/_fake/reset", {})

    def requests(self, path):
        return http_json("GET", f"{self.url}/_fake/requests?path={path}")

    def chat_requests(self):
        return [r["body"] for r in http_json("GET", f"{self.url}/_fake/requests?path=/api/chat")]


def launch_fake(script):
    """Starts the fake on a free loopback port; returns (process, Fake)."""
    binary = TARGET / "fake-ollama"
    assert binary.is_file(), f"{binary} missing: build with `cargo build --release -p fake-ollama`"
    path = Path(tempfile.mkdtemp()) / "script.json"
    path.write_text(json.dumps(script))
    process = subprocess.Popen([str(binary), "--script", str(path), "--port", "0"], stdout=subprocess.PIPE, text=True)
    address = process.stdout.readline().strip()
    assert address, "fake-ollama printed no address"
    return process, Fake(f"http://{address}")


def launch_oapd(fake_url, extra_config="", server_config="", extra_listen=(), token=None):
    """Starts the real daemon in front of `fake_url` with a fresh data dir;
    `server_config` is YAML lines added to its `server:` section,
    `extra_config` whole sections appended, `extra_listen` more addresses
    to listen on. Returns (process, url) once /health answers (with
    `token` as the bearer token when given; without one, 127.0.0.1 must be
    trusted when the config sets a token)."""
    binary = TARGET / "oapd"
    assert binary.is_file(), f"{binary} missing: build with `cargo build --release -p oapd`"
    assert (MODEL_DIR / "model.safetensors").is_file(), "model missing: run `cargo xtask fetch-model`"
    state = Path(tempfile.mkdtemp())
    port = free_port()
    config = state / "config.yaml"
    config.write_text(
        f"server:\n  listen: {json.dumps([f'127.0.0.1:{port}', *extra_listen])}\n"
        + server_config
        + f"index:\n  data_dir: {json.dumps(str(state / 'data'))}\n"
        f"embedding:\n  model_dir: {json.dumps(str(MODEL_DIR))}\n"
        f"ollama:\n  base_url: {json.dumps(fake_url)}\n"
        + extra_config
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OAP_")}
    # Request generation would call the fake Ollama at its own times.
    env["OAP_DISCOVERY_GENERATE_REQUESTS"] = "false"
    log = open(state / "oapd.log", "w")
    process = subprocess.Popen([str(binary), "--config", str(config), "serve"], stderr=log, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            http_json("GET", f"{url}/health", token=token)
            break
        except Exception:
            assert process.poll() is None, (state / "oapd.log").read_text()
            assert time.time() < deadline, "oapd did not become ready"
            time.sleep(0.1)
    return process, url


@pytest.fixture(scope="session")
def fake():
    process, handle = launch_fake(SCRIPT)
    yield handle
    process.kill()
    process.wait()


@pytest.fixture(scope="session")
def oapd(fake):
    # Keep-alives after one second of silence, so the slow-model tests see
    # them without waiting long.
    process, url = launch_oapd(fake.url, "tool_bridge:\n  stream_keepalive: 1\n")
    yield url
    process.terminate()
    process.wait(timeout=20)


@pytest.fixture(autouse=True)
def fresh_fake(fake):
    fake.reset()
    yield
