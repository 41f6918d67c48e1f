"""Home Assistant core, the real one from PyPI, talking to oapd as its Ollama.

HA runs headless from its own venv (target/ha-venv, made by `cargo xtask
test`; OAPD_HA_VENV points elsewhere) with a temporary config dir and a
template light. The test onboards it, adds the Ollama integration through
HA's config-flow API pointed at oapd (which stands in front of the scripted
fake Ollama and lets 127.0.0.1 in without its token, the documented LAN
set-up), selects the Assist API, and talks to it through HA's conversation
API. The model is scripted; HA's tools, HA's tool loop and oapd's tool (the
bundled `wc`) are real.
"""

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, free_port, http_json, launch_fake, launch_oapd

HA_VENV = Path(os.environ.get("OAPD_HA_VENV", REPO / "target" / "ha-venv"))
HASS = HA_VENV / "bin" / "hass"
# What the fake has installed before HA comes; HA's set-up pulls MODEL.
MODEL = "llama3.1:latest"
TOKEN = "ha-suite-token-that-home-assistant-never-sends"
LIGHT = "light.kitchen_lights"
WC_CALL = {"name": "oap_wc", "arguments": {"args": "-w", "stdin": "one two three four"}}
TURN_ON = {"name": "HassTurnOn", "arguments": {"name": "Kitchen Lights", "domain": ["light"]}}

if not HASS.is_file():
    if os.environ.get("OAPD_REQUIRE_HA") == "1":
        raise RuntimeError(f"{HASS} missing: `cargo xtask test` makes the Home Assistant venv")
    pytest.skip(f"{HASS} missing: `cargo xtask test` makes the Home Assistant venv", allow_module_level=True)

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


@pytest.fixture(scope="module")
def stack():
    """fake Ollama <- oapd (token set, 127.0.0.1 trusted) <- Home Assistant,
    onboarded, with the Ollama integration set up through its config flow
    and the Assist API selected. Yields (fake, oapd url, HA, agent id)."""
    fake_process, fake = launch_fake({
        "models": [{"name": "qwen3:4b", "capabilities": ["completion", "tools"]}],
        "turns": [],
    })
    v6_port = free_port()
    oapd_process, oapd = launch_oapd(
        fake.url,
        server_config=f"  auth_token: {TOKEN}\n  trusted_clients: ['127.0.0.1/32']\n",
        # Loopback too, but not trusted: a client there needs the token.
        extra_listen=[f"[::1]:{v6_port}"],
    )
    config = Path(tempfile.mkdtemp())
    port = free_port()
    (config / "configuration.yaml").write_text(CONFIGURATION.format(port=port))
    log = open(config / "hass.log", "w")
    hass_process = subprocess.Popen(
        [str(HASS), "--config", str(config), "--skip-pip", "--log-file", str(config / "home-assistant.log")],
        stdout=log, stderr=subprocess.STDOUT, env={k: v for k, v in os.environ.items() if not k.startswith("OAP_")},
    )
    ha = HomeAssistant(f"http://127.0.0.1:{port}")
    try:
        def ready():
            assert hass_process.poll() is None, (config / "hass.log").read_text()
            return answers(lambda: ha.call("GET", "/api/onboarding"))()
        wait_for("Home Assistant to serve onboarding", ready, seconds=180)
        ha.onboard()
        agent = set_up_ollama(ha, oapd)
        yield fake, oapd, ha, agent, f"http://[::1]:{v6_port}"
    finally:
        for process in (hass_process, oapd_process, fake_process):
            process.terminate()
        for process in (hass_process, oapd_process, fake_process):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def set_up_ollama(ha, oapd):
    """The Ollama integration's own config flow, as the UI drives it: the URL
    (oapd's), then a model the server lacks, so HA pulls it; then the
    options flow selects the Assist API. Returns the conversation agent."""
    step = ha.call("POST", "/api/config/config_entries/flow", {"handler": "ollama", "show_advanced_options": False})
    assert step["type"] == "form" and step["step_id"] == "user", step
    step = ha.flow(step, {"url": oapd})
    assert step["type"] == "form" and not step.get("errors"), step
    step = ha.flow(step, {"model": MODEL})
    # The model is missing: HA pulls it, showing progress until the pull ends.
    assert step["type"] == "progress" and step["step_id"] == "download", step
    deadline = time.time() + 60
    while step["type"] in ("progress", "progress_done"):
        assert time.time() < deadline, f"the pull did not finish: {step}"
        if step["type"] == "progress":
            time.sleep(0.2)
            step = ha.call("GET", f"/api/config/config_entries/flow/{step['flow_id']}")
        else:
            step = ha.flow(step, {})
    assert step["type"] == "create_entry", step

    def entry():
        entries = ha.call("GET", "/api/config/config_entries/entry?domain=ollama")
        return entries[0] if entries and entries[0]["state"] == "loaded" else None

    created = wait_for("the Ollama config entry", entry)
    options = ha.call("POST", "/api/config/config_entries/options/flow", {"handler": created["entry_id"]})
    done = ha.call("POST", f"/api/config/config_entries/options/flow/{options['flow_id']}",
                   {"llm_hass_api": "assist", "max_history": 20, "num_ctx": 8192, "keep_alive": -1})
    assert done["type"] == "create_entry", done

    def controlling_agent():
        # The entry reloads with the new options; its entity then supports
        # control (feature 1).
        if not entry():
            return None
        for state in ha.call("GET", "/api/states"):
            if state["entity_id"].startswith("conversation.") and state["entity_id"] != "conversation.home_assistant":
                if state["attributes"].get("supported_features", 0) & 1:
                    return state["entity_id"]
        return None

    return wait_for("the Ollama conversation agent with the Assist API", controlling_agent)


