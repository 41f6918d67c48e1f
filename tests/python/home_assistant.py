"""Home Assistant core run headless for tests and benchmarks: a temporary
config dir with a template light, onboarding, the Ollama integration added
through HA's own config-flow API, and its conversation and service APIs. Standard
library only (it runs under any Python; HA itself runs from its venv).
Home Assistant 2026 keeps an integration's agents as config subentries:
the config flow adds the server, a subentry flow each agent or AI task."""

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from conftest import free_port

LIGHT = "light.kitchen_lights"

CONFIGURATION = """
homeassistant:
  name: Home
  latitude: 52.37
  longitude: 4.89
  elevation: 0
  unit_system: metric
  time_zone: UTC
  currency: EUR
  country: NL
  language: en
http:
  server_host: 127.0.0.1
  server_port: {port}
api:
config:
onboarding:
conversation:
logger:
  default: warning
input_boolean:
  kitchen:
    name: Kitchen power
light:
  - platform: template
    lights:
      kitchen_lights:
        friendly_name: Kitchen Lights
        value_template: "{{{{ is_state('input_boolean.kitchen', 'on') }}}}"
        turn_on:
          action: input_boolean.turn_on
          target:
            entity_id: input_boolean.kitchen
        turn_off:
          action: input_boolean.turn_off
          target:
            entity_id: input_boolean.kitchen
"""


class HomeAssistant:
    def __init__(self, url):
        self.url = url
        self.token = None

    def call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
            return json.loads(text) if text else None

    def onboard(self):
        client_id = f"{self.url}/"
        created = self.call("POST", "/api/onboarding/users", {
            "client_id": client_id, "name": "Owner", "username": "owner",
            "password": "a-long-test-password", "language": "en",
        })
        form = urllib.parse.urlencode(
            {"grant_type": "authorization_code", "code": created["auth_code"], "client_id": client_id}
        ).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{self.url}/auth/token", data=form), timeout=30) as r:
            self.token = json.loads(r.read())["access_token"]

    def flow(self, step, body):
        return self.call("POST", f"/api/config/config_entries/flow/{step['flow_id']}", body)

    def state(self, entity_id):
        return self.call("GET", f"/api/states/{entity_id}")["state"]

    def service(self, domain, service, body):
        """Calls a service that returns data; returns that data."""
        result = self.call("POST", f"/api/services/{domain}/{service}?return_response", body, timeout=120)
        return result["service_response"]

    def process(self, agent_id, text, conversation_id=None):
        body = {"text": text, "agent_id": agent_id, "language": "en"}
        if conversation_id:
            body["conversation_id"] = conversation_id
        return self.call("POST", "/api/conversation/process", body, timeout=120)


def wait_for(what, probe, seconds=60):
    deadline = time.time() + seconds
    while True:
        value = probe()
        if value:
            return value
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def answers(probe):
    def attempt():
        try:
            return probe()
        except (urllib.error.URLError, ConnectionError, OSError):
            return None
    return attempt



def start(python, log_name="hass.log"):
    """Starts Home Assistant as `python -m homeassistant` (`python` is the
    venv's bin/python; its console scripts name the path the venv was made
    at, which a shared target directory may not keep) on a free loopback
    port with a fresh config dir, waits for it to serve and onboards it. Returns
    (process, HomeAssistant with an owner's token, config dir)."""
    config = Path(tempfile.mkdtemp())
    port = free_port()
    (config / "configuration.yaml").write_text(CONFIGURATION.format(port=port))
    log = open(config / log_name, "w")
    process = subprocess.Popen(
        [str(python), "-m", "homeassistant", "--config", str(config), "--skip-pip", "--log-file", str(config / "home-assistant.log")],
        stdout=log, stderr=subprocess.STDOUT, env={k: v for k, v in os.environ.items() if not k.startswith("OAP_")},
    )
    ha = HomeAssistant(f"http://127.0.0.1:{port}")
    try:
        def ready():
            assert process.poll() is None, (config / log_name).read_text()
            return answers(lambda: ha.call("GET", "/api/onboarding"))()
        wait_for("Home Assistant to serve onboarding", ready, seconds=180)
        ha.onboard()
    except BaseException:
        stop(process)
        raise
    return process, ha, config


def stop(process):
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def agents(ha, domain="conversation"):
    """The entities of `domain`; for conversation agents, those that may
    control the home (Assist API)."""
    return {
        state["entity_id"]
        for state in ha.call("GET", "/api/states")
        if state["entity_id"].startswith(f"{domain}.")
        and (domain != "conversation" or state["attributes"].get("supported_features", 0) & 1)
    }


def finish(ha, step, path):
    """Follows a flow's progress steps (a model pull, HA showing its
    progress meanwhile) until the flow is done."""
    deadline = time.time() + 60
    while step["type"] in ("progress", "progress_done"):
        assert time.time() < deadline, f"the pull did not finish: {step}"
        if step["type"] == "progress":
            time.sleep(0.2)
            step = ha.call("GET", f"{path}/{step['flow_id']}")
        else:
            step = ha.call("POST", f"{path}/{step['flow_id']}", {})
    assert step["type"] == "create_entry", step
    return step


def add_ollama(ha, url):
    """The Ollama integration's own config flow, as the UI drives it: the
    server's URL, which HA checks by listing its models. Returns the
    loaded config entry's id; its agents are subentries (`add_agent`)."""
    step = ha.call("POST", "/api/config/config_entries/flow", {"handler": "ollama", "show_advanced_options": False})
    assert step["type"] == "form" and step["step_id"] == "user", step
    step = ha.flow(step, {"url": url})
    assert step["type"] == "create_entry", step
    entry_id = step["result"]["entry_id"]
    wait_for("the Ollama config entry", lambda: loaded(ha, entry_id))
    return entry_id


def loaded(ha, entry_id):
    entries = ha.call("GET", "/api/config/config_entries/entry?domain=ollama")
    return any(e["entry_id"] == entry_id and e["state"] == "loaded" for e in entries)


def add_agent(ha, entry_id, model, name, kind="conversation", **options):
    """A subentry of the Ollama entry, as "Add conversation agent" / "Add
    AI task" in the UI: a name and the model (pulled when the server lacks
    it), for a conversation agent the Assist API and `options` (say
    think=True). Returns the new entity's id (conversation.* that may
    control the home, or ai_task.*)."""
    domain = "conversation" if kind == "conversation" else "ai_task"
    before = agents(ha, domain)
    path = "/api/config/config_entries/subentries/flow"
    step = ha.call("POST", path, {"handler": [entry_id, kind]})
    assert step["type"] == "form" and step["step_id"] == "set_options", step
    body = {"name": name, "model": model, "num_ctx": 8192, "max_history": 20, "keep_alive": -1, **options}
    if kind == "conversation":
        body["llm_hass_api"] = ["assist"]
    finish(ha, ha.call("POST", f"{path}/{step['flow_id']}", body), path)

    def new_entity():
        # The entry reloads with its new subentry, whose entity then shows.
        fresh = agents(ha, domain) - before - {"conversation.home_assistant"}
        return loaded(ha, entry_id) and len(fresh) == 1 and fresh.pop()

    return wait_for(f"the Ollama {kind} entity {name!r}", new_entity)