@pytest.fixture
def home(stack):
    fake, oapd, ha, agent, untrusted = stack
    # Not a reset: that would forget the model HA pulled.
    http_json("DELETE", f"{fake.url}/_fake/requests")
    ha.call("POST", "/api/services/light/turn_off", {"entity_id": LIGHT})
    wait_for("the light to be off", lambda: ha.state(LIGHT) == "off")
    yield fake, ha, agent
    assert http_json("GET", f"{fake.url}/_fake/turns")["remaining"] == 0, "a scripted model turn was not used"


def speech(result):
    return result["response"]["speech"]["plain"]["speech"]


def offered(request):
    return [t["function"]["name"] for t in request.get("tools") or []]


def test_set_up_lists_and_pulls_the_model_through_oapd(stack):
    fake, oapd, ha, agent, untrusted = stack
    # HA listed the models (config flow, then entry set-up and reloads) and,
    # the model missing, pulled it: all through oapd, which let 127.0.0.1 in
    # without its token and did not pass its token on.
    tags = fake.requests("/api/tags")
    assert len(tags) >= 2 and all(r["status"] == 200 for r in tags)
    pulls = fake.requests("/api/pull")
    assert [r["body"]["model"] for r in pulls] == [MODEL]
    assert pulls[0]["status"] == 200
    assert all("authorization" not in r["headers"] for r in tags + pulls)
    models = [m["model"] for m in http_json("GET", f"{fake.url}/api/tags")["models"]]
    assert MODEL in models
    # The token is still required of every other address: ::1 is not in
    # trusted_clients, so there the same request needs it.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{untrusted}/api/tags", timeout=10)
    assert refused.value.code == 401
    request = urllib.request.Request(f"{untrusted}/api/tags", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert MODEL in [m["model"] for m in json.loads(response.read())["models"]]


def test_ha_tool_call_comes_back_to_ha_which_turns_the_light_on(home):
    fake, ha, agent = home
    fake.turns({"chunks": [{"tool_calls": [TURN_ON]}]}, {"reply": "The kitchen lights are on."})
    result = ha.process(agent, "turn on the kitchen lights")
    assert speech(result) == "The kitchen lights are on."
    assert ha.state(LIGHT) == "on"
    sent = fake.chat_requests()
    assert len(sent) == 2
    assert "HassTurnOn" in offered(sent[0])
    # HA's second round: its own call and the result of running it.
    follow = sent[1]["messages"]
    assert [c["function"]["name"] for c in follow[-2]["tool_calls"]] == ["HassTurnOn"]
    assert follow[-1]["role"] == "tool"
    assert "Kitchen Lights" in follow[-1]["content"]


def test_oapd_tool_runs_in_oapd_and_ha_sees_only_the_answer(home):
    fake, ha, agent = home
    fake.turns({"chunks": [{"tool_calls": [WC_CALL]}]}, {"echo": "last_tool"})
    result = ha.process(agent, "count the words in this text: one two three four")
    assert speech(result).strip() == "4"
    sent = fake.chat_requests()
    # Had HA seen oap_wc it would have answered the model "unknown tool"
    # in a third round.
    assert len(sent) == 2
    assert "oap_wc" in offered(sent[0]) and "HassTurnOn" in offered(sent[0])
    assert sent[1]["messages"][-1]["role"] == "tool" and sent[1]["messages"][-1]["content"].strip() == "4"
    assert ha.state(LIGHT) == "off"


def test_mixed_turn_runs_oapds_tool_once_and_ha_runs_its_own(home):
    fake, ha, agent = home
    fake.turns({"chunks": [{"tool_calls": [WC_CALL, TURN_ON]}]}, {"reply": "Four words, and the lights are on."})
    result = ha.process(agent, "count the words in this text: one two three four, and turn on the kitchen lights")
    assert speech(result) == "Four words, and the lights are on."
    assert ha.state(LIGHT) == "on"
    sent = fake.chat_requests()
    assert len(sent) == 2, "oapd ran wc in the first request only"
    follow = sent[1]["messages"]
    calls = [c["function"]["name"] for c in follow[-3]["tool_calls"]]
    assert calls == ["oap_wc", "HassTurnOn"]
    assert follow[-2]["role"] == "tool" and follow[-2]["content"].strip() == "4"
    assert follow[-1]["role"] == "tool" and "Kitchen Lights" in follow[-1]["content"]
